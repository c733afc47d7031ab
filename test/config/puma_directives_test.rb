# frozen_string_literal: true

require "test_helper"
require "json"

# Puma's directives, each shown doing what Puma's docs say, in single mode
# (the cluster ones are in test/cluster/puma_directives_test.rb).
class PumaDirectivesTest < Minitest::Test
  include Tsubame::TestHelpers

  # Answers what the request's thread and process look like.
  PROBE_APP = <<~RUBY
    run lambda { |env|
      previous = Thread.current[:probe]
      Thread.current[:probe] = "left by a request"
      body = {
        "tag" => Thread.current[:tag], "previous" => previous, "pwd" => Dir.pwd,
        "scheme" => env["rack.url_scheme"], "stdout_sync" => $stdout.sync
      }
      sleep Float(env["QUERY_STRING"]) if env["PATH_INFO"] == "/slow"
      [200, { "content-type" => "application/json" }, [JSON.generate(body)]]
    }
  RUBY

  def setup
    @dir = Dir.mktmpdir("tsubame-directives")
    @servers = []
  end

  def teardown
    @servers.each(&:kill)
    FileUtils.rm_rf(@dir)
  end

  def start(config, app: PROBE_APP, args: [], lint: true)
    path = write_file(@dir, "puma.rb", config)
    server = Tsubame::TestServer.new("require 'json'\n#{app}", args: ["-C", path, *args], lint: lint)
    @servers << server
    server
  end

  def probe(server, path = "/")
    JSON.parse(server.get(path).body)
  end

  def file(name)
    File.join(@dir, name)
  end

  def test_app_serves_an_inline_app_instead_of_the_rackup_file
    server = start(%(app { |env| [200, { "content-type" => "text/plain" }, ["inline \#{env["PATH_INFO"]}"]] }\n))
    assert_equal "inline /x", server.get("/x").body
  end

  def test_app_needs_no_rackup_file
    write_file(@dir, "inline.rb", %(app { |_env| [200, {}, ["no rackup"]] }\nbind "tcp://127.0.0.1:0"\n))
    out = File.join(@dir, "out.log")
    pid = Process.spawn(RbConfig.ruby, "-w", EXE, "-C", File.join(@dir, "inline.rb"), chdir: @dir, out: out,
                                                                                      err: %i[child out])
    Timeout.timeout(15) { sleep 0.05 until File.read(out).include?("Use Ctrl-C") }
    port = File.read(out)[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1]
    assert_equal "no rackup", Net::HTTP.get(URI("http://127.0.0.1:#{port}/"))
  ensure
    if pid
      Process.kill("TERM", pid)
      Process.wait(pid)
    end
  end

  def test_directory_is_changed_to_before_the_app_loads
    release = File.join(@dir, "releases", "1")
    FileUtils.mkdir_p(release)
    File.symlink(release, File.join(@dir, "current"))
    server = start(%(directory "#{@dir}/current"\n))
    assert_equal File.realpath(release), probe(server)["pwd"]
  end

  def test_a_missing_directory_is_a_config_error
    out, err, status = run_tsubame("-C", write_file(@dir, "puma.rb", %(directory "#{@dir}/nowhere"\n)))
    refute status.success?, out
    assert_match %r{directory must be an existing directory \(got "#{Regexp.escape(@dir)}/nowhere"\)}, err
  end

  def test_on_thread_start_runs_in_each_app_thread_before_its_requests
    server = start(%(threads 2, 2\non_thread_start { Thread.current[:tag] = "from on_thread_start" }\n))
    assert_equal "from on_thread_start", probe(server)["tag"]
    server2 = start(%(before_thread_start { Thread.current[:tag] = "Puma 7's name" }\n))
    assert_equal "Puma 7's name", probe(server2)["tag"]
  end

  def test_on_thread_exit_runs_in_each_app_thread_as_it_ends
    server = start(<<~RUBY)
      threads 3, 3
      on_thread_exit { File.write("#{file("exits")}", "\#{Thread.current.name}\\n", mode: "a") }
      before_thread_exit { File.write("#{file("exits7")}", "x", mode: "a") }
    RUBY
    probe(server)
    refute File.exist?(file("exits")), "not while the threads serve"
    assert_equal 0, server.stop.exitstatus
    assert_equal %w[tsubame-0 tsubame-1 tsubame-2], File.read(file("exits")).split.sort
    assert_equal "xxx", File.read(file("exits7"))
  end

  def test_out_of_band_runs_after_a_request_when_nothing_else_runs
    server = start(<<~RUBY)
      threads 2, 2
      out_of_band { File.write("#{file("oob")}", "o", mode: "a") }
    RUBY
    # Each request, once answered and with nothing else queued, is followed
    # by the hook (the next request waits for it: one arriving before the
    # check would make the server busy, and Puma skips the hook then too).
    3.times do |i|
      probe(server)
      wait_for_file("oob", "o" * (i + 1))
    end
    # A quick request that ends while a slow one runs: not idle, no hook.
    slow = Thread.new { probe(server, "/slow?1.5") }
    sleep 0.5
    probe(server)
    sleep 0.3
    assert_equal "ooo", File.read(file("oob")), "no out_of_band while a request runs"
    slow.join
    wait_for_file("oob", "oooo")
  end

  def test_clean_thread_locals_clears_what_a_request_left
    server = start(%(threads 1, 1\nclean_thread_locals\n))
    probe(server)
    assert_nil probe(server)["previous"]
    # Without it, the next request on the thread sees the value (what the
    # directive is for).
    plain = start(%(threads 1, 1\n))
    probe(plain)
    assert_equal "left by a request", probe(plain)["previous"]
  end

  def test_rack_url_scheme_sets_the_scheme_of_plain_connections
    assert_equal "https", probe(start(%(rack_url_scheme "https"\n)))["scheme"]
    assert_equal "http", probe(start(""))["scheme"]
  end

  def test_rack_url_scheme_takes_only_http_or_https
    _, err, status = run_tsubame("-C", write_file(@dir, "puma.rb", %(rack_url_scheme "ftp"\n)))
    refute status.success?
    assert_match(/rack_url_scheme must be "http" or "https" \(got "ftp"\)/, err)
  end

  def test_log_formatter_formats_every_line_tsubame_logs
    server = start(%(log_formatter { |line| "FMT| \#{line}" }\n))
    probe(server)
    lines = server.stdout.lines
    assert_operator lines.size, :>=, 5
    assert(lines.all? { |line| line.start_with?("FMT| ") }, server.stdout)
    assert_includes server.stdout, "FMT| * Listening on http://127.0.0.1:#{server.port}"
  end

  def test_state_permission_sets_the_state_files_mode
    start(%(state_path "#{file("puma.state")}"\nstate_permission 0o600\n))
    assert_equal 0o600, File.stat(file("puma.state")).mode & 0o777
  end

  def test_raise_exception_on_sigterm_ends_the_process_by_sigterm
    status = start(%(raise_exception_on_sigterm\n)).stop
    assert status.signaled?, status.inspect
    assert_equal Signal.list["TERM"], status.termsig
    assert_equal 0, start(%(raise_exception_on_sigterm false\n)).stop.exitstatus
  end

  def test_on_stopped_runs_once_the_server_stopped
    server = start(%(on_stopped { File.write("#{file("stopped")}", "stopped") }\n))
    probe(server)
    refute File.exist?(file("stopped"))
    assert_equal 0, server.stop.exitstatus
    assert_equal "stopped", File.read(file("stopped"))
  end

  def test_debug_lists_the_configuration_at_boot
    server = start(%(debug\nthreads 2, 3\n))
    assert_includes server.stdout, "* Debug: threads_max = 3"
    assert_includes server.stdout, "* Debug: debug = true"
  end

  def test_shutdown_debug_writes_every_threads_backtrace_at_the_stop
    server = start(%(shutdown_debug\n))
    probe(server)
    refute_includes server.stdout, "Shutdown debug"
    server.stop
    assert_includes server.stdout, "- Shutdown debug: thread backtraces of PID #{server.pid}"
    # An idle app thread waits in the engine's app loop (app_loop.rs).
    assert_match(/  Thread tsubame-0\n    .*in `serve'/, server.stdout)
  end

  def test_shutdown_debug_on_force_only_when_the_drain_timed_out
    server = start(%(shutdown_debug on_force: true\n))
    probe(server)
    server.stop
    refute_includes server.stdout, "Shutdown debug"

    forced = start(%(shutdown_debug on_force: true\nforce_shutdown_after 0.5\n))
    slow = Thread.new { forced.get("/slow?3") rescue nil } # rubocop:disable Style/RescueModifier
    sleep 0.5
    forced.stop
    slow.join
    assert_includes forced.stdout, "- Shutdown debug: thread backtraces"
  end

  def test_stdout_sync_is_pumas_default_and_can_be_left_alone
    assert_equal true, probe(start(""))["stdout_sync"]
    assert_equal false, probe(start(%(mutate_stdout_and_stderr_to_sync_on_write false\n)))["stdout_sync"]
  end

  def test_cluster_only_hooks_in_single_mode_warn_unless_silenced
    server = start(%(before_fork { }\non_worker_boot { }\n))
    assert_match(/warning: before_fork hooks are configured, but they only run in cluster mode/, server.stderr)
    assert_match(/warning: on_worker_boot hooks are configured/, server.stderr)
    quiet = start(%(before_fork { }\nsilence_fork_callback_warning\n))
    refute_match(/warning/, quiet.stderr)
  end

  def wait_for_file(name, content)
    Timeout.timeout(10) { sleep 0.02 until File.exist?(file(name)) && File.read(file(name)) == content }
  rescue Timeout::Error
    flunk "#{name}: #{File.exist?(file(name)) ? File.read(file(name)).inspect : "missing"}, expected #{content.inspect}"
  end

  # Where a directive cannot apply, the boot stops naming the file, the
  # line and what to use instead.
  def test_directives_that_cannot_apply_say_what_to_use_instead
    {
      "queue_requests false" => /puma\.rb:2: queue_requests false is not available: Tsubame's engine always reads/,
      "io_selector_backend :kqueue" => /puma\.rb:2: io_selector_backend :kqueue is not available: the engine uses epoll/,
      "max_fast_inline -1" => /puma\.rb:2: max_keep_alive must be a non-negative number of requests/,
      "worker_culling_strategy :random" => /puma\.rb:2: worker_culling_strategy must be :youngest or :oldest/,
      "fork_worker :often" => /puma\.rb:2: fork_worker takes a number of requests \(got :often\)/
    }.each do |line, message|
      out, err, status = run_tsubame("-C", write_file(@dir, "puma.rb", "threads 1, 2\n#{line}\n"))
      refute status.success?, "#{line}: #{out}"
      assert_match message, err, line
    end
  end

  # Under Bundler prune_bundler would need a re-exec Tsubame does not do;
  # outside it there is nothing to prune (Puma's test configs rely on that).
  def test_prune_bundler_stops_the_boot_only_under_bundler
    {
      "prune_bundler" => /puma\.rb:2: prune_bundler is not available under Bundler: use a hot restart \(USR2/,
      "extra_runtime_dependencies ['puma_worker_killer']" =>
        /puma\.rb:2: extra_runtime_dependencies applies to prune_bundler, .* a hot restart \(USR2\) loads new gems/
    }.each do |line, message|
      config = write_file(@dir, "puma.rb", "threads 1, 2\n#{line}\n")
      out, err, status = run_tsubame("-C", config, env: { "BUNDLE_GEMFILE" => File.join(@dir, "Gemfile") })
      refute status.success?, "#{line}: #{out}"
      assert_match message, err, line
    end
    # Outside Bundler the same lines boot: test/config/puma8_configs_test.rb
    # serves Puma's prune_bundler configs.
  end

  def test_accepted_puma_defaults_boot
    server = start(%(queue_requests\nio_selector_backend :epoll\nmax_fast_inline Float::INFINITY\nprune_bundler false\n))
    assert_equal 200, server.get("/").code.to_i
    refute_match(/warning/, server.stderr)
  end

  def test_restart_command_is_what_a_hot_restart_executes
    wrapper = write_file(@dir, "wrapper.rb", <<~RUBY)
      File.write("#{file("restarted")}", "\#{ARGV.join(" ")}\n", mode: "a")
      exec(#{RbConfig.ruby.inspect}, "-w", #{EXE.inspect}, *ARGV)
    RUBY
    server = start(%(restart_command "#{RbConfig.ruby} #{wrapper}"\n))
    first = probe(server)
    server.signal("USR2")
    Timeout.timeout(30) { sleep 0.05 until server.stdout.scan("Use Ctrl-C").size >= 2 }
    assert_match(/-C #{Regexp.escape(file("puma.rb"))}/, File.read(file("restarted")), "with the original arguments")
    assert_equal first["pwd"], probe(server)["pwd"]
  end

  def test_a_hot_restart_follows_directory_to_the_new_release
    %w[1 2].each { |n| FileUtils.mkdir_p(File.join(@dir, "releases", n)) }
    File.symlink(File.join(@dir, "releases", "1"), File.join(@dir, "current"))
    server = start(%(directory "#{@dir}/current"\n))
    assert_equal File.realpath(File.join(@dir, "releases", "1")), probe(server)["pwd"]
    File.unlink(File.join(@dir, "current"))
    File.symlink(File.join(@dir, "releases", "2"), File.join(@dir, "current"))
    server.signal("USR2")
    Timeout.timeout(30) { sleep 0.05 until server.stdout.scan("Use Ctrl-C").size >= 2 }
    assert_equal File.realpath(File.join(@dir, "releases", "2")), probe(server)["pwd"]
  end

  # While the out_of_band hooks run, no request starts (Puma: "the worker
  # doesn't accept new requests until this code finishes").
  def test_requests_wait_for_the_out_of_band_hooks
    server = start(<<~RUBY)
      threads 2, 2
      out_of_band do
        File.write("#{file("oob-start")}", "")
        sleep 2.5
      end
    RUBY
    probe(server)
    Timeout.timeout(10) { sleep 0.01 until File.exist?(file("oob-start")) }
    started = monotonic
    probe(server)
    assert_operator monotonic - started, :>=, 1.0, "the second request waited for the hook"
  end
end
