# frozen_string_literal: true

require "rack/support"

# The process around the app: thread pool concurrency, the banner, the
# pidfile, signals and graceful stop, and running under Rack's handler API
# and rackup.
class RackLifecycleTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::RackSupport

  # With STARTED_LOG set, each request adds a line there before sleeping,
  # so a test knows the requests have reached the app. `together=N` waits
  # (at most 5 s) until N requests have started, then logs "finished": the
  # log's order shows whether they ran at once, whatever the clock says.
  SLEEPY_APP = <<~'RUBY'
    run lambda { |env|
      seconds = Float(env["QUERY_STRING"][/sleep=([\d.]+)/, 1] || 0)
      together = Integer(env["QUERY_STRING"][/together=(\d+)/, 1] || 0)
      if (started = ENV["STARTED_LOG"])
        File.open(started, "a") { |f| f.puts("started") }
      end
      sleep seconds
      if together.positive?
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
        sleep 0.01 until File.read(started).scan("started").size >= together ||
                         Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        File.open(started, "a") { |f| f.puts("finished") }
      end
      text = "slept #{seconds} in #{Thread.current.name}"
      [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]]
    }
  RUBY

  # Runs `count` concurrent GETs; returns [elapsed seconds, bodies].
  def concurrent_gets(server, count, path)
    started = monotonic
    threads = Array.new(count) { Thread.new { server.get(path) } }
    responses = threads.map(&:value)
    [monotonic - started, responses]
  end

  def with_started_log(app, args: [])
    Dir.mktmpdir("tsubame-started") do |dir|
      started = File.join(dir, "started.log")
      with_server(app, args: args, env: { "STARTED_LOG" => started }) { |s| yield s, started }
    end
  end

  def test_four_threads_run_four_requests_at_once
    with_started_log(SLEEPY_APP, args: ["-t", "4:4"]) do |s, started|
      _, responses = concurrent_gets(s, 4, "/?sleep=0.1&together=4")
      assert_equal ["200"] * 4, responses.map(&:code)
      assert(responses.all? { |r| r.body.match?(/\Aslept 0\.1 in tsubame-\d\z/) }, responses.map(&:body).inspect)
      assert_equal 4, responses.map(&:body).uniq.size, "four different threads"
      assert_equal %w[started] * 4 + %w[finished] * 4, File.readlines(started, chomp: true),
                   "all four had started before the first finished"
    end
  end

  def test_one_thread_serializes_requests
    with_server(SLEEPY_APP, args: ["-t", "1:1"]) do |s|
      elapsed, responses = concurrent_gets(s, 4, "/?sleep=0.5")
      assert_equal ["slept 0.5 in tsubame-0"] * 4, responses.map(&:body)
      assert_operator elapsed, :>=, 1.95, "one at a time"
      assert_operator elapsed, :<, 4
    end
  end

  def test_banner
    with_server(SLEEPY_APP, args: ["-t", "2:3", "-e", "banner-env"], unix: true) do |s|
      lines = s.stdout.lines.map(&:chomp)
      assert_equal "Tsubame starting in single mode...", lines[0]
      assert_equal "* Tsubame version: #{Tsubame::VERSION} (ruby #{RUBY_VERSION}-p#{RUBY_PATCHLEVEL})", lines[1]
      assert_equal "*  Min threads: 2", lines[2]
      assert_equal "*  Max threads: 3", lines[3]
      assert_equal "*  Environment: banner-env", lines[4]
      assert_equal "*          PID: #{s.pid}", lines[5]
      assert_equal "* Listening on http://127.0.0.1:#{s.port}", lines[6]
      assert_equal "* Listening on unix://#{s.unix_path}", lines[7]
      assert_equal "Use Ctrl-C to stop", lines[8]
      assert_equal 9, lines.size
      # Both listeners really serve.
      assert_equal "slept 0.0 in tsubame-0", s.get("/").body.sub(/tsubame-\d/, "tsubame-0")
      UNIXSocket.open(s.unix_path) do |sock|
        sock.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert_match(/\AHTTP\/1\.1 200 OK\r\n.*\r\n\r\nslept 0\.0 in tsubame-\d\z/m, sock.read)
      end
      assert_equal 0, s.stop.exitstatus
      assert s.stdout.end_with?("Use Ctrl-C to stop\n- Goodbye!\n"), s.stdout
    end
  end

  def test_pidfile_written_and_removed
    Dir.mktmpdir("tsubame-pid") do |dir|
      pidfile = File.join(dir, "tsubame.pid")
      with_server(SLEEPY_APP, args: ["--pidfile", pidfile]) do |s|
        assert_equal "#{s.pid}\n", wait_for_file(pidfile)
        status = s.stop("TERM")
        assert_equal 0, status.exitstatus
        refute File.exist?(pidfile), "pidfile removed on exit"
      end
    end
  end

  def test_term_and_int_stop_cleanly
    %w[TERM INT].each do |signal|
      with_server(SLEEPY_APP) do |s|
        assert_equal "200", s.get("/").code
        status = s.stop(signal)
        assert status.exited?, "#{signal}: exited, not killed by the signal"
        assert_equal 0, status.exitstatus, signal
        assert s.stdout.end_with?("- Goodbye!\n"), "#{signal}: #{s.stdout}"
        assert_equal "", s.stderr, signal
      end
    end
  end

  def test_in_flight_request_completes_after_term_and_new_connections_are_refused
    with_started_log(SLEEPY_APP) do |s, started|
      port = s.port
      slow = Thread.new { exchange(s, get_bytes("/?sleep=1", { "Connection" => "close" }), timeout: 10) }
      # The request must have reached the app before the signal.
      wait_for_file(started)
      s.signal("TERM")
      sleep 0.2
      assert_raises(Errno::ECONNREFUSED, "listener closed once stopping") do
        TCPSocket.new("127.0.0.1", port).close
      end
      reply = slow.value
      assert_equal 200, reply.status
      assert_match(/\Aslept 1\.0 in tsubame-\d\z/, reply.body)
      assert reply.complete
      status = Timeout.timeout(10) { Process.wait2(s.pid).last }
      assert_equal 0, status.exitstatus
      assert s.stdout.end_with?("- Goodbye!\n")
    end
  end

  def test_drain_timeout_cuts_a_long_request
    with_started_log(SLEEPY_APP, args: ["--drain-timeout", "1"]) do |s, started|
      slow = Thread.new { exchange(s, get_bytes("/?sleep=10", { "Connection" => "close" }), timeout: 15) }
      wait_for_file(started)
      started = monotonic
      s.signal("TERM")
      status = Timeout.timeout(8) { Process.wait2(s.pid).last }
      elapsed = monotonic - started
      assert_operator elapsed, :>=, 0.9, "waited for the drain timeout"
      assert_operator elapsed, :<, 3.5, "did not wait for the 10 s request"
      assert_equal 0, status.exitstatus
      assert s.stdout.end_with?("- Goodbye!\n"), s.stdout
      reply = slow.value
      refute_equal 200, reply.status, "the cut request did not get a success"
      assert reply.closed, "the client's connection was closed"
    end
  end

  # The threads still stuck in the app share one grace period after the
  # drain timeout; they are not waited for one after another.
  def test_drain_timeout_with_several_stuck_requests
    with_started_log(SLEEPY_APP, args: ["-t", "4:4", "--drain-timeout", "1"]) do |s, started|
      slow = Array.new(4) { Thread.new { exchange(s, get_bytes("/?sleep=10", { "Connection" => "close" }), timeout: 15) } }
      wait_for_file(started) { |text| text.lines.size == 4 }
      started = monotonic
      s.signal("TERM")
      status = Timeout.timeout(10) { Process.wait2(s.pid).last }
      elapsed = monotonic - started
      assert_operator elapsed, :<, 3.5, "four stuck threads must not add a second each"
      assert_equal 0, status.exitstatus
      assert s.stdout.end_with?("- Goodbye!\n"), s.stdout
      assert(slow.map(&:value).all? { |reply| reply.closed && reply.status != 200 })
    end
  end

  def test_term_with_an_idle_keep_alive_connection_exits_at_once
    with_server(SLEEPY_APP) do |s|
      http = s.http
      assert_equal "slept 0.0 in tsubame-0", http.get("/").body.sub(/tsubame-\d/, "tsubame-0")
      started = monotonic
      status = s.stop("TERM")
      assert_operator monotonic - started, :<, 5, "an idle connection does not hold up the stop (its keep-alive timeout is 20 s)"
      assert_equal 0, status.exitstatus
    end
  end

  # Runs a command that prints the banner, waits for "Listening on", and
  # yields the pid; always reaps it.
  def with_process(env, *cmd, chdir: ROOT)
    out_r, out_w = IO.pipe
    pid = Process.spawn(env, *cmd, out: out_w, err: out_w, in: File::NULL, chdir: chdir)
    out_w.close
    output = +""
    Timeout.timeout(15) do
      output << out_r.readpartial(4096) until output.include?("Use Ctrl-C to stop")
    end
    yield pid, output
  rescue EOFError
    flunk "process exited early: #{output}"
  ensure
    if pid
      begin
        Process.kill("KILL", pid)
        Process.wait(pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      end
    end
    out_r&.close
  end

  def test_rack_handler_runs_the_app
    skip "Rack::Handler is Rack 2's API (Rack 3 moved it to the rackup gem)" unless rack2?
    port = free_port
    script = <<~RUBY
      require "rack"
      require "rack/handler"
      app = ->(env) { [200, { "content-type" => "text/plain" }, ["via handler \#{env["SERVER_SOFTWARE"]}"]] }
      handler = Rack::Handler.get("tsubame")
      raise "wrong handler \#{handler}" unless handler.name == "Rack::Handler::Tsubame"
      handler.run(app, Host: "127.0.0.1", Port: #{port})
    RUBY
    with_process({}, RbConfig.ruby, "-w", "-Ilib", "-e", script) do |pid, output|
      assert_includes output, "* Listening on http://127.0.0.1:#{port}"
      res = Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/"))
      assert_equal "200", res.code
      assert_equal "via handler Tsubame #{Tsubame::VERSION}", res.body
      Process.kill("TERM", pid)
      status = Timeout.timeout(10) { Process.wait2(pid).last }
      assert_equal 0, status.exitstatus
    end
  end

  def test_rackup_serves_with_tsubame
    rackup = ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |d| File.join(d, "rackup") }.find { |f| File.executable?(f) }
    skip "no rackup executable on PATH" unless rackup
    skip "rackup -s tsubame via RUBYLIB is checked with Rack 2's rackup" unless rack2?
    port = free_port
    Dir.mktmpdir("tsubame-rackup") do |dir|
      File.write(File.join(dir, "config.ru"), <<~'RUBY')
        run ->(env) { [200, { "content-type" => "text/plain" }, ["rackup says #{env["SERVER_SOFTWARE"]} #{env["rack.multithread"]}"]] }
      RUBY
      env = { "RUBYLIB" => [File.join(ROOT, "lib"), ENV["RUBYLIB"]].compact.join(File::PATH_SEPARATOR) }
      with_process(env, rackup, "-s", "tsubame", "-o", "127.0.0.1", "-p", port.to_s, "config.ru", chdir: dir) do |pid, output|
        assert_includes output, "Tsubame starting in single mode..."
        assert_includes output, "* Listening on http://127.0.0.1:#{port}"
        res = Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/"))
        assert_equal "200", res.code
        # rackup's development middleware includes Rack::Lint, so this also
        # checks the env once more.
        assert_equal "rackup says Tsubame #{Tsubame::VERSION} true", res.body
        Process.kill("INT", pid)
        status = Timeout.timeout(10) { Process.wait2(pid).last }
        assert_equal 0, status.exitstatus
      end
    end
  end
end
