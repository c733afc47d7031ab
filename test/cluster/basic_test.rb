# frozen_string_literal: true

require "tempfile"

require "cluster/support"

# Cluster mode: the master binds and forks, the workers serve, hooks run
# where Puma runs them, and new connections go to a worker that is free.
class ClusterBasicTest < Minitest::Test
  include Tsubame::ClusterHelpers

  # Records in which process the rackup file was loaded.
  def loading_app(dir)
    <<~RUBY
      File.write(#{dir.inspect} + "/loaded-" + Process.pid.to_s, "")
      #{PID_APP}
    RUBY
  end

  def test_master_forks_workers_that_serve_and_never_runs_the_app
    in_tmpdir do |dir|
      config = <<~RUBY
        before_fork { File.write("#{dir}/before_fork", Process.pid.to_s) }
        after_worker_fork { |index| File.write("#{dir}/after_worker_fork-\#{index}", Process.pid.to_s) }
        on_worker_boot { |index| File.write("#{dir}/on_worker_boot-\#{index}", Process.pid.to_s) }
        on_booted { File.write("#{dir}/on_booted", Process.pid.to_s) }
        on_worker_shutdown { |index| File.write("#{dir}/on_worker_shutdown-\#{index}", Process.pid.to_s) }
      RUBY
      with_cluster(loading_app(dir), workers: 2, config: config, args: %w[-t 1]) do |s|
        master = s.pid
        workers = s.booted_workers
        assert_equal [0, 1], workers.keys.sort
        refute_includes workers.values, master
        # Two at a time with one thread each (1 s, longer than a late client
        # thread on a loaded machine): a busy worker leaves the next
        # connection to the idle one, so both must serve.
        served = Array.new(4) { Thread.new { get_pid(s, "/slow?1") } }.map(&:value).uniq.sort
        assert_equal workers.values.sort, served, "both workers serve the one listener"

        loaded = Dir[File.join(dir, "loaded-*")].map { |path| path[/\d+\z/].to_i }.sort
        assert_equal workers.values.sort, loaded, "each worker loads the app; the master does not"
        assert_equal master.to_s, File.read("#{dir}/before_fork")
        assert_equal master.to_s, File.read("#{dir}/on_booted")
        [0, 1].each do |index|
          assert_equal master.to_s, File.read("#{dir}/after_worker_fork-#{index}")
          assert_equal workers[index].to_s, File.read("#{dir}/on_worker_boot-#{index}")
        end
        assert_match(/Tsubame starting in cluster mode/, s.stdout)
        assert_match(/\*      Workers: 2/, s.stdout)

        assert_equal 0, s.stop("TERM").exitstatus
        [0, 1].each { |index| assert_equal workers[index].to_s, File.read("#{dir}/on_worker_shutdown-#{index}") }
        refute(workers.values.any? { |pid| s.alive?(pid) }, "no worker outlives the master")
        assert_match(/- Goodbye!/, s.stdout)
        assert_empty s.stderr
      end
    end
  end

  def test_preload_loads_the_app_once_in_the_master
    in_tmpdir do |dir|
      with_cluster(loading_app(dir), workers: 2, args: ["--preload", "-t", "1"]) do |s|
        # 1 s each, so a client thread started late on a loaded machine still
        # finds the first worker busy and is served by the other.
        assert_equal 2, Array.new(4) { Thread.new { get_pid(s, "/slow?1") } }.map(&:value).uniq.size
        loaded = Dir[File.join(dir, "loaded-*")].map { |path| path[/\d+\z/].to_i }
        assert_equal [s.pid], loaded
        assert_match(/Preloading application/, s.stdout)
        assert_match(/phased \(USR1\) no/, s.stdout)
      end
    end
  end

  def test_web_concurrency_sets_the_worker_count_and_w_wins
    with_server(PID_APP, env: { "WEB_CONCURRENCY" => "3" }) do |s|
      assert_match(/\*      Workers: 3/, s.stdout)
      assert_equal 0, s.stop.exitstatus
    end
    with_server(PID_APP, args: %w[-w 0], env: { "WEB_CONCURRENCY" => "3" }) do |s|
      assert_match(/single mode/, s.stdout)
    end
  end

  # With one thread per worker and that thread stuck in a slow request, new
  # connections must go to the other worker instead of queueing behind it.
  # (Without the hand-off, about half of them did: both workers race for
  # each connection on the shared socket.)
  # The hold-back is 0.2 s here, not the default 25 ms: with both test
  # suites running, an idle worker starved of CPU for 25 ms lost
  # connections it would have taken (what the setting trades off).
  def test_a_busy_worker_does_not_take_connections_from_an_idle_one
    config = Tempfile.create(["hold_back", ".rb"])
    config.write("wait_for_less_busy_worker 0.2\n")
    config.close
    with_cluster(PID_APP, workers: 2, args: ["-t", "1", "-C", config.path]) do |s|
      slow = Thread.new { get_pid(s, "/slow?3") }
      sleep 0.3
      waits = Array.new(25) do
        started = monotonic
        get_pid(s)
        monotonic - started
      end
      assert_operator waits.max, :<, 1.0, "no request waited for the slow one: #{waits.map { |w| w.round(3) }}"
      slow.join
    end
  ensure
    File.unlink(config.path) if config
  end
end
