# frozen_string_literal: true

require "cluster/support"

# TERM, USR1, USR2, TTIN/TTOU and HUP on a cluster, with a client sending
# requests all along: no request may fail, and a slow request in flight
# when the signal arrives completes.
class ClusterSignalsTest < Minitest::Test
  include Tsubame::ClusterHelpers

  def setup
    @mark_dir = Dir.mktmpdir("tsubame-mark")
    @mark = File.join(@mark_dir, "slow")
  end

  def teardown
    FileUtils.rm_rf(@mark_dir)
  end

  def marked
    { "SLOW_MARK" => @mark }
  end

  # Answers "<version> <pid>"; the version is read when the rackup file is
  # loaded, so rewriting the file shows which workers run new code.
  def versioned_app(version)
    <<~RUBY
      VERSION_SEEN = #{version.inspect}
      run lambda { |env|
        if env["PATH_INFO"] == "/slow"
          File.write(ENV["SLOW_MARK"], "") if ENV["SLOW_MARK"]
          sleep Float(env["QUERY_STRING"])
        end
        [200, { "content-type" => "text/plain" }, ["\#{VERSION_SEEN} \#{Process.pid}"]]
      }
    RUBY
  end

  # refused: whether a refused connection is allowed (after a stop it is;
  # during a restart the listener must never close).
  def assert_no_failures(load, refused: false)
    assert_empty load.failures.map(&:detail), "no request failed"
    assert_empty load.refused.map(&:detail), "no connection was refused" unless refused
    assert_operator load.ok.size, :>, 20, "the load kept running"
  end

  def test_term_drains_in_flight_requests_and_exits_0
    request_log = File.join(@mark_dir, "requests")
    with_cluster(PID_APP, workers: 2, env: marked.merge("REQUEST_LOG" => request_log)) do |s|
      workers = s.booted_workers.values
      load = Tsubame::LoadLoop.new(s.port)
      sleep 0.3
      slow = slow_request(s, 1.5, @mark)
      status = s.stop("TERM")
      load.stop
      assert_equal 0, status.exitstatus
      assert_equal "200", slow.value.first, "the slow request in flight completed: #{slow.value}"
      # A connection still in the kernel's accept queue when the last copy
      # of the listener closes is reset: no server can avoid that. Such a
      # request never reached the app (so it is as safe to retry as a
      # refused one); any request that did reach it got its response.
      reached = File.readlines(request_log).map { |line| line[/id=(\d+)/, 1].to_i }
      reset = load.failures.select { |r| r.detail.start_with?("Errno::ECONNRESET") && !reached.include?(r.id) }
      assert_empty (load.failures - reset).map(&:detail), "no request that reached the server failed"
      assert_operator reset.size, :<=, 2, "at most one reset per client, at the moment the listener closed"
      assert_operator load.ok.size, :>, 20
      refute_empty load.refused, "clients arriving after the stop are refused, not left waiting"
      refute(workers.any? { |pid| s.alive?(pid) })
      assert_match(/Gracefully stopping/, s.stdout)
    end
  end

  def test_usr1_replaces_workers_one_at_a_time_with_new_code
    with_cluster(versioned_app("v1"), workers: 2, env: marked) do |s|
      old = s.booted_workers.values
      File.write(s.rackup_path, Tsubame::TestHelpers.linted(versioned_app("v2")))
      load = Tsubame::LoadLoop.new(s.port)
      sleep 0.3
      slow = slow_request(s, 1.5, @mark)
      s.signal("USR1")
      s.wait_until(15, "phased restart done") { s.stdout.include?("Phased restart done") }
      s.wait_until(10, "the old workers to drain and exit") { old.none? { |pid| s.alive?(pid) } }
      sleep 0.3
      load.stop

      assert_no_failures(load)
      assert_equal "200", slow.value.first, "the slow request in flight completed: #{slow.value}"
      new_workers = s.wait_for_workers(2, phase: 1)
      assert_empty new_workers.values & old
      versions = Array.new(10) { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")).split.first }.uniq
      assert_equal ["v2"], versions
      assert_equal 1, s.stats["phase"]
      # One at a time: each old worker stops only after its replacement booted.
      log = s.stdout
      first_stop = log.index(/Worker \d \(PID: #{old[0]}\) stopped|Worker \d \(PID: #{old[1]}\) stopped/)
      assert_operator log.index(/booted in [\d.]+s, phase: 1/), :<, first_stop
    end
  end

  def test_usr1_is_refused_under_preload
    with_cluster(PID_APP, workers: 1, args: ["--preload"]) do |s|
      s.signal("USR1")
      s.wait_until(5, "the refusal") { s.stderr.include?("phased restart (USR1) is not available with preload_app!") }
      assert_equal 0, s.stats["phase"]
    end
  end

  def test_usr2_reexecs_the_master_keeping_the_listener
    with_cluster(versioned_app("v1"), workers: 2, env: marked) do |s|
      old = s.booted_workers.values
      File.write(s.rackup_path, Tsubame::TestHelpers.linted(versioned_app("v2")))
      load = Tsubame::LoadLoop.new(s.port)
      sleep 0.3
      slow = slow_request(s, 1.5, @mark)
      s.signal("USR2")
      s.wait_until(20, "new workers") do
        now = s.booted_workers
        now.size == 2 && (now.values & old).empty? && old.none? { |pid| s.alive?(pid) }
      end
      sleep 0.3
      load.stop

      assert_no_failures(load)
      assert_equal "200", slow.value.first, "the slow request in flight completed: #{slow.value}"
      assert_equal 2, s.stdout.scan("Tsubame starting in cluster mode").size, "the master re-executed"
      assert s.alive?(s.pid), "same master pid"
      versions = Array.new(10) { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")).split.first }.uniq
      assert_equal ["v2"], versions
      assert_equal 0, s.stop("TERM").exitstatus
    end
  end

  def test_usr2_with_an_app_that_cannot_boot_keeps_the_old_workers_serving
    with_cluster(versioned_app("v1"), workers: 2) do |s|
      old = s.booted_workers.values
      File.write(s.rackup_path, "raise 'broken deploy'\n")
      load = Tsubame::LoadLoop.new(s.port)
      s.signal("USR2")
      s.wait_until(15, "the new workers to fail") { s.stderr.scan(/died while booting/).size >= 5 }
      sleep 0.3
      load.stop
      assert_no_failures(load)
      assert(old.all? { |pid| s.alive?(pid) }, "the old workers still serve")
      assert_match(/workers keep failing to boot; retrying in/, s.stderr)
      assert_equal ["v1"], Array.new(5) { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")).split.first }.uniq
      assert s.alive?(s.pid)
    end
  end

  def test_ttin_and_ttou_change_the_worker_count
    with_cluster(PID_APP, workers: 2) do |s|
      s.signal("TTIN")
      s.wait_for_workers(3)
      assert_equal 3, s.stats["workers"]
      # One at a time: the kernel merges a signal sent while the same one
      # is still pending.
      s.signal("TTOU")
      s.wait_until(10, "two workers") { s.stats["workers"] == 2 }
      s.signal("TTOU")
      s.wait_until(10, "one worker") { s.stats["workers"] == 1 && s.stats["worker_status"].size == 1 }
      assert_equal [0], s.booted_workers.keys
      s.signal("TTOU")
      sleep 0.3
      assert_equal 1, s.stats["workers"], "never below one"
    end
  end

  def test_hup_reopens_the_redirected_logs_in_master_and_workers
    in_tmpdir do |dir|
      out = File.join(dir, "out.log")
      config = %(stdout_redirect "#{out}", "#{File.join(dir, "err.log")}", true\n)
      with_cluster(PID_APP, workers: 1, config: config, args: ["--log-requests"]) do |s|
        Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/before"))
        s.wait_until(5, "the request log") { File.read(out).include?("/before") }
        File.rename(out, "#{out}.1")
        s.signal("HUP")
        s.wait_until(5, "the reopened log") { File.exist?(out) && File.read(out).include?("Log files reopened") }
        Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/after"))
        s.wait_until(5, "the worker's request log in the new file") { File.read(out).include?("/after") }
        refute_includes File.read("#{out}.1"), "/after"
        assert s.alive?(s.pid), "HUP with stdout_redirect does not stop the server"
      end
    end
  end
end
