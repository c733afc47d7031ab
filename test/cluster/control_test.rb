# frozen_string_literal: true

require "cluster/support"
require "time"
require "yaml"

# The control app and `tsubame ctl`, in cluster and single mode.
class ClusterControlTest < Minitest::Test
  include Tsubame::ClusterHelpers

  def ctl(server, *args, token: Tsubame::ClusterServer::TOKEN)
    run_tsubame("ctl", "--control-url", "unix://#{server.control_path}", "--control-token", token, *args)
  end

  def test_stats_keep_pumas_field_names_and_add_tsubames
    with_cluster(PID_APP, workers: 2) do |s|
      3.times { get_pid(s) }
      s.wait_until(5, "a check-in with the requests") do
        s.stats["worker_status"].sum { |w| w.dig("last_status", "requests_count").to_i } == 3
      end
      out, err, status = ctl(s, "--json", "stats")
      assert status.success?, err
      stats = JSON.parse(out)
      assert_equal [2, 2, 0], stats.values_at("workers", "booted_workers", "phase")
      assert_equal 2, stats["worker_status"].size
      stats["worker_status"].each do |worker|
        assert_equal %w[booted index last_checkin last_status phase pid started_at], (worker.keys & %w[
          pid index phase booted last_checkin last_status started_at
        ]).sort
        assert worker["booted"]
        assert_kind_of Integer, worker["pid"]
        assert Time.iso8601(worker["last_checkin"])
        status = worker["last_status"]
        %w[backlog running pool_capacity busy_threads max_threads requests_count].each do |field|
          assert_kind_of Integer, status[field], field
        end
        assert_equal 5, status["max_threads"]
        # Tsubame's own.
        assert_operator worker["rss_mb"], :>, 1
        assert_kind_of Integer, status["requests_in_flight"]
        assert_kind_of Numeric, status.dig("engine", "queue_wait_p99_ms")
      end

      out, = ctl(s, "stats")
      assert_match(/cluster, master pid #{s.pid}, up \d+h\d\dm\d\ds, phase 0/, out)
      assert_match(/workers: 2 \(2 booted, 0 old\)/, out)
      s.booted_workers.each_value { |pid| assert_match(/^\s+\d\s+#{pid}\s+0\s+yes\s+[\d.]+s ago\s+0\/5/, out) }
    end
  end

  def test_the_token_is_required
    with_cluster(PID_APP, workers: 1) do |s|
      _, err, status = ctl(s, "stats", token: "wrong")
      assert_equal 1, status.exitstatus
      assert_match(/tsubame ctl: stats: invalid token \(HTTP 403\)/, err)
      raw = UNIXSocket.open(s.control_path) do |socket|
        socket.write("GET /stop HTTP/1.1\r\nHost: x\r\n\r\n")
        socket.read
      end
      assert_match(%r{\AHTTP/1\.1 403 }, raw)
      assert s.alive?(s.pid), "a refused stop did nothing"
    end
  end

  def test_worker_count_up_and_down_and_ttin_change_what_stats_report
    with_cluster(PID_APP, workers: 1) do |s|
      out, = ctl(s, "worker-count-up")
      assert_equal "Command worker-count-up sent: adding a worker\n", out
      s.wait_for_workers(2)
      s.signal("TTIN")
      s.wait_for_workers(3)
      out, = ctl(s, "stats")
      assert_match(/workers: 3 \(3 booted, 0 old\)/, out)
      ctl(s, "worker-count-down")
      s.wait_until(10, "two workers") { s.stats["worker_status"].size == 2 }
      s.signal("TTOU")
      s.wait_until(10, "one worker") { s.stats["worker_status"].size == 1 }
      out, = ctl(s, "stats")
      assert_match(/workers: 1 \(1 booted, 0 old\)/, out)
    end
  end

  def test_gc_backtraces_and_phased_restart
    with_cluster(PID_APP, workers: 2) do |s|
      workers = s.booted_workers.values
      out, = ctl(s, "gc")
      assert_equal [s.pid, *workers].sort, out[/pids (.*)$/, 1].split(", ").map(&:to_i).sort

      out, = ctl(s, "--json", "thread-backtraces")
      threads = JSON.parse(out)
      assert(threads.any? { |t| t["process"] == "master" && t["pid"] == s.pid })
      workers.each do |pid|
        assert(threads.any? { |t| t["pid"] == pid && t["name"] == "tsubame-0" }, "app threads of #{pid}")
      end
      out, = ctl(s, "thread-backtraces")
      assert_match(/^== pid #{workers.first} \(worker\) tsubame-0$/, out)

      ctl(s, "phased-restart")
      s.wait_for_workers(2, phase: 1)
      assert_empty s.booted_workers(1).values & workers
    end
  end

  def test_stop_and_halt
    with_cluster(PID_APP, workers: 1) do |s|
      out, = ctl(s, "stop")
      assert_equal "Command stop sent: stopping\n", out
      assert_equal 0, Timeout.timeout(10) { Process.wait2(s.pid).last.exitstatus }
    end
    in_tmpdir do |dir|
      mark = File.join(dir, "slow")
      with_cluster(PID_APP, workers: 1, env: { "SLOW_MARK" => mark }) do |s|
        halt_cuts_requests(s, mark)
      end
    end
  end

  def halt_cuts_requests(s, mark)
    worker = s.booted_workers[0]
    slow = slow_request(s, 5, mark)
    started = monotonic
    ctl(s, "halt")
    assert_equal 0, Timeout.timeout(10) { Process.wait2(s.pid).last.exitstatus }
    assert_operator monotonic - started, :<, 3, "halt does not wait for the slow request"
    refute s.alive?(worker)
    refute_equal "200", slow.value.first, "the request in flight was cut"
  end

  def test_state_file_and_single_mode
    in_tmpdir do |dir|
      state = File.join(dir, "state.yml")
      ctl_sock = File.join(dir, "ctl.sock")
      with_server(PID_APP, env: { "SLOW_MARK" => File.join(dir, "slow") },
                           args: ["-t", "1", "-S", state, "--control-url", "unix://#{ctl_sock}",
                                  "--control-token", "secret"]) do |s|
        Timeout.timeout(5) { sleep 0.02 until File.exist?(state) }
        assert_equal s.pid, YAML.safe_load(File.read(state))["pid"]
        # Long enough that `tsubame ctl` (a Ruby process) starts and asks
        # within it, even on a loaded machine.
        slow = slow_request(s, 4, File.join(dir, "slow"))
        out, err, status = run_tsubame("ctl", "-S", state, "--json", "stats")
        assert status.success?, err
        stats = JSON.parse(out)
        assert_equal "single", stats["mode"]
        # Answered while the only app thread is busy: the stats still show
        # the slow request running.
        assert_equal [1, 0, 1, 1], stats.values_at("max_threads", "pool_capacity", "busy_threads", "requests_in_flight")
        %w[started_at backlog running requests_count].each { |field| assert stats.key?(field), field }
        slow.join
        _, err, status = run_tsubame("ctl", "-S", state, "worker-count-up")
        assert_equal 1, status.exitstatus
        assert_match(/needs cluster mode/, err)
        run_tsubame("ctl", "-S", state, "stop")
        assert_equal 0, Timeout.timeout(10) { Process.wait2(s.pid).last.exitstatus }
        refute File.exist?(state), "the state file is removed on exit"
      end
    end
  end
end
