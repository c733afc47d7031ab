# frozen_string_literal: true

require "test_helper"
require "tls/support"

# What a browser does with WebSockets on an HTTP/2 connection (Debian's
# headless Chromium, over wss:// on an ssl:// bind): it opens them with an
# extended CONNECT because the server's SETTINGS allow it, which reaches
# rack.upgrade handlers; for an app that opens WebSockets by full hijack
# (faye-websocket, ActionCable), which HTTP/2 cannot offer, the engine's
# RST_STREAM HTTP_1_1_REQUIRED makes the browser retry over HTTP/1.1
# (docs/WEBSOCKETS.md "Over HTTP/2").
class UpgradeH2BrowserTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport

  # The page opens a WebSocket to the path in its query, sends "ping" and
  # reports what came back. /upgrade echoes with rack.upgrade; /hijack
  # does the RFC 6455 handshake itself over a full hijack, as
  # faye-websocket does, and answers 404 where there is no hijack.
  APP = <<~'RUBY'
    require "digest/sha1"
    log = ENV.fetch("TSUBAME_TEST_EVENTS")
    record = ->(line) { File.open(log, "a") { |f| f.puts(line) } }
    echo = Class.new do
      define_method(:on_message) { |conn, data| conn.write(data) }
    end
    page = <<~HTML
      <!doctype html><title>ws</title><script>
      const report = (m) => fetch("/report?" + encodeURIComponent(m));
      const ws = new WebSocket(`wss://${location.host}${location.search.slice(1)}`);
      ws.onopen = () => ws.send("ping");
      ws.onmessage = (e) => report("got " + e.data);
      ws.onclose = (e) => report("closed " + e.code);
      </script>
    HTML
    hijack_echo = lambda do |env|
      io = env["rack.hijack"].call
      accept = [Digest::SHA1.digest(env["HTTP_SEC_WEBSOCKET_KEY"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")].pack("m0")
      io.write("HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n" \
               "sec-websocket-accept: #{accept}\r\n\r\n")
      Thread.new do
        len = io.read(2).getbyte(1) & 0x7f # "ping": one short masked frame
        mask = io.read(4)
        data = io.read(len).bytes.each_with_index.map { |b, i| b ^ mask.getbyte(i % 4) }.pack("C*")
        io.write([0x81, data.bytesize].pack("CC") + data)
        sleep 2
        io.close
      end
      [200, {}, []]
    end
    run lambda { |env|
      path = env["PATH_INFO"]
      record.call("#{env["REQUEST_METHOD"]} #{env["SERVER_PROTOCOL"]} #{path}") if %w[/upgrade /hijack].include?(path)
      case path
      when "/" then [200, { "content-type" => "text/html" }, [page]]
      when "/report"
        record.call("report #{Rack::Utils.unescape(env["QUERY_STRING"])}")
        [204, {}, []]
      when "/upgrade"
        env["rack.upgrade"] = echo.new if env["rack.upgrade?"]
        [200, {}, []]
      when "/hijack"
        env["rack.hijack"] && env["HTTP_UPGRADE"] ? hijack_echo.call(env) : [404, { "content-type" => "text/plain" }, ["no"]]
      else [404, { "content-type" => "text/plain" }, ["no"]]
      end
    }
  RUBY

  # Chromium opens the page and stays open (a DevTools port keeps headless
  # Chromium running) while the block waits for what the page reports;
  # then it is killed. A fixed virtual-time budget let it exit before the
  # WebSocket's round trip on a loaded machine.
  def browse(server, path)
    profile = Dir.mktmpdir("tsubame-chromium")
    url = "https://localhost:#{ssl_port(server)}/?#{path}"
    # Its own process group, so its renderer and helper processes go too.
    pid = Process.spawn("chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--ignore-certificate-errors", "--user-data-dir=#{profile}", "--remote-debugging-port=0",
                        url, out: File::NULL, err: File::NULL, pgroup: true)
    begin
      yield
    ensure
      Process.kill("KILL", -pid)
      Process.wait(pid)
      FileUtils.rm_rf(profile)
    end
  end

  def with_browser_server
    Dir.mktmpdir do |dir|
      log = File.join(dir, "events")
      with_server(APP, args: ["-b", ssl_bind], env: { "TSUBAME_TEST_EVENTS" => log }) { |server| yield server, log }
    end
  end

  def lines(log)
    File.exist?(log) ? File.readlines(log, chomp: true) : []
  end

  def test_a_browser_opens_rack_upgrade_websockets_over_h2
    with_browser_server do |server, log|
      browse(server, "/upgrade") do
        assert wait_until(timeout: 60) { lines(log).include?("report got ping") }, lines(log).inspect
      end
      assert_equal ["CONNECT HTTP/2 /upgrade"], lines(log).grep(/upgrade\z/), "one extended CONNECT, no HTTP/1.1"
    end
  end

  def test_a_hijack_websocket_falls_back_to_http1
    with_browser_server do |server, log|
      browse(server, "/hijack") do
        assert wait_until(timeout: 60) { lines(log).include?("report got ping") }, lines(log).inspect
      end
      assert_equal ["CONNECT HTTP/2 /hijack", "GET HTTP/1.1 /hijack"], lines(log).grep(/hijack\z/),
                   "the CONNECT was reset with HTTP_1_1_REQUIRED, and the browser retried over HTTP/1.1"
    end
  end
end
