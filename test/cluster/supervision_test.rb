# frozen_string_literal: true

require "cluster/support"

# The master replaces workers that die or hang, and gives up on a boot loop
# instead of forking forever.
class ClusterSupervisionTest < Minitest::Test
  include Tsubame::ClusterHelpers

  def test_a_killed_worker_is_replaced_and_only_its_requests_in_flight_fail
    with_cluster(PID_APP, workers: 2) do |s|
      victim = s.booted_workers[0]
      load = Tsubame::LoadLoop.new(s.port, clients: 3)
      sleep 0.5
      signalled_at = monotonic
      Process.kill("KILL", victim)
      # "After the kill" starts once the victim is gone (reaped by the
      # master): a request that a client sent between the signal and the
      # victim's exit may still have been accepted by the victim, and is
      # one of those in flight.
      s.wait_until(2, "worker 0 to exit") { !s.alive?(victim) }
      killed_at = monotonic
      replaced = s.wait_until(5, "a replacement for worker 0") do
        pid = s.booted_workers[0]
        pid if pid && pid != victim
      end
      replaced_after = monotonic - signalled_at
      sleep 0.5
      load.stop

      assert_operator replaced_after, :<, 1.5, "replaced (booted, not just forked) within about a second"
      refute s.alive?(victim)
      started_after_kill = load.all.select { |r| r.started > killed_at }
      assert_operator started_after_kill.size, :>, 20
      assert_empty started_after_kill.reject { |r| r.outcome == :ok }, "every request sent after the kill succeeds"
      assert_operator load.failures.size, :<=, 3, "at most the requests in flight on the killed worker fail"
      assert_match(/Worker 0 \(PID: #{victim}\) died: killed by SIGKILL/, s.stderr)
      assert_includes pids_until(s, replaced), replaced
    end
  end

  def test_a_stopped_worker_is_detected_by_worker_timeout_and_replaced
    config = "worker_timeout 2\nworker_check_interval 0.2\n"
    with_cluster(PID_APP, workers: 2, config: config) do |s|
      victim = s.booted_workers[1]
      stopped_at = monotonic
      Process.kill("STOP", victim)
      replaced = s.wait_until(8, "a replacement for worker 1") do
        pid = s.booted_workers[1]
        pid if pid && pid != victim
      end
      detected_after = monotonic - stopped_at
      assert_operator detected_after, :>=, 1.9, "not before worker_timeout"
      assert_operator detected_after, :<, 4.0, "soon after worker_timeout"
      assert_match(/Worker 1 \(PID: #{victim}\) has not checked in for 2\.\d+s \(worker_timeout 2\.0\); hung; kill/,
                   s.stderr)
      s.wait_until(3, "the stopped worker to be reaped") { !s.alive?(victim) }
      assert_includes pids_until(s, replaced), replaced
    end
  end

  # A busy worker is not a hung one: its check-ins come from their own
  # thread, so a request that keeps the app busy longer than
  # worker_timeout does not get the worker killed.
  def test_a_busy_worker_keeps_checking_in
    config = "worker_timeout 1\nworker_check_interval 0.2\n"
    app = <<~RUBY
      run lambda { |env|
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 2
        x = 0
        x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        [200, {}, [Process.pid.to_s]]
      }
    RUBY
    with_cluster(app, workers: 1, config: config, args: %w[-t 1]) do |s|
      worker = s.booted_workers[0]
      assert_equal worker, get_pid(s), "the CPU-bound request completes"
      refute_match(/killing it/, s.stderr)
    end
  end

  def test_a_boot_loop_is_reported_and_the_master_exits_1
    started = monotonic
    out, err, status = in_tmpdir do |dir|
      File.write(File.join(dir, "config.ru"), "raise 'no database'\n")
      run_tsubame("-w", "2", "-b", "tcp://127.0.0.1:0", File.join(dir, "config.ru"))
    end
    assert_equal 1, status.exitstatus
    assert_operator monotonic - started, :<, 10
    assert_match(/boot loop: the last 5 workers all died while booting \(last: exit status 1\)/, err)
    assert_match(/RuntimeError: no database/, err, "the cause is shown")
    # Two were booting at once when the limit was reached; then no more forks.
    assert_includes 5..6, err.scan(/died while booting/).size
    assert_match(/- Goodbye!/, out)
  end

  def test_a_worker_that_does_not_boot_in_time_is_killed
    app = "sleep 30\nrun ->(env) { [200, {}, []] }\n"
    config = "worker_boot_timeout 1\n"
    server = Tsubame::TestServer.new(app, args: ["-w", "1", "-C", write_config(config)])
    # The kill is logged first, the reap a moment later.
    Timeout.timeout(10) do
      sleep 0.1 until server.stderr.include?("did not boot within 1.0s") && server.stderr.include?("died while booting")
    end
    assert_match(/Worker 0 \(PID: \d+\) died while booting: killed by SIGKILL/, server.stderr)
  ensure
    server&.kill
  end

  private

  def write_config(text)
    @config_dir = Dir.mktmpdir("tsubame-cfg")
    path = File.join(@config_dir, "c.rb")
    File.write(path, text)
    path
  end

  def teardown
    FileUtils.rm_rf(@config_dir) if @config_dir
  end
end
