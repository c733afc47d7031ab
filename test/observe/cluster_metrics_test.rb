# frozen_string_literal: true

require "observe/support"
require "cluster/support"

# The numbers are right in cluster mode: after a scripted workload (requests
# of known statuses, some shed, one worker killed) one scrape of the master
# has every worker's series, labelled, and they add up to what was sent;
# the master's own series count the boots, the death and the restart.
class ClusterMetricsTest < Minitest::Test
  include Tsubame::ClusterHelpers
  include Tsubame::ObserveHelpers

  APP = <<~'RUBY'
    run lambda { |env|
      case env["PATH_INFO"]
      when "/missing" then [404, { "content-type" => "text/plain" }, ["nope"]]
      when "/fail" then [500, { "content-type" => "text/plain" }, ["fail"]]
      when "/create" then [201, { "content-type" => "text/plain" }, ["made"]]
      when "/slow"
        sleep 6
        [200, { "content-type" => "text/plain" }, ["late"]]
      else [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
      end
    }
  RUBY

  SENT = { ["2xx", "GET"] => 20, ["4xx", "GET"] => 7, ["5xx", "GET"] => 3 + 4, ["2xx", "POST"] => 5 }.freeze

  def test_a_scripted_workload_adds_up_across_workers
    log = File.join(Dir.mktmpdir("tsubame-obs"), "access.log")
    with_cluster(APP, workers: 2, args: ["--request-timeout", "3", "--health-check-path", "/up",
                                         "--access-log", "json", "--access-log-file", log]) do |s|
      port = s.port
      # Fresh connections, so both workers get some.
      20.times { assert_equal "200", request(port, "GET", "/").code }
      7.times { assert_equal "404", request(port, "GET", "/missing").code }
      3.times { assert_equal "500", request(port, "GET", "/fail").code }
      5.times { assert_equal "201", request(port, "POST", "/create", body: "abc").code }
      # Shed: 503 from the engine at the request timeout.
      4.times { assert_equal "503", request(port, "GET", "/slow").code }
      3.times { assert_equal "200", request(port, "GET", "/up").code }
      sent = SENT.values.sum

      text = wait_until(timeout: 15) do
        t = scrape_unix(s.control_path, Tsubame::ClusterServer::TOKEN)
        total(t, "tsubame_http_requests_total") >= sent ? t : nil
      end
      refute_nil text, "the workers never counted #{sent} requests"
      ok, out = promtool_check(text)
      assert ok, "promtool:\n#{out}\n#{text}"
      SENT.each do |(code, method), count|
        assert_equal count, total(text, "tsubame_http_requests_total", code: code, method: method), "#{code} #{method}"
      end
      assert_equal sent, total(text, "tsubame_http_requests_total")
      assert_equal 4, total(text, "tsubame_requests_shed_total", reason: "request_timeout")
      assert_equal 0, total(text, "tsubame_requests_shed_total", reason: "queue_full")
      assert_equal 3, total(text, "tsubame_probes_total", probe: "liveness", result: "ok")
      assert_equal sent, total(text, "tsubame_http_request_duration_seconds_count")
      assert_equal 15, total(text, "tsubame_http_request_body_bytes_total")
      # Labelled by worker; both served, and the master has its own.
      per_worker = %w[0 1].map { |w| total(text, "tsubame_http_requests_total", worker: w) }
      assert_equal sent, per_worker.sum
      assert_operator sample(text, "tsubame_process_resident_memory_bytes", worker: "master"), :>, 0
      assert_equal 2, sample(text, "tsubame_worker_boots_total")
      assert_equal 0, sample(text, "tsubame_worker_deaths_total")
      assert_equal 2, sample(text, "tsubame_workers")
      # The access log has the same requests, each with its worker.
      lines = wait_until(timeout: 10) { (l = File.readlines(log)).size >= sent && l }
      assert lines, "#{sent} access log lines"
      entries = lines.map { |line| JSON.parse(line) }
      assert_equal sent, entries.size
      assert_equal per_worker, [0, 1].map { |w| entries.count { |e| e["worker"] == w } }
      assert_equal 4, entries.count { |e| e["status"] == 503 && e["path"] == "/slow" && e["app"].nil? }

      # One worker killed: the master counts the death and the restart,
      # the replacement's series start from zero, the survivor's stay.
      victim = s.booted_workers[1]
      survivor_count = total(text, "tsubame_http_requests_total", worker: "0")
      Process.kill("KILL", victim)
      s.wait_until(20, "a replacement for worker 1") do
        pid = s.booted_workers[1]
        pid && pid != victim
      end
      after = wait_until(timeout: 10) do
        t = scrape_unix(s.control_path, Tsubame::ClusterServer::TOKEN)
        sample(t, "tsubame_worker_boots_total") == 3 ? t : nil
      end
      refute_nil after
      assert_equal 1, sample(after, "tsubame_worker_deaths_total")
      assert_equal 1, sample(after, "tsubame_worker_restarts_total", reason: "died")
      assert_equal 0, total(after, "tsubame_worker_kills_total")
      assert_equal survivor_count, total(after, "tsubame_http_requests_total", worker: "0")
      assert_equal 0, total(after, "tsubame_http_requests_total", worker: "1")
      ok, out = promtool_check(after)
      assert ok, out
      stats = s.stats
      assert_equal(%w[boot boot death boot], stats.dig("worker_events", "recent").map { |e| e["event"] })
    end
  ensure
    FileUtils.rm_rf(File.dirname(log)) if log
  end

  # A worker that cannot answer (stopped here with SIGSTOP) is left out of
  # the scrape after 2 s; the others' series and the master's still come.
  def test_a_silent_worker_is_left_out_of_the_scrape
    with_cluster(APP, workers: 2) do |s|
      victim = s.booted_workers[1]
      begin
        stop_process(victim)
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        text = scrape_unix(s.control_path, Tsubame::ClusterServer::TOKEN)
        took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
        assert_operator took, :>=, 1.9, "worker #{victim} of #{s.booted_workers} answered:\n#{text}"
        assert_operator took, :<, 10
        assert_operator sample(text, "tsubame_threads_max", worker: "0"), :>, 0
        assert_nil sample(text, "tsubame_threads_max", worker: "1")
        assert_equal 2, sample(text, "tsubame_workers")
        ok, out = promtool_check(text)
        assert ok, out
      ensure
        Process.kill("CONT", victim)
      end
    end
  end

  # HUP to the master: every worker reopens the access log file by name.
  def test_hup_reopens_every_workers_access_log
    dir = Dir.mktmpdir("tsubame-obs")
    log = File.join(dir, "access.log")
    with_cluster(APP, workers: 2, args: ["--access-log", "json", "--access-log-file", log]) do |s|
      pids = s.booted_workers.values
      seen = wait_until(timeout: 20) do
        request(s.port, "GET", "/")
        File.readlines(log).map { |line| JSON.parse(line)["worker"] }.uniq.sort == [0, 1]
      end
      assert seen, "both workers logged"
      File.rename(log, "#{log}.1")
      s.signal("HUP")
      sleep 0.5
      reopened = wait_until(timeout: 20) do
        request(s.port, "GET", "/?after")
        File.exist?(log) && File.readlines(log).map { |line| JSON.parse(line)["worker"] }.uniq.sort == [0, 1]
      end
      assert reopened, "both workers write to the new file"
      refute_match(/after/, File.read("#{log}.1"))
      assert_equal pids.sort, s.booted_workers.values.sort, "HUP restarted no worker"
    end
  ensure
    FileUtils.rm_rf(dir) if dir
  end
end
