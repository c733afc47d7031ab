# frozen_string_literal: true

require "cluster/support"

# Puma's directives that act on the cluster, each shown doing what Puma's
# docs say (single mode ones: test/config/puma_directives_test.rb).
class ClusterPumaDirectivesTest < Minitest::Test
  include Tsubame::ClusterHelpers

  GC_APP = <<~RUBY
    run lambda { |env|
      [200, { "content-type" => "text/plain" }, ["\#{Process.pid} \#{GC.stat(:compact_count)} \#{Dir.pwd}"]]
    }
  RUBY

  def test_before_worker_fork_runs_in_the_master_before_each_fork
    Dir.mktmpdir do |dir|
      config = %(on_worker_fork { |i| File.write("#{dir}/forks", "\#{i}:\#{Process.pid}\\n", mode: "a") }\n) +
               %(before_worker_fork { |i| File.write("#{dir}/forks7", "\#{i}\\n", mode: "a") }\n)
      with_cluster(PID_APP, workers: 2, config: config) do |s|
        assert_equal ["0:#{s.pid}", "1:#{s.pid}"], File.read("#{dir}/forks").split.sort
        assert_equal %w[0 1], File.read("#{dir}/forks7").split.sort
      end
    end
  end

  def test_nakayoshi_fork_compacts_the_preloaded_heap_before_forking
    with_cluster(GC_APP, workers: 1, config: "preload_app!\nnakayoshi_fork\nsilence_single_worker_warning\n") do |s|
      _, compactions, = Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")).split
      assert_operator compactions.to_i, :>=, 1, "the worker inherits the master's compaction count"
    end
    with_cluster(GC_APP, workers: 1, config: "preload_app!\nsilence_single_worker_warning\n") do |s|
      _, compactions, = Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")).split
      assert_equal 0, compactions.to_i, "without it, no compaction"
    end
  end

  def test_fork_worker_compacts_worker_zeros_heap_before_forking
    with_cluster(GC_APP, workers: 2, config: "fork_worker 0\n") do |s|
      pids = s.booted_workers
      # Requests at once until worker 1 (forked from worker 0) answers one.
      forked = s.wait_until(20, "an answer from worker 1") do
        Array.new(4) { Thread.new { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")).split } }
             .map(&:value).find { |pid, _| pid.to_i == pids[1] }
      end
      assert_operator forked[1].to_i, :>=, 1, "worker 1 inherits worker 0's compaction count"
    end
  end

  def test_worker_culling_strategy_oldest_stops_the_oldest_worker
    with_cluster(PID_APP, workers: 3, config: "worker_culling_strategy :oldest\n") do |s|
      pids = s.booted_workers
      Process.kill("TTOU", s.pid)
      s.wait_until(15, "the oldest worker stopped") { !s.alive?(pids[0]) }
      assert s.alive?(pids[1]) && s.alive?(pids[2])
      assert_equal [0, 1], s.wait_for_workers(2).keys.sort, "indexes stay 0...count"
      assert_match(/Worker 2 \(PID: #{pids[2]}\) now serves as worker 0/, s.stdout)
    end
  end

  def test_worker_culling_strategy_youngest_is_the_default
    with_cluster(PID_APP, workers: 3) do |s|
      pids = s.booted_workers
      Process.kill("TTOU", s.pid)
      s.wait_until(15, "the youngest worker stopped") { !s.alive?(pids[2]) }
      assert s.alive?(pids[0]) && s.alive?(pids[1])
    end
  end

  def test_directory_is_changed_to_again_before_a_phased_restart
    Dir.mktmpdir do |dir|
      %w[1 2].each { |n| FileUtils.mkdir_p("#{dir}/releases/#{n}") }
      File.symlink("#{dir}/releases/1", "#{dir}/current")
      with_cluster(GC_APP, workers: 1, config: %(directory "#{dir}/current"\nsilence_single_worker_warning\n)) do |s|
        assert_equal File.realpath("#{dir}/releases/1"), Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")).split.last
        File.unlink("#{dir}/current")
        File.symlink("#{dir}/releases/2", "#{dir}/current")
        s.control("phased-restart")
        s.wait_for_workers(1, phase: 1)
        s.wait_until(15, "the old worker gone") { s.stdout.include?("Phased restart done") }
        assert_equal File.realpath("#{dir}/releases/2"), Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/")).split.last
        assert_includes s.stdout, "+ Changing to #{dir}/current"
      end
    end
  end

  def test_on_stopped_and_raise_exception_on_sigterm_in_cluster_mode
    Dir.mktmpdir do |dir|
      config = %(on_stopped { File.write("#{dir}/stopped", Process.pid.to_s) }\nraise_exception_on_sigterm\n)
      with_cluster(PID_APP, workers: 2, config: config) do |s|
        status = s.stop
        assert_equal Signal.list["TERM"], status.termsig, status.inspect
        assert_equal s.pid.to_s, File.read("#{dir}/stopped"), "on_stopped ran in the master"
      end
    end
  end

  def test_single_worker_warning_unless_silenced
    with_cluster(PID_APP, workers: 1) do |s|
      assert_match(/warning: cluster mode with a single worker/, s.stderr)
    end
    with_cluster(PID_APP, workers: 1, config: "silence_single_worker_warning\n") do |s|
      refute_match(/warning/, s.stderr)
    end
  end

  # drain_on_shutdown: clients waiting in the listen backlog at the stop
  # are served. The worker's one thread is busy, and wait_for_less_busy_worker
  # holds its engine back from accepting meanwhile, so they wait in the
  # backlog until after TERM.
  def backlog_clients_at_stop(config)
    config = "threads 1, 1\nwait_for_less_busy_worker 5\nsilence_single_worker_warning\n#{config}"
    with_cluster(PID_APP, workers: 1, config: config, env: { "SLOW_MARK" => mark = "#{Dir.tmpdir}/mark-#{rand(1 << 30)}" }) do |s|
      slow = slow_request(s, 1.5, mark)
      waiting = Array.new(2) do
        Thread.new do
          sock = TCPSocket.new("127.0.0.1", s.port)
          sock.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
          read_until_close(sock, 10).first
        rescue SystemCallError => e
          e.class.name
        end
      end
      sleep 0.3
      Process.kill("TERM", s.pid)
      [slow.value, waiting.map(&:value)]
    ensure
      File.delete(mark) if mark && File.exist?(mark)
    end
  end

  def test_drain_on_shutdown_serves_the_clients_in_the_backlog
    slow, waiting = backlog_clients_at_stop("drain_on_shutdown\n")
    assert_equal "200", slow.first
    waiting.each { |reply| assert_match(/\AHTTP\/1.1 200 OK/, reply) }
    # Without it those clients are never served: what the directive changes.
    _, unserved = backlog_clients_at_stop("")
    unserved.each { |reply| refute_match(/\AHTTP\/1.1 200/, reply) }
  end

  # A config/puma.rb that uses every directive of issue 20 (Puma 5/6 names
  # and Puma 7's), as an app written for Puma would, boots with no warning
  # and serves its inline app.
  def test_a_puma_config_with_every_directive_boots_without_a_warning
    Dir.mktmpdir do |dir|
      config = <<~RUBY
        app { |_env| [200, { "content-type" => "text/plain" }, ["every directive"]] }
        directory "#{dir}"
        fork_worker 1000
        nakayoshi_fork
        on_refork { }
        before_refork(:key) { }
        after_refork { }
        on_worker_fork { }
        before_worker_fork { }
        on_thread_start { }
        before_thread_start { }
        on_thread_exit { }
        before_thread_exit { }
        out_of_band { }
        on_stopped { }
        clean_thread_locals
        set_remote_address :socket
        drain_on_shutdown
        queue_requests true
        rack_url_scheme "http"
        log_formatter { |line| line }
        state_path "#{dir}/puma.state"
        state_permission 0o640
        worker_culling_strategy :oldest
        raise_exception_on_sigterm false
        restart_command "#{RbConfig.ruby} #{Tsubame::TestHelpers::EXE}"
        shutdown_debug on_force: true
        mutate_stdout_and_stderr_to_sync_on_write
        io_selector_backend :auto
        max_fast_inline 10
        prune_bundler false
        extra_runtime_dependencies []
        bind_to_activated_sockets false
        silence_single_worker_warning
        silence_fork_callback_warning
        debug
      RUBY
      with_cluster(PID_APP, workers: 2, config: config) do |s|
        assert_equal "every directive", Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/"))
        refute_match(/warning|ignored/, s.stderr)
        assert_includes s.stdout, "* Debug: fork_worker = 1000"
      end
    end
  end

  # The master's and workers' lines go through log_formatter too, without
  # the "[pid] " prefix the formatter replaces.
  def test_log_formatter_formats_the_clusters_lines
    with_cluster(PID_APP, workers: 2, config: %(log_formatter { |line| "CL| \#{line}" }\n)) do |s|
      assert_match(/^CL\| - Worker 0 \(PID: \d+\) booted/, s.stdout)
      refute_match(/^\[\d+\]/, s.stdout)
    end
  end
end
