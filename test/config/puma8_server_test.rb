# frozen_string_literal: true

require "cluster/support"
require "deploy/support"

# What the server does with Puma 7/8's directives (docs/PUMA.md), over
# real sockets: keep-alive limits, methods, idle stop, hooks in single and
# cluster mode, the Puma constant, a custom logger, IO threads, Rack 2
# header objects, activated sockets.
class Puma8ServerTest < Minitest::Test
  include Tsubame::DeployHelpers

  HELLO = <<~RUBY
    run lambda { |env|
      body = "hello \#{env["REQUEST_METHOD"]}"
      [200, { "content-type" => "text/plain", "content-length" => body.bytesize.to_s }, [body]]
    }
  RUBY

  # Starts a single-mode server with config text as its -C file.
  def with_config(config, rackup: HELLO, args: [], lint: true)
    in_tmpdir do |dir|
      path = write_file(dir, "puma.rb", config.gsub("DIR", dir))
      with_server(rackup.gsub("DIR", dir), args: ["-C", path, *args], lint: lint) { |server| yield server, dir }
    end
  end

  def with_cluster_config(config, workers: 2, rackup: HELLO, args: [])
    in_tmpdir do |dir|
      server = Tsubame::ClusterServer.new(rackup, workers: workers, config: config.gsub("DIR", dir), args: args)
      yield server, dir
    ensure
      server&.kill
    end
  end

  # Sends each request on one connection; returns [responses, closed?].
  def exchange_on_one_connection(server, count)
    sock = server.socket
    responses = Array.new(count) do
      sock.write("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
      read_response(sock)
    end
    [responses, read_until_close(sock, 3).last]
  ensure
    sock&.close
  end

  def read_response(sock)
    head = +""
    head << sock.readpartial(1) until head.end_with?("\r\n\r\n")
    length = head[/content-length: (\d+)/i, 1].to_i
    head + sock.read(length)
  end

  # --- keep-alive ----------------------------------------------------------

  def test_max_keep_alive_closes_after_that_many_requests
    with_config("max_keep_alive 3\n") do |server|
      responses, closed = exchange_on_one_connection(server, 3)
      assert_equal(["hello GET"] * 3, responses.map { |r| r.split("\r\n\r\n").last })
      refute_match(/connection: close/i, responses[1])
      assert_match(/connection: close/i, responses[2])
      assert closed, "the server closes the connection after the third response"
    end
  end

  def test_max_keep_alive_infinity_keeps_the_connection
    with_config("max_keep_alive Float::INFINITY\n") do |server|
      responses, closed = exchange_on_one_connection(server, 5)
      assert_equal 5, responses.size
      responses.each { |r| refute_match(/connection: close/i, r) }
      refute closed
    end
  end

  def test_enable_keep_alives_false_closes_every_connection
    ["enable_keep_alives false\n", "max_keep_alive 0\n"].each do |config|
      with_config(config) do |server|
        responses, closed = exchange_on_one_connection(server, 1)
        assert_match(/connection: close/i, responses.first, config)
        assert closed, config
      end
    end
  end

  # --- methods -------------------------------------------------------------

  def test_supported_http_methods_list
    with_config("supported_http_methods %w[GET PURGE]\n") do |server|
      assert_match(/\AHTTP\/1.1 200.*hello PURGE/m, server.raw("PURGE / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"))
      assert_match(%r{\AHTTP/1.1 501}, server.raw("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
      assert_match(/\AHTTP\/1.1 200.*hello GET/m, server.raw("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"))
    end
  end

  def test_supported_http_methods_any_and_the_default
    with_config("supported_http_methods :any\n") do |server|
      assert_match(/\AHTTP\/1.1 200.*hello BREW/m, server.raw("BREW / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"))
    end
    with_config("") do |server|
      assert_match(%r{\AHTTP/1.1 501}, server.raw("BREW / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"))
      # QUERY (RFC 10008) is in Puma 8's default list.
      assert_match(/\AHTTP\/1.1 200.*hello QUERY/m, server.raw("QUERY / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
    end
  end

  def test_supported_http_methods_over_http2
    with_config("h2c\nsupported_http_methods %w[GET]\n") do |server|
      codes = %w[GET POST].map do |method|
        out, err, = Open3.capture3("curl", "-sS", "--max-time", "20", "--http2-prior-knowledge", "-X", method,
                                   "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "http://127.0.0.1:#{server.port}/")
        assert_empty err
        out
      end
      assert_equal ["2 200", "2 501"], codes
    end
  end

  # --- allow_underscore_headers ------------------------------------------

  HEADERS_APP = <<~RUBY
    run lambda { |env| [200, {}, [env.keys.grep(/\\AHTTP_X_/).sort.join(",")]] }
  RUBY

  def test_allow_underscore_headers_false_drops_them
    request = "GET / HTTP/1.1\r\nHost: a\r\nX_Api_Key: 1\r\nX-Trace: 2\r\nConnection: close\r\n\r\n"
    with_config("", rackup: HEADERS_APP) do |server|
      assert_match(/\r\n\r\n(\h+\r\n)?HTTP_X_API_KEY,HTTP_X_TRACE(\r\n0\r\n\r\n)?\z/, server.raw(request))
    end
    with_config("allow_underscore_headers false\n", rackup: HEADERS_APP) do |server|
      assert_match(/\r\n\r\n(\h+\r\n)?HTTP_X_TRACE(\r\n0\r\n\r\n)?\z/, server.raw(request))
    end
  end

  # --- idle_timeout --------------------------------------------------------

  def test_idle_timeout_stops_a_single_server
    with_config("idle_timeout 1\n") do |server|
      # Requests keep it up past the timeout.
      4.times do
        assert_equal "200", server.get("/").code
        sleep 0.5
      end
      started = monotonic
      status = Timeout.timeout(20) { Process.wait2(server.pid).last }
      assert status.success?, server.stderr
      assert_operator monotonic - started, :>=, 0.5
      assert_includes server.stdout, "Idle timeout reached (1.0s without a request)"
    end
  end

  def test_idle_timeout_stops_a_cluster
    with_cluster_config("idle_timeout 2\n") do |server|
      status = Timeout.timeout(30) { Process.wait2(server.pid).last }
      assert status.success?, server.stderr
      assert_includes server.stdout, "Idle timeout reached (2.0s without a request in any worker)"
      assert_includes server.stdout, "Goodbye"
    end
  end

  # --- hooks ---------------------------------------------------------------

  HOOKS = <<~RUBY
    after_booted { File.write("DIR/booted", Process.pid.to_s) }
    after_stopped { File.write("DIR/stopped", Process.pid.to_s) }
  RUBY

  def test_after_booted_and_after_stopped_in_single_mode
    with_config(HOOKS) do |server, dir|
      assert_equal server.pid.to_s, wait_for_file(File.join(dir, "booted"))
      refute File.exist?(File.join(dir, "stopped"))
      assert server.stop.success?
      assert_equal server.pid.to_s, File.read(File.join(dir, "stopped"))
    end
  end

  def test_on_booted_and_on_stopped_aliases_in_cluster_mode
    with_cluster_config(HOOKS.gsub("after_", "on_")) do |server, dir|
      assert_equal server.pid.to_s, wait_for_file(File.join(dir, "booted"))
      assert server.stop.success?
      assert_equal server.pid.to_s, File.read(File.join(dir, "stopped"))
    end
  end

  def test_hook_data_from_boot_to_shutdown_and_after_worker_shutdown
    config = <<~RUBY
      before_worker_boot(:test) { |index, data| data[:test] = "booted-\#{index}" }
      before_worker_shutdown(:test) { |index, data| File.write("DIR/shutdown-\#{index}", data[:test].to_s) }
      after_worker_shutdown do |worker|
        File.write("DIR/after-\#{worker.index}", "\#{worker.pid} \#{worker.process_status.exitstatus} \#{Process.pid}")
      end
    RUBY
    with_cluster_config(config) do |server, dir|
      pids = server.wait_for_workers(2)
      assert server.stop.success?
      2.times do |index|
        assert_equal "booted-#{index}", File.read(File.join(dir, "shutdown-#{index}"))
        # In the master, with the worker's handle.
        assert_equal "#{pids[index]} 0 #{server.pid}", File.read(File.join(dir, "after-#{index}"))
      end
    end
  end

  def test_before_restart_runs_before_a_hot_restart
    with_config("before_restart { File.write('DIR/restart', Process.pid.to_s) }\n") do |server, dir|
      server.signal("USR2")
      assert_equal server.pid.to_s, wait_for_file(File.join(dir, "restart"), timeout: 30)
    end
  end

  # Puma's meaning of 0: no grace, a worker still running after TERM is
  # killed at the next check.
  def test_worker_shutdown_timeout_zero_kills_at_once
    config = "worker_shutdown_timeout 0\nbefore_worker_shutdown { sleep 30 }\n"
    with_cluster_config(config, workers: 1) do |server|
      started = monotonic
      server.stop(timeout: 25)
      assert_operator monotonic - started, :<, 20
      assert_match(/did not stop in time; killing it/, server.stderr)
    end
  end

  # --- the Puma constant ---------------------------------------------------

  def test_puma_cli_config_changes_the_worker_count
    config = "Puma.cli_config._options[:workers] = 3 if Puma.cli_config._options[:workers] == 2\n"
    # ClusterServer waits for none; -w 2 comes after its -w 0.
    with_cluster_config(config, workers: 0, args: ["-w", "2"]) do |server|
      assert_equal 3, server.wait_for_workers(3).size
    end
  end

  def test_puma_stats_in_a_before_fork_thread
    config = <<~RUBY
      before_fork do
        Thread.new do
          sleep 0.2 until Puma.stats_hash[:booted_workers] == 2
          File.write("DIR/stats.json", Puma.stats)
        end
      end
    RUBY
    with_cluster_config(config) do |_server, dir|
      stats = JSON.parse(wait_for_file(File.join(dir, "stats.json"), timeout: 20))
      assert_equal 2, stats["workers"]
      assert_equal [0, 1], stats["worker_status"].map { |w| w["index"] }.sort
    end
  end

  def test_puma_stats_in_single_mode
    with_config("after_booted { Thread.new { sleep 0.2; File.write('DIR/stats.json', Puma.stats) } }\n") do |server, dir|
      stats = JSON.parse(wait_for_file(File.join(dir, "stats.json"), timeout: 20))
      assert_equal "single", stats["mode"]
      assert_equal server.pid, stats["pid"]
      assert_equal 5, stats["max_threads"]
      assert_kind_of Integer, stats["requests_count"]
    end
  end

  def test_the_app_sees_no_puma_constant
    app = "run lambda { |_env| [200, {}, [defined?(::Puma).inspect]] }\n"
    with_config("tag Puma::Const::PUMA_VERSION\n", rackup: app) do |server|
      assert_equal "nil", server.get("/").body
    end
  end

  # --- custom_logger -------------------------------------------------------

  def test_custom_logger_gets_the_request_log_and_the_banner
    config = <<~RUBY
      class FileLogger
        def initialize(path)
          @path = path
        end

        def write(msg)
          File.open(@path, "a") { |f| f.puts "Custom logging: \#{msg}" }
        end
      end

      log_requests
      custom_logger FileLogger.new("DIR/custom.log")
    RUBY
    in_tmpdir do |dir|
      config_path = write_file(dir, "puma.rb", config.gsub("DIR", dir))
      ru = write_file(dir, "config.ru", HELLO)
      stdout, stderr, status = nil
      pid = Process.spawn(RbConfig.ruby, "-w", EXE, "-C", config_path, "-b", "tcp://127.0.0.1:#{port = free_port}", ru,
                          out: File.join(dir, "out"), err: File.join(dir, "err"))
      log = File.join(dir, "custom.log")
      assert wait_for_file(log, timeout: 15) { |text| text.include?("Use Ctrl-C") }, File.read(File.join(dir, "err"))
      Net::HTTP.get(URI("http://127.0.0.1:#{port}/hello?x=1"))
      text = wait_for_file(log) { |t| t.include?("GET /hello?x=1") }
      assert_match(%r{^Custom logging: 127\.0\.0\.1 - - \[.+\] "GET /hello\?x=1 HTTP/1\.1" 200 9 \d+\.\d{4}$}, text)
      assert_match(/^Custom logging: .*Listening on http:\/\/127\.0\.0\.1:#{port}/, text)
      Process.kill("TERM", pid)
      status = Process.wait2(pid).last
      stdout = File.read(File.join(dir, "out"))
      stderr = File.read(File.join(dir, "err"))
      assert status.success?, stderr
      refute_includes stdout, "GET /hello", "the request log goes to the custom logger only"
    ensure
      Process.kill("KILL", pid) if pid && !status
    end
  end

  # --- max_io_threads ------------------------------------------------------

  # /io and /cpu each hold their thread until the test creates DIR/release.
  IO_APP = <<~RUBY
    hold = -> { sleep 0.05 until File.exist?("DIR/release") }
    run lambda { |env|
      case env["PATH_INFO"]
      when "/io"
        env["puma.mark_as_io_bound"].call
        hold.call
        [200, {}, ["io done"]]
      when "/cpu"
        hold.call
        [200, {}, ["cpu done"]]
      else [200, {}, ["fast"]]
      end
    }
  RUBY

  def test_max_io_threads_serves_beside_a_marked_request
    with_config("threads 1, 1\nmax_io_threads 1\n", rackup: IO_APP) do |server, dir|
      io = Thread.new { server.get("/io").body }
      sleep 0.5
      # The marked request holds the one regular thread; the IO thread
      # takes this one.
      assert_equal "fast", Timeout.timeout(10) { server.get("/fast").body }
      File.write(File.join(dir, "release"), "")
      assert_equal "io done", io.value
    end
  end

  def test_unmarked_requests_keep_to_the_threads_limit
    with_config("threads 1, 1\nmax_io_threads 1\n", rackup: IO_APP) do |server, dir|
      cpu = Thread.new { server.get("/cpu").body }
      sleep 0.5
      waiting = Thread.new { server.get("/fast").body }
      # Not marked: the IO thread stays out, so /fast waits behind /cpu.
      assert_nil waiting.join(1.5)
      File.write(File.join(dir, "release"), "")
      assert_equal "cpu done", cpu.value
      assert_equal "fast", waiting.value
    end
  end

  # A stop drains through the gate: the request in flight finishes, the
  # one queued behind it is still served, and the server exits 0 (the
  # gate used to be closed from the TERM handler, which raised
  # ThreadError there).
  def test_a_stop_with_max_io_threads_serves_the_queued_request
    with_config("threads 1, 1\nmax_io_threads 1\n", rackup: IO_APP) do |server, dir|
      cpu = Thread.new { server.get("/cpu").body }
      sleep 0.5
      waiting = Thread.new { server.get("/fast").body }
      assert_nil waiting.join(1), "queued behind /cpu"
      stopper = Thread.new { server.stop("TERM", timeout: 30) }
      sleep 0.5
      File.write(File.join(dir, "release"), "")
      assert_equal "cpu done", cpu.value
      assert_equal "fast", waiting.value
      assert_equal 0, stopper.value&.exitstatus, server.stderr
      refute_match(/ThreadError/, server.stderr)
    end
  end

  # --- response headers ----------------------------------------------------

  # Puma's close_listeners.ru answers with an empty Array of headers.
  PAIRS_APP = <<~RUBY
    run lambda { |env|
      headers = env["PATH_INFO"] == "/empty" ? [] : [%w[content-type text/plain], %w[x-a 1], %w[x-a 2]]
      [200, headers, ["pairs"]]
    }
  RUBY

  def test_response_headers_as_pairs
    # Lint would refuse a non-Hash under either Rack.
    with_config("", rackup: PAIRS_APP, lint: false) do |server|
      if RACK2
        response = server.get("/")
        assert_equal "200", response.code
        assert_equal "pairs", response.body
        assert_equal %w[1 2], response.get_fields("x-a")
        assert_equal "pairs", server.get("/empty").body
      else
        response = server.get("/empty")
        assert_equal "500", response.code
        assert wait_until { server.stderr.include?("response headers must be a Hash under Rack 3 (got Array)") },
               server.stderr
      end
    end
  end

  # --- bind_to_activated_sockets -------------------------------------------

  def test_bind_to_activated_sockets_serves_a_socket_no_bind_names
    activated_port = free_port
    bound_port = free_port
    in_tmpdir do |dir|
      ru = write_file(dir, "config.ru", ENV_APP)
      config = write_file(dir, "puma.rb", "bind_to_activated_sockets\n")
      args = ["-C", config, "-b", "tcp://127.0.0.1:#{bound_port}", ru]
      server = Tsubame::ActivatedServer.new(["127.0.0.1:#{activated_port}"], args)
      begin
        socket = TCPSocket.new("127.0.0.1", activated_port)
        assert_match(%r{\AHTTP/1.1 200}, Timeout.timeout(20) { request_on(socket) })
        server.wait_for(:stdout, /Listening on http:\/\/127\.0\.0\.1:#{bound_port}/)
        assert_includes server.stdout, "* Using activated socket fd 3 tcp://127.0.0.1:#{activated_port}"
        assert_match(/\AHTTP\/1.1 200/, request_on(TCPSocket.new("127.0.0.1", bound_port)))
      ensure
        server.kill
      end
    end
  end

  def test_bind_to_activated_sockets_only_drops_the_binds
    activated_port = free_port
    bound_port = free_port
    in_tmpdir do |dir|
      ru = write_file(dir, "config.ru", ENV_APP)
      config = write_file(dir, "puma.rb", "bind_to_activated_sockets 'only'\n")
      server = Tsubame::ActivatedServer.new(["127.0.0.1:#{activated_port}"],
                                            ["-C", config, "-b", "tcp://127.0.0.1:#{bound_port}", ru])
      begin
        assert_match(%r{\AHTTP/1.1 200}, Timeout.timeout(20) { request_on(TCPSocket.new("127.0.0.1", activated_port)) })
        server.wait_for(:stdout, /Use Ctrl-C/)
        refute_includes server.stdout, ":#{bound_port}"
        assert_raises(Errno::ECONNREFUSED) { TCPSocket.new("127.0.0.1", bound_port) }
      ensure
        server.kill
      end
    end
  end

  def test_bind_to_activated_sockets_only_without_sockets_fails_at_boot
    in_tmpdir do |dir|
      config = write_file(dir, "puma.rb", "bind_to_activated_sockets 'only'\n")
      ru = write_file(dir, "config.ru", HELLO)
      _out, err, status = run_tsubame("-C", config, "-b", "tcp://127.0.0.1:0", ru)
      refute status.success?
      assert_includes err, "bind_to_activated_sockets 'only': no socket was handed over (LISTEN_FDS)"
    end
  end

  # --- fiber_per_request ---------------------------------------------------

  def test_fiber_per_request_runs_each_request_in_its_own_fiber
    app = "run lambda { |_env| [200, {}, [Fiber.current.object_id.to_s + ' ' + Fiber.scheduler.class.name.to_s]] }\n"
    with_config("fiber_per_request\n", rackup: app) do |server|
      first = server.get("/").body.split
      second = server.get("/").body.split
      refute_equal first[0], second[0], "a fresh fiber per request"
      refute_empty first[1], "under Tsubame's fiber scheduler"
    end
  end
end
