# frozen_string_literal: true

require "cluster/support"

# A cluster hot restart (USR2) re-executes the master in place; if the new
# master could not start (a broken config, or an app that raises while
# preloading) the old workers would see their master gone and stop, and
# the service would go down. So the master first loads the new config (and
# a preloaded app) in a check child and re-executes only once that exits
# 0. These tests break a running cluster's config or app, send USR2, and
# check that the old workers serve all along, the master stays the same
# process, and the log says why; then they fix it and restart for real.
class ClusterHotRestartCheckTest < Minitest::Test
  include Tsubame::ClusterHelpers

  # Answers "<version> <pid>". The version is read from $VERSION_FILE as
  # the rackup file loads; while $BROKEN_MARK exists the app raises as it
  # loads; while $SLOW_BOOT exists it first sleeps that many seconds. The
  # hot restart's handover variable must never be visible to the app,
  # whichever process loads it (check, re-executed master or worker).
  APP = <<~RUBY
    raise "the hot restart handover is visible to the app" if ENV.key?("TSUBAME_HOT_RESTART")
    sleep Float(File.read(ENV["SLOW_BOOT"])) if File.exist?(ENV["SLOW_BOOT"])
    raise "broken deploy: \#{ENV["BROKEN_MARK"]} exists" if File.exist?(ENV["BROKEN_MARK"])
    VERSION_SEEN = File.read(ENV["VERSION_FILE"]).strip
    run lambda { |_env| [200, { "content-type" => "text/plain" }, ["\#{VERSION_SEEN} \#{Process.pid}"]] }
  RUBY

  # A config file that loads: a directive real enough to be parsed.
  GOOD_CONFIG = "worker_boot_timeout 20\n"
  PRELOAD_CONFIG = "preload_app!\nworker_boot_timeout 20\n"

  REFUSED = "! hot restart not done: the new configuration/app"

  def setup
    @dir = Dir.mktmpdir("tsubame-hrcheck")
    @version_file = File.join(@dir, "version")
    @broken_mark = File.join(@dir, "broken")
    @slow_boot = File.join(@dir, "slow_boot")
    File.write(@version_file, "v1")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def app_env
    { "VERSION_FILE" => @version_file, "BROKEN_MARK" => @broken_mark, "SLOW_BOOT" => @slow_boot }
  end

  def config_path(server)
    File.join(server.control_dir, "cluster.rb")
  end

  def test_usr2_with_a_broken_config_keeps_the_old_workers_then_a_fixed_config_restarts
    with_cluster(APP, workers: 2, config: GOOD_CONFIG, env: app_env) do |s|
      old = s.booted_workers.values
      File.write(@version_file, "v2")
      File.write(config_path(s), "raise \"broken config\"\n")
      refused_restart(s, old) { s.signal("USR2") }
      assert_match(/tsubame: .*cluster\.rb:1: broken config \(RuntimeError\)/, s.stderr)
      assert_explained(s, /broken config/, "failed to load (exit status 1)")

      File.write(config_path(s), GOOD_CONFIG)
      restarts_with_new_code(s, old) { s.signal("USR2") }
    end
  end

  def test_usr2_with_preload_and_an_app_that_raises_keeps_the_old_workers_then_a_fixed_app_restarts
    with_cluster(APP, workers: 2, config: PRELOAD_CONFIG, env: app_env) do |s|
      old = s.booted_workers.values
      File.write(@version_file, "v2")
      File.write(@broken_mark, "")
      # `ctl restart` takes USR2's path.
      refused_restart(s, old) { assert_equal "restarting (hot restart)", s.control("restart")["message"] }
      assert_explained(s, /broken deploy: .* exists \(RuntimeError\)/, "failed to load (exit status 1)")

      File.delete(@broken_mark)
      restarts_with_new_code(s, old) { s.signal("USR2") }
      assert_match(/Hot restart check \(PID \d+\): the new configuration and app load/, s.stdout)
    end
  end

  # Without preload the check does not load the app (the new workers do),
  # so the master re-executes; the new workers die while booting, and the
  # re-executed master keeps the adopted old workers serving meanwhile.
  def test_usr2_without_preload_and_an_app_that_raises_keeps_the_old_workers_serving
    with_cluster(APP, workers: 2, config: GOOD_CONFIG, env: app_env) do |s|
      old = s.booted_workers.values
      File.write(@version_file, "v2")
      File.write(@broken_mark, "")
      load = Tsubame::LoadLoop.new(s.port, clients: 1)
      sleep 0.2
      s.signal("USR2")
      s.wait_until(20, "the new workers to keep failing") do
        s.stderr.include?("workers keep failing to boot; retrying in")
      end
      sleep 0.5
      load.stop

      assert_old_workers_served(load, old, s)
      assert_match(/Hot restart check \(PID \d+\): the new configuration loads \(the workers load the app\)/, s.stdout)
      assert_equal 2, s.stdout.scan("Tsubame starting in cluster mode").size, "the check passed: the master re-executed"
      assert_equal s.pid, s.stats["master_pid"], "same master pid"
      assert_match(/died while booting: exit status 1/, s.stderr)
      assert_match(/broken deploy: .* exists/, s.stderr)
      refute_includes s.stderr, REFUSED

      File.delete(@broken_mark)
      restarts_with_new_code(s, old) { s.signal("USR2") }
    end
  end

  # The check is bounded by worker_boot_timeout and killed after it; the
  # master's loop goes on supervising meanwhile: a worker killed while the
  # check runs is replaced before the check is over.
  def test_a_check_past_worker_boot_timeout_is_killed_while_the_master_supervises
    with_cluster(APP, workers: 2, config: "preload_app!\nworker_boot_timeout 3\n", env: app_env) do |s|
      old = s.booted_workers
      File.write(@slow_boot, "30")
      s.signal("USR2")
      started = /checking that the new configuration loads \(check PID (\d+)\)/
      check_pid = s.wait_until(10, "the check to start") { s.stdout[started, 1] }.to_i
      Process.kill("KILL", old[0])
      s.wait_until(5, "worker 0 replaced") { s.booted_workers.size == 2 && s.booted_workers[0] != old[0] }
      assert s.alive?(check_pid), "the check was still running when the replacement booted"
      refute_includes s.stderr, REFUSED

      s.wait_until(10, "the check to time out") { s.stderr.include?(REFUSED) }
      assert_includes s.stderr, "#{REFUSED} did not load within 3.0s (check PID #{check_pid} killed); " \
                                "the old workers keep serving"
      refute s.alive?(check_pid), "the check was killed and reaped"
      assert_equal old[1], s.booted_workers[1], "the other worker served on"
      assert_equal 1, s.stdout.scan("Tsubame starting in cluster mode").size
      assert_equal "v1", get_body(s).split.first
      assert_equal 0, s.stop("TERM").exitstatus
    end
  end

  # The check flag is honoured only in a child of the master that set it:
  # a stray variable in a user's environment does not stop a real boot.
  def test_a_stray_check_flag_in_the_environment_does_not_stop_a_real_boot
    stray = { "TSUBAME_HOT_RESTART" => '{"fds":{},"workers":[],"check":{"parent":1}}' }
    with_cluster(APP, workers: 1, env: app_env.merge(stray)) do |s|
      assert_equal "v1", get_body(s).split.first
      refute_includes s.stdout, "Hot restart check"
    end
  end

  private

  def get_body(server)
    Net::HTTP.get(URI("http://127.0.0.1:#{server.port}/"))
  end

  # Runs the block (a restart request) under load and waits for the
  # refusal; the old workers must have served every request, and go on.
  def refused_restart(server, old)
    load = Tsubame::LoadLoop.new(server.port, clients: 1)
    sleep 0.2
    yield
    server.wait_until(20, "the hot restart to be refused") { server.stderr.include?(REFUSED) }
    # They go on serving after the refusal, not only until it.
    sleep 0.5
    load.stop
    assert_old_workers_served(load, old, server)
  end

  def assert_old_workers_served(load, old, server)
    log = "\n#{server.stdout}\n#{server.stderr}"
    assert_empty load.failures.map(&:detail), "no request failed#{log}"
    assert_empty load.refused.map(&:detail), "no connection was refused#{log}"
    assert_operator load.ok.size, :>, 20, "the load kept running"
    bodies = load.ok.map { |r| r.detail.split }
    assert_equal ["v1"], bodies.map { |_, version, _| version }.uniq, "only the old code answered"
    assert_empty bodies.map { |_, _, pid| pid.to_i }.uniq - old, "only the old workers answered"
    assert(old.all? { |pid| server.alive?(pid) }, "the old workers still run")
  end

  # The check's own error comes first on stderr, then the master's line.
  def assert_explained(server, error, why)
    err = server.stderr
    line = "#{REFUSED} #{why}; the old workers keep serving"
    assert_includes err, line
    assert_operator err.index(error), :<, err.index(line), "the check's error is above the master's line"
    assert_equal server.pid, server.stats["master_pid"], "same master pid"
    assert_equal 1, server.stdout.scan("Tsubame starting in cluster mode").size, "the master did not re-execute"
    refute_includes server.stdout, "re-executing"
  end

  def restarts_with_new_code(server, old)
    yield
    server.wait_until(25, "new workers serving, the old ones gone") do
      now = server.booted_workers
      now.size == 2 && (now.values & old).empty? && old.none? { |pid| server.alive?(pid) }
    end
    assert_equal ["v2"], Array.new(5) { get_body(server).split.first }.uniq
    assert_equal server.pid, server.stats["master_pid"], "same master pid"
    assert_operator server.stdout.scan("Tsubame starting in cluster mode").size, :>=, 2, "the master re-executed"
    assert_equal 0, server.stop("TERM").exitstatus
  end
end
