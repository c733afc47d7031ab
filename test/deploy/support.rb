# frozen_string_literal: true

require "test_helper"
require "json"
require "openssl"

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
      with_server(APP, args: ["-C", conf, *bind_args, *args], env: { "DEPLOY_APP_LOG" => log }) do |server|
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
      read_until_close(sock, timeout)
    rescue Errno::ECONNRESET, Errno::EPIPE
      ""
    ensure
      sock&.close
    end

    def read_until_close(sock, timeout)
      out = +""
      deadline = monotonic + timeout
      loop do
        left = deadline - monotonic
        break if left <= 0 || !sock.wait_readable(left)

        chunk = sock.read_nonblock(65_536, exception: false)
        break if chunk.nil?
        next if chunk == :wait_readable

        out << chunk
      end
      out
    rescue Errno::ECONNRESET
      out
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
