# frozen_string_literal: true

require "cluster/support"

# fork_worker (docs/REFORK.md): workers 1.. are forked from worker 0, and
# re-forked from it on a refork (request count, `ctl refork`, URG); phased
# restarts replace worker 0 first, then fork the rest from the new one.
class ClusterReforkTest < Minitest::Test
  include Tsubame::ClusterHelpers

  # Answers "pid ppid" and, on /mark, the value the worker's process got
  # from worker 0's heap: a constant set by the before_refork hook.
  APP = <<~RUBY
    run lambda { |env|
      mark = defined?($refork_mark) ? $refork_mark.to_s : "none"
      [200, { "content-type" => "text/plain" }, ["\#{Process.pid} \#{Process.ppid} \#{mark}"]]
    }
  RUBY

  def config(dir, count: 0, extra: "")
    <<~RUBY
      fork_worker #{count}
      worker_check_interval 0.2
      before_refork { $refork_mark = Process.pid; File.write("#{dir}/before-\#{Process.pid}", "", mode: "a") }
      after_refork { File.write("#{dir}/after-\#{Process.pid}", "x", mode: "a") }
      on_refork { File.write("#{dir}/on-\#{Process.pid}", "x", mode: "a") }
      before_worker_fork { |i| File.write("#{dir}/forks", "\#{i}:\#{Process.pid}\n", mode: "a") }
      #{extra}
    RUBY
  end

  def parent_of(pid)
    File.read("/proc/#{pid}/stat")[/\) \S+ (\d+)/, 1].to_i
  end

  def test_workers_fork_from_worker_zero_and_refork_replaces_them
    Dir.mktmpdir do |dir|
      with_cluster(APP, workers: 3, config: config(dir)) do |s|
        pids = s.wait_for_workers(3)
        master = s.pid
        assert_equal master, parent_of(pids[0]), "worker 0 is the master's child"
        assert_equal pids[0], parent_of(pids[1]), "worker 1 is forked from worker 0"
        assert_equal pids[0], parent_of(pids[2])
        # The first batch ran the hooks in worker 0, with its server stopped.
        assert File.exist?("#{dir}/before-#{pids[0]}")
        assert_equal "x", File.read("#{dir}/after-#{pids[0]}")
        assert_equal "x", File.read("#{dir}/on-#{pids[0]}"), "on_refork is Puma's older name of before_refork"
        assert_equal ["0:#{master}", "1:#{pids[0]}", "2:#{pids[0]}"], File.read("#{dir}/forks").split.sort,
                     "before_worker_fork runs in the process that forks"
        assert_match(/Restarts: .* refork \(URG\) yes/, s.stdout)

        answer = s.control("refork")
        assert_equal "refork started", answer["message"]
        s.wait_until(15, "workers 1 and 2 replaced") do
          now = s.booted_workers(1)
          now.size == 3 && now[1] != pids[1] && now[2] != pids[2] && !s.alive?(pids[1]) && !s.alive?(pids[2])
        end
        now = s.booted_workers(1)
        assert_equal pids[0], now[0], "a refork keeps worker 0"
        [1, 2].each { |i| assert_equal pids[0], parent_of(now[i]) }
        assert_equal "xx", File.read("#{dir}/after-#{pids[0]}"), "after_refork ran once per batch"
        assert_match(/- Starting worker refork, phase: 1 \(refork requested\)/, s.stdout)
        s.wait_until(15, "the refork's end") { s.stdout.include?("- Refork done, phase: 1") }

        # URG does the same.
        Process.kill("URG", master)
        s.wait_until(15, "a second refork") { s.stdout.include?("- Refork done, phase: 2") }
        assert_equal 3, s.wait_for_workers(3, phase: 2).size

        # Every answer comes from a worker whose heap has worker 0's mark.
        marks = Array.new(12) { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")).split }
        assert(marks.all? { |_, _, mark| mark == pids[0].to_s }, marks.inspect)
      end
    end
  end

  def test_refork_after_worker_zero_served_the_count
    Dir.mktmpdir do |dir|
      with_cluster(APP, workers: 2, config: config(dir, count: 30), args: ["-t", "1:1"]) do |s|
        pids = s.wait_for_workers(2)
        refute s.stdout.include?("Starting worker refork"), "no refork before the count"
        # Worker 0 must serve 30: ask until the master has started it.
        s.wait_until(30, "the automatic refork") do
          4.times { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")) }
          s.stdout.include?("- Refork done, phase: 1")
        end
        assert_match(/Starting worker refork, phase: 1 \(worker 0 served (\d+) requests, fork_worker 30\)/, s.stdout)
        served = s.stdout[/worker 0 served (\d+) requests/, 1].to_i
        assert_operator served, :>=, 30
        now = s.wait_for_workers(2, phase: 1)
        assert_equal pids[0], now[0]
        refute_equal pids[1], now[1]
        # Once: more requests start no second refork.
        40.times { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")) }
        sleep 1
        assert_equal 1, s.stdout.scan("Starting worker refork").size
      end
    end
  end

  def test_phased_restart_replaces_worker_zero_first_then_forks_from_it
    Dir.mktmpdir do |dir|
      with_cluster(APP, workers: 3, config: config(dir)) do |s|
        pids = s.wait_for_workers(3)
        load = Tsubame::LoadLoop.new(s.port)
        s.control("phased-restart")
        now = s.wait_for_workers(3, phase: 1, timeout: 30)
        s.wait_until(15, "old workers gone") { pids.values.none? { |pid| s.alive?(pid) } }
        load.stop
        assert_empty load.failures.map(&:detail), "no request failed during the phased restart"
        assert_equal s.pid, parent_of(now[0])
        [1, 2].each { |i| assert_equal now[0], parent_of(now[i]), "worker #{i} forked from the new worker 0" }
        s.wait_until(15, "the phased restart's end") { s.stdout.include?("- Phased restart done, phase: 1") }
        log = s.stdout
        assert_operator log.index(/Worker 0 \(PID: #{now[0]}\) booted/), :<, log.index(/Worker 1 \(PID: #{now[1]}\) booted/)
      end
    end
  end

  def test_a_dead_forked_worker_is_forked_again_and_stop_reaches_every_worker
    Dir.mktmpdir do |dir|
      with_cluster(APP, workers: 2, config: config(dir)) do |s|
        pids = s.wait_for_workers(2)
        Process.kill("KILL", pids[1])
        s.wait_until(15, "worker 1 forked again") { (p = s.booted_workers[1]) && p != pids[1] }
        again = s.booted_workers[1]
        assert_equal pids[0], parent_of(again)
        assert_match(/Worker 1 \(PID: #{pids[1]}\) died: exited \(not the master's child/, s.stderr)
        # Worker 0 is forked again from the master; worker 1 serves on.
        Process.kill("KILL", pids[0])
        s.wait_until(15, "worker 0 forked again") { (p = s.booted_workers[0]) && p != pids[0] }
        zero = s.booted_workers[0]
        assert_equal s.pid, parent_of(zero)
        assert s.alive?(again)
        Process.kill("TERM", s.pid)
        s.wait_until(15, "every worker stopped") { !s.alive?(again) && !s.alive?(zero) }
        s.wait_until(15, "the master's goodbye") { s.stdout.include?("Goodbye") }
      end
    end
  end

  def test_refork_without_fork_worker_is_refused
    with_cluster(APP, workers: 1) do |s|
      ctl = IO.popen([RbConfig.ruby, "-Ilib", Tsubame::TestHelpers::EXE, "ctl", "-C", "unix://#{s.control_path}",
                      "-T", Tsubame::ClusterServer::TOKEN, "refork"], err: %i[child out], &:read)
      assert_match(/refork: refork needs fork_worker \(HTTP 409\)/, ctl)
    end
  end

  def test_stats_report_each_workers_memory
    with_cluster(APP, workers: 2, config: "fork_worker 0\n") do |s|
      s.wait_for_workers(2)
      stats = s.stats
      stats["worker_status"].each do |worker|
        memory = worker["memory"]
        assert memory, "memory of #{worker["pid"]}"
        assert_operator memory["rss_mb"], :>, 1
        assert_operator memory["pss_mb"], :<=, memory["rss_mb"]
        assert_operator memory["uss_mb"], :<=, memory["pss_mb"]
        assert_operator memory["uss_mb"], :>, 0
      end
      total = stats["workers_memory"]
      assert_in_delta stats["worker_status"].sum { |w| w["memory"]["pss_mb"] }, total["pss_mb"], 0.2
      ctl = IO.popen([RbConfig.ruby, "-Ilib", Tsubame::TestHelpers::EXE, "ctl", "-C", "unix://#{s.control_path}",
                      "-T", Tsubame::ClusterServer::TOKEN, "stats"], err: %i[child out], &:read)
      assert_match(/rss MB +pss MB +uss MB/, ctl)
      assert_match(/workers' memory: rss [\d.]+ MB, pss [\d.]+ MB, uss [\d.]+ MB; master: pss [\d.]+ MB/, ctl)
    end
  end

  # A hot restart's new master adopts the old workers, those worker 0
  # forked too (they are not its children), and stops them once its own
  # serve.
  def test_hot_restart_retires_the_workers_forked_from_worker_zero
    with_cluster(APP, workers: 2, config: "fork_worker 0\n") do |s|
      pids = s.wait_for_workers(2)
      Process.kill("USR2", s.pid)
      s.wait_until(60, "new workers serving and the old ones gone") do
        now = s.booted_workers
        now.size == 2 && (now.values & pids.values).empty? && pids.values.none? { |pid| s.alive?(pid) }
      end
      assert_match(/\* Hot restart: 2 old worker\(s\) serve until the new ones boot/, s.stdout)
      s.wait_until(15, "the forked old worker's end logged") do
        s.stdout.match?(/Old worker \(PID: #{pids[1]}\) stopped \(replaced by hot restart\)/)
      end
    end
  end

  # A stop that comes while worker 0 forks a batch: worker 0 does not serve
  # again, it exits as soon as the batch is done.
  def test_a_stop_during_a_batch_stops_worker_zero
    Dir.mktmpdir do |dir|
      config = <<~RUBY
        fork_worker 0
        before_refork do
          File.write("#{dir}/in-hook", "")
          sleep 2 if File.exist?("#{dir}/slow")
        end
      RUBY
      with_cluster(APP, workers: 2, config: config) do |s|
        pids = s.wait_for_workers(2)
        File.write("#{dir}/slow", "")
        File.delete("#{dir}/in-hook")
        s.control("refork")
        s.wait_until(10, "worker 0 in before_refork") { File.exist?("#{dir}/in-hook") }
        started = monotonic
        Process.kill("TERM", s.pid)
        s.wait_until(20, "the master's goodbye") { s.stdout.include?("- Goodbye!") }
        assert_operator monotonic - started, :<, 15, "well within worker_shutdown_timeout (35 s)"
        assert_match(/Worker 0 \(PID: #{pids[0]}\) stopped \(shutting down\): exit status 0/, s.stdout)
        refute_match(/killing it/, s.stderr)
      end
    end
  end

  # A stop that reaches a worker worker 0 forked while it boots (here in
  # on_worker_boot, before its server exists; the master TERMs it as soon
  # as it reports its pid): it stops at once, as a stop and not a failed
  # boot, and the master finishes stopping.
  def test_a_stop_while_a_forked_worker_boots_stops_it
    Dir.mktmpdir do |dir|
      config = <<~RUBY
        fork_worker 0
        on_worker_boot do |index|
          if index == 1 && File.exist?("#{dir}/slow")
            File.write("#{dir}/booting", Process.pid.to_s)
            sleep 10
            File.write("#{dir}/slept", "")
          end
        end
      RUBY
      with_cluster(APP, workers: 2, config: config) do |s|
        s.wait_for_workers(2)
        File.write("#{dir}/slow", "")
        s.control("refork")
        booting = s.wait_until(15, "the new worker 1 in on_worker_boot") do
          File.exist?("#{dir}/booting") && File.read("#{dir}/booting").to_i.nonzero?
        end
        started = monotonic
        status = s.stop("TERM", timeout: 30)
        assert_operator monotonic - started, :<, 8, "stopped before on_worker_boot's 10 s sleep was over"
        assert_equal 0, status&.exitstatus, s.stdout + s.stderr
        assert_includes s.stdout, "- Goodbye!"
        assert_match(/Worker 1 \(PID: #{booting}\) stopped \(shutting down\)/, s.stdout)
        refute_match(/failed to boot|died while booting/, s.stdout + s.stderr)
        refute File.exist?("#{dir}/slept"), "the worker did not finish booting"
      end
    end
  end

  def test_single_mode_stats_report_the_process_memory
    Dir.mktmpdir do |dir|
      sock = File.join(dir, "ctl.sock")
      server = Tsubame::TestServer.new(APP, args: ["--control-url", "unix://#{sock}", "--control-token", "t"])
      ctl = IO.popen([RbConfig.ruby, "-Ilib", Tsubame::TestHelpers::EXE, "ctl", "-C", "unix://#{sock}", "-T", "t",
                      "stats"], err: %i[child out], &:read)
      assert_match(/^memory: rss [\d.]+ MB, pss [\d.]+ MB, uss [\d.]+ MB$/, ctl)
      json = IO.popen([RbConfig.ruby, "-Ilib", Tsubame::TestHelpers::EXE, "ctl", "-C", "unix://#{sock}", "-T", "t",
                       "--json", "stats"], &:read)
      memory = JSON.parse(json)["memory"]
      assert_operator memory["pss_mb"], :>, 0
      assert_operator memory["uss_mb"], :<=, memory["rss_mb"]
    ensure
      server&.kill
    end
  end

  # Recycling replaces a forked worker with a new fork of worker 0, and
  # worker 0 with a new child of the master, one at a time as before.
  def test_worker_max_requests_recycles_forked_workers
    config = "fork_worker 0\nworker_check_interval 0.2\nworker_max_requests 40\n"
    with_cluster(APP, workers: 2, config: config) do |s|
      first = s.wait_for_workers(2)
      load = Tsubame::LoadLoop.new(s.port)
      s.wait_until(30, "both first workers replaced") do
        first.values.none? { |pid| s.alive?(pid) } && s.stdout.include?("Worker 1 (PID: #{first[1]}) stopped")
      end
      load.stop
      assert_empty load.failures.map(&:detail), "no request failed"
      now = s.wait_for_workers(2)
      # Once a replacement under way is done, one worker per index (not a
      # fork more for each check-in over the limit).
      s.wait_until(20, "one worker per index") do
        s.stats["worker_status"].reject { |w| w["stopping"] }.map { |w| w["index"] }.sort == [0, 1]
      end
      assert_match(/Worker 1 \(PID: #{first[1]}\) served \d+ requests \(worker_max_requests 40\); starting its/, s.stdout)
      assert_match(/Worker 1 \(PID: #{first[1]}\) stopped \(replaced by PID \d+\)/, s.stdout)
      assert_operator s.stdout.scan(/- Worker 1 forked from worker 0/).size, :>=, 2, "its replacement is a fork too"
      assert_equal 2, now.size
    end
  end
end
