# frozen_string_literal: true

require "test_helper"
require "cluster/support"
require "json"
require "openssl"

module Tsubame
  # Plays systemd's side of sd_notify(3): a datagram socket bound where
  # $NOTIFY_SOCKET says (a path, or "@name" for an abstract socket),
  # recording every notification with when it came.
  class NotifyListener
    Message = Struct.new(:at, :text, :snapshot) do
      def fields
        text.lines.to_h { |line| line.chomp.split("=", 2) }
      end
    end

    attr_reader :env_value

    # abstract: bind an abstract socket (no file) instead of a path.
    # snapshot: called in the listener's thread as each message arrives,
    # its value kept with the message (what was true at that instant).
    def initialize(abstract: false, snapshot: nil)
      @dir = Dir.mktmpdir("tsubame-notify")
      if abstract
        name = "tsubame-test-#{Process.pid}-#{rand(1 << 30)}"
        @env_value = "@#{name}"
        address = "\0#{name}"
      else
        @env_value = address = File.join(@dir, "notify.sock")
      end
      @socket = Socket.new(:UNIX, :DGRAM)
      @socket.bind(Socket.sockaddr_un(address))
      @snapshot = snapshot
      @messages = []
      @lock = Mutex.new
      @thread = Thread.new { receive }
    end

    def env
      { "NOTIFY_SOCKET" => @env_value }
    end

    def messages
      @lock.synchronize { @messages.dup }
    end

    # Waits for a message matching pattern that came after the one at
    # index `after`; returns [index, message] or fails the test.
    def wait_for(pattern, after: -1, timeout: 20)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        found = messages.each_with_index.find { |message, index| index > after && message.text.match?(pattern) }
        return found.reverse if found
        if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          raise Minitest::Assertion, "no notification matching #{pattern.inspect} within #{timeout}s; " \
                                     "got #{messages.map(&:text).inspect}"
        end

        sleep 0.02
      end
    end

    def close
      @thread.kill.join
      @socket.close
      FileUtils.rm_rf(@dir)
    end

    private

    def receive
      loop do
        text = @socket.recv(4096)
        at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        snapshot = @snapshot&.call(text)
        @lock.synchronize { @messages << Message.new(at, text, snapshot) }
      end
    end
  end

  # systemd-socket-activate (Debian's systemd package) listening on real
  # sockets and exec'ing exe/tsubame on the first connection, with
  # LISTEN_FDS set (its default mode, not --accept).
  class ActivatedServer
    attr_reader :pid, :stdout_path

    # listen: ["127.0.0.1:PORT", ...]; names: LISTEN_FDNAMES; args: the
    # server's flags and rackup file. It passes on only the variables
    # given with -E (and TERM, PATH, USER, HOME).
    def initialize(listen, args, names: nil, env: {})
      @dir = Dir.mktmpdir("tsubame-activate")
      @stdout_path = File.join(@dir, "out.log")
      @stderr_path = File.join(@dir, "err.log")
      command = ["systemd-socket-activate", *listen.flat_map { |address| ["-l", address] }]
      command << "--fdname=#{names.join(":")}" if names
      env.each { |key, value| command << "-E" << "#{key}=#{value}" }
      command += [RbConfig.ruby, "-w", TestHelpers::EXE, *args]
      @pid = Process.spawn(*command, out: @stdout_path, err: @stderr_path, in: File::NULL)
      # It says "Listening on ADDRESS as N." for each socket it opened.
      wait_for(:stderr, /as #{listen.size + 2}\./)
    end

    def stdout
      File.read(@stdout_path)
    end

    def stderr
      File.read(@stderr_path)
    end

    def wait_for(stream, pattern, timeout: 15)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      until send(stream).match?(pattern)
        raise "exited before #{pattern.inspect}:\n#{stdout}\n#{stderr}" if Process.waitpid(@pid, Process::WNOHANG)
        raise "timed out waiting for #{pattern.inspect}:\n#{stdout}\n#{stderr}" if
          Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.02
      end
    end

    # Returns the exit status.
    def stop(timeout: 20)
      Process.kill("TERM", @pid)
      Timeout.timeout(timeout) { Process.wait2(@pid).last }
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end

    def kill
      Process.kill("KILL", @pid)
      Process.wait(@pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    ensure
      FileUtils.rm_rf(@dir)
    end
  end

  module DeployHelpers
    include ClusterHelpers

    # Shows which of systemd's variables the app can see (none, it must).
    ENV_APP = <<~RUBY
      run lambda { |_env|
        seen = %w[NOTIFY_SOCKET WATCHDOG_USEC LISTEN_FDS LISTEN_PID LISTEN_FDNAMES].select { |k| ENV.key?(k) }
        [200, { "content-type" => "text/plain" }, ["pid=\#{Process.pid} seen=\#{seen.join(",")}"]]
      }
    RUBY

    def with_listener(**opts)
      listener = NotifyListener.new(**opts)
      yield listener
    ensure
      listener&.close
    end

    # A raw HTTP/1.1 request on a connection opened by the caller;
    # returns the whole response (the server closes: connection: close).
    def request_on(socket)
      socket.write("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
      socket.read
    end
  end
end


module Tsubame
  # Support for the tests of serving behind a proxy (docs/PROXY.md): a
  # server whose app writes each request's REMOTE_ADDR to a log (so a test
  # can tell a request that never reached the app), raw PROXY headers, and
  # HAProxy and nginx started on loopback with generated configs.
  module DeploySupport
    APP = <<~RUBY
      log = ENV.fetch("DEPLOY_APP_LOG")
      run lambda { |env|
        File.open(log, "a") { |f| f.puts(env["REMOTE_ADDR"]) }
        [200, { "content-type" => "text/plain" }, [env["REMOTE_ADDR"].to_s]]
      }
    RUBY

    V2_SIGNATURE = "\r\n\r\n\0\r\nQUIT\n".b.freeze

    # A v2 header: PROXY (command 1) or LOCAL (0), TCP over IPv4.
    def v2_header(src: "203.0.113.5", sport: 40_000, command: 1, tlvs: "".b)
      addresses = src.split(".").map(&:to_i).pack("C4") + [10, 0, 0, 1].pack("C4") + [sport, 443].pack("nn")
      payload = addresses + tlvs
      V2_SIGNATURE + [0x20 | command, 0x11, payload.bytesize].pack("CCn") + payload
    end

    def v1_header(src: "192.0.2.7", sport: 5555)
      "PROXY TCP4 #{src} 10.0.0.1 #{sport} 443\r\n"
    end

    def request(path = "/", headers = {}, close: true)
      lines = ["GET #{path} HTTP/1.1", "Host: example.test"]
      headers.each { |name, value| Array(value).each { |v| lines << "#{name}: #{v}" } }
      lines << "Connection: close" if close
      "#{lines.join("\r\n")}\r\n\r\n"
    end

    # A server for these tests: extra binds, a config file's text.
    # Yields the server and the app's log path.
    def with_deploy_server(binds: [], config: "", args: [])
      dir = Dir.mktmpdir("tsubame-deploy")
      log = File.join(dir, "app.log")
      File.write(log, "")
      conf = File.join(dir, "tsubame.rb")
      File.write(conf, config)
      bind_args = binds.flat_map { |uri| ["-b", uri] }
      # The tests read raw responses and expect the Array body's length,
      # which Rack 2's Lint hides (it goes out chunked).
      with_server(APP, args: ["-C", conf, *bind_args, *args], env: { "DEPLOY_APP_LOG" => log },
                       lint: TestHelpers::LINT_FORWARDS_BODY) do |server|
        yield server, log
      end
    ensure
      FileUtils.rm_rf(dir) if dir
    end

    # The port of the server's bind number `index` (0 is TestServer's own
    # tcp://127.0.0.1:0, then the binds given, in order).
    def port_of(server, index)
      server.addresses.fetch(index)[/:(\d+)\z/, 1].to_i
    end

    def app_saw(log)
      File.read(log).split("\n")
    end

    # Writes each piece (pausing between them), then reads until the
    # server closes. from: the local address to connect from.
    def exchange(port, *pieces, from: nil, pause: 0.05, timeout: 5)
      sock = from ? Socket.tcp("127.0.0.1", port, from, 0) : TCPSocket.new("127.0.0.1", port)
      pieces.each_with_index do |piece, i|
        sleep pause if i.positive?
        sock.write(piece)
      end
      read_until_close(sock, timeout).first
    rescue Errno::ECONNRESET, Errno::EPIPE
      ""
    ensure
      sock&.close
    end


    def body_of(response)
      response.split("\r\n\r\n", 2)[1]
    end

    def health(server, port: server.port)
      JSON.parse(body_of(exchange(port, request("/up"))))
    end

    # --- HAProxy and nginx ------------------------------------------------

    # Runs `command` (an Array) in the background until the block returns.
    def with_daemon(command, ready_port:, log:)
      pid = Process.spawn(*command, out: log, err: log, in: File::NULL)
      ok = wait_until(timeout: 10) do
        raise "#{command.first} exited: #{File.read(log)}" if Process.waitpid(pid, Process::WNOHANG)

        TCPSocket.new("127.0.0.1", ready_port).close || true
      rescue SystemCallError
        false
      end
      raise "#{command.first} did not listen on #{ready_port}: #{File.read(log)}" unless ok

      yield
    ensure
      if pid
        begin
          Process.kill("TERM", pid)
          Process.wait(pid)
        rescue Errno::ESRCH, Errno::ECHILD
          nil
        end
      end
    end

    def haproxy_config(listen_port, backend_port, send_proxy)
      <<~CFG
        global
          maxconn 64
        defaults
          mode http
          option http-keep-alive
          timeout connect 5s
          timeout client 20s
          timeout server 20s
        frontend web
          bind 127.0.0.1:#{listen_port}
          default_backend tsubame
        backend tsubame
          server app 127.0.0.1:#{backend_port} #{send_proxy}
      CFG
    end

    def nginx_config(dir, listen_port, socket)
      <<~CFG
        daemon off;
        master_process off;
        worker_processes 1;
        pid #{dir}/nginx.pid;
        error_log #{dir}/error.log;
        events { worker_connections 64; }
        http {
          access_log off;
          client_body_temp_path #{dir}/body;
          proxy_temp_path #{dir}/proxy;
          fastcgi_temp_path #{dir}/fastcgi;
          uwsgi_temp_path #{dir}/uwsgi;
          scgi_temp_path #{dir}/scgi;
          upstream tsubame {
            server unix:#{socket};
            keepalive 4;
          }
          server {
            listen 127.0.0.1:#{listen_port};
            location / {
              proxy_pass http://tsubame;
              proxy_http_version 1.1;
              proxy_set_header Connection "";
              proxy_set_header Host $host;
              proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            }
          }
        }
      CFG
    end
  end
end
