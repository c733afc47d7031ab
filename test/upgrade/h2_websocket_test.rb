# frozen_string_literal: true

require "test_helper"
require "upgrade/support"
require "tls/support"

# WebSockets over HTTP/2 (RFC 8441 extended CONNECT) reach the same
# rack.upgrade handlers and the same engine-held session as HTTP/1.1
# (docs/WEBSOCKETS.md "Over HTTP/2"). The client is Debian's python3-h2
# with python3-websockets' protocol layer (h2_websocket_client.py).
class UpgradeH2WebSocketTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::UpgradeSupport
  include Tsubame::TlsSupport

  # Writes 64 KiB messages until the engine refuses one; records how many
  # it took. "slow" keeps the handler busy for 3 s. "method" reports
  # what the env says of the request. /decline
  # refuses the WebSocket with a 403 instead of taking it.
  FLOOD_APP = <<~'RUBY'
    log = ENV.fetch("TSUBAME_TEST_EVENTS")
    record = ->(line) { File.open(log, "a") { |f| f.puts(line) } }
    handler = Class.new do
      define_method(:on_message) do |conn, data|
        case data
        when "flood"
          chunk = "z" * 65_536
          writes = 0
          writes += 1 while writes < 2000 && conn.write(chunk)
          record.call("refused after #{writes} open=#{conn.open?}")
        when "slow" then sleep 3
        when "method"
          conn.write("#{conn.env["REQUEST_METHOD"]} #{conn.env["SERVER_PROTOCOL"]} #{conn.env["PATH_INFO"]} " \
                     "#{conn.env["QUERY_STRING"]} #{conn.env["rack.url_scheme"]} #{conn.env["HTTP_HOST"]}")
        else conn.write(data)
        end
      end
      define_method(:on_close) { |_conn| record.call("close") }
    end
    run lambda { |env|
      next [403, { "content-type" => "text/plain" }, ["not for you"]] if env["PATH_INFO"] == "/decline"

      env["rack.upgrade"] = handler.new if env["rack.upgrade?"]
      [200, {}, []]
    }
  RUBY

  def with_upgrade_server(app = APP, args: [], config: nil, &block)
    with_event_log(app, args: ["--h2c", *args], config: config, &block)
  end

  def test_echo_text_and_binary_and_the_close_handshake_over_h2c
    with_upgrade_server do |server, log|
      client = H2Client.new(server.port)
      assert_equal 1, client.settings["enable_connect_protocol"], "SETTINGS_ENABLE_CONNECT_PROTOCOL=1"
      ws = client.open("/ws")
      assert_equal 200, ws["status"], "RFC 8441 answers 200, not 101: #{ws.inspect}"
      refute(ws["headers"].any? { |name, _| name == "sec-websocket-accept" }, "no key, no accept value")
      id = ws["stream"]
      assert_equal "welcome", client.read_message(id), "on_open wrote first"
      client.text(id, "héllo")
      assert_equal "héllo", client.read_message(id)
      client.binary(id, "\x00\xFFbin".b)
      assert_equal({ "type" => "binary", "data" => "\x00\xFFbin".b, "fin" => true }, client.recv(id))
      # Larger than a DATA frame and the initial windows both ways.
      big = "x" * 200_000
      client.text(id, big)
      assert_equal big, client.read_message(id)
      # A plain request on another stream of the same connection meanwhile.
      plain = client.get("/plain")
      assert_equal [200, "upgrade? nil"], [plain["status"], plain["body"]]
      client.close_frame(id, 4000, "done")
      assert_equal({ "type" => "close", "code" => 4000, "reason" => "" }, client.recv(id), "the code is echoed")
      assert_equal "end", client.recv(id)["type"], "then the stream ends (END_STREAM), not a reset"
      assert wait_until { events(log).last == "close false" }, events(log).inspect
      assert_equal ["open websocket", "message UTF-8 6", "message ASCII-8BIT 5", "message UTF-8 200000", "close false"],
                   events(log)
    ensure
      client&.close
    end
  end

  def test_the_handler_closes_with_its_code_and_the_env_is_the_streams
    with_upgrade_server(FLOOD_APP) do |server, _log|
      client = H2Client.new(server.port)
      id = client.open("/room/1?lang=ja")["stream"]
      client.text(id, "method")
      assert_equal "CONNECT HTTP/2 /room/1 lang=ja http 127.0.0.1:#{server.port}", client.read_message(id)
    ensure
      client&.close
    end
    with_upgrade_server do |server, log|
      client = H2Client.new(server.port)
      id = client.open["stream"]
      assert_equal "welcome", client.read_message(id)
      client.text(id, "close-4001")
      assert_equal 4001, client.recv(id)["code"], "conn.close(4001) over the stream"
      # python-websockets echoes the close; the session then ends the stream.
      assert_equal "end", client.recv(id)["type"]
      assert wait_until { events(log).last == "close false" }, events(log).inspect
    ensure
      client&.close
    end
  end

  # RFC 6455's rules hold on the stream as on a socket: the close code the
  # RFC names, and nothing reaches the handler.
  def test_bad_frames_close_with_the_rfcs_codes
    with_upgrade_server(args: ["--websocket-max-message", "1000"]) do |server, log|
      client = H2Client.new(server.port)
      cases = {
        "invalid UTF-8 in a text message" => [Tsubame::UpgradeSupport.frame(0x1, "caf\xE9".b), 1007],
        "a message over websocket_max_message" => [Tsubame::UpgradeSupport.frame(0x2, "a" * 2000), 1009],
        "an unmasked frame" => [Tsubame::UpgradeSupport.frame(0x1, "hi", mask: false), 1002],
        "a reserved opcode" => [Tsubame::UpgradeSupport.frame(0x3, "x"), 1002],
        "a bad close code" => [Tsubame::UpgradeSupport.frame(0x8, [1005].pack("n")), 1002]
      }
      cases.each do |what, (bytes, code)|
        id = client.open["stream"]
        assert_equal "welcome", client.read_message(id), what
        client.raw(id, bytes)
        assert_equal code, client.recv(id)["code"], what
        assert_equal "end", client.recv(id)["type"], "#{what}: the stream ends"
      end
      assert wait_until { events(log).count("close false") == cases.size }, events(log).inspect
      assert_empty events(log).grep(/\Amessage/), "nothing reached the handler"
    ensure
      client&.close
    end
  end

  def test_publish_reaches_websockets_over_h2_and_http1_alike
    with_upgrade_server do |server, _log|
      client = H2Client.new(server.port)
      streams = Array.new(3) { client.open["stream"] }
      streams.each { |id| assert_equal "welcome", client.read_message(id) }
      http1 = Client.new(server.port)
      assert http1.accepted?, "HTTP/1.1 WebSockets still work next to them: #{http1.response_head}"
      assert_equal "welcome", http1.read_message
      assert_equal "4", server.get("/publish?channel=chat&message=hello+all").body
      streams.each { |id| assert_equal "hello all", client.read_message(id) }
      assert_equal "hello all", http1.read_message
      server.get("/publish?channel=chat&message=%00%FFraw&binary=1")
      streams.each { |id| assert_equal({ "type" => "binary", "data" => "\x00\xFFraw".b, "fin" => true }, client.recv(id)) }
      assert_equal [2, "\x00\xFFraw".b], http1.read_frame
    ensure
      client&.close
      http1&.close
    end
  end

  def test_permessage_deflate_is_negotiated_on_the_stream
    with_upgrade_server do |server, _log|
      client = H2Client.new(server.port)
      ws = client.open("/ws", deflate: true)
      assert_includes ws["headers"], ["sec-websocket-extensions",
                                      "permessage-deflate; server_no_context_takeover; client_no_context_takeover"]
      id = ws["stream"]
      assert_equal "welcome", client.read_message(id)
      before = client.unacked(id)["wire"]
      text = "compress me, I repeat myself. " * 1000
      client.text(id, text)
      assert_equal text, client.read_message(id)
      wire = client.unacked(id)["wire"] - before
      assert_operator wire, :<, text.bytesize / 10, "the echo came compressed (#{wire} bytes on the stream)"
    ensure
      client&.close
    end
  end

  def test_wss_over_tls_with_alpn_h2
    Dir.mktmpdir do |dir|
      log = File.join(dir, "events")
      with_server(APP, args: ["-b", ssl_bind], env: { "TSUBAME_TEST_EVENTS" => log }) do |server|
        client = H2Client.new(ssl_port(server), tls: true)
        assert_equal 1, client.settings["enable_connect_protocol"]
        id = client.open("/ws", deflate: true)["stream"]
        assert_equal "welcome", client.read_message(id)
        client.text(id, "over tls " * 100)
        assert_equal "over tls " * 100, client.read_message(id)
        assert_equal "1", server.get("/publish?channel=chat&message=tls").body
        assert_equal "tls", client.read_message(id)
        client.close_frame(id, 1000)
        assert_equal 1000, client.recv(id)["code"]
        assert_equal "end", client.recv(id)["type"]
      ensure
        client&.close
      end
    end
  end

  # Extended CONNECTs the engine cannot take get RFC 8441's answers; the
  # connection goes on.
  def test_malformed_extended_connects
    with_upgrade_server do |server, log|
      client = H2Client.new(server.port)
      unknown = client.open("/ws", pseudo: { ":protocol" => "connect-udp" })
      assert_equal 501, unknown["status"], unknown.inspect
      assert_match(/unsupported :protocol/, unknown["body"])
      # The h2 layer resets these with PROTOCOL_ERROR (0x1): malformed
      # requests (RFC 8441 §4, RFC 9113 §8.1.1).
      [{ ":path" => nil }, { ":scheme" => nil }, { ":method" => "GET" }].each do |pseudo|
        answer = client.open("/ws", pseudo: pseudo, force: true)
        assert_equal 1, answer["reset"], "#{pseudo}: #{answer.inspect}"
      end
      no_version = client.open("/ws", headers: [])
      assert_equal 426, no_version["status"], no_version.inspect
      assert_includes no_version["headers"], %w[sec-websocket-version 13]
      old = client.open("/ws", headers: [%w[sec-websocket-version 8]])
      assert_equal 426, old["status"]
      no_host = client.open("/ws", pseudo: { ":authority" => nil }, force: true)
      assert_equal 400, no_host["status"], no_host.inspect
      bad_protocol = client.open("/ws", headers: [%w[sec-websocket-version 13], ["sec-websocket-protocol", "chat, a b"]])
      assert_equal 400, bad_protocol["status"], bad_protocol.inspect
      # The app took each of those four: the handler heard only on_close.
      assert wait_until { events(log).count("close false") == 4 }, events(log).inspect
      assert_empty events(log).grep(/\Aopen/)
      ok = client.open("/ws")
      assert_equal 200, ok["status"], "the connection still serves WebSockets"
      assert_equal "welcome", client.read_message(ok["stream"])
    ensure
      client&.close
    end
  end

  # An app that does not take the WebSocket: its answer is not sent on the
  # stream (a 2xx would open the WebSocket for the client); the stream is
  # reset with HTTP_1_1_REQUIRED (0xd), so a browser asks again over
  # HTTP/1.1 (h2_browser_test.rb), where the app's answer goes out.
  def test_a_websocket_the_app_does_not_take_is_sent_to_http1
    with_upgrade_server(FLOOD_APP) do |server, _log|
      client = H2Client.new(server.port)
      assert_equal 0xd, client.open("/decline")["reset"]
      http1 = Client.new(server.port, path: "/decline")
      assert_match %r{\AHTTP/1.1 403}, http1.response_head
      ok = client.open("/ws")
      assert_equal 200, ok["status"], "the connection goes on"
    ensure
      client&.close
      http1&.close
    end
  end

  # A plain CONNECT (no :protocol) is still refused: Tsubame is no proxy.
  def test_a_plain_connect_is_still_not_implemented
    with_upgrade_server do |server, _log|
      client = H2Client.new(server.port)
      answer = client.open("/ws", pseudo: { ":protocol" => nil, ":scheme" => nil, ":path" => nil }, force: true)
      assert_equal 501, answer["status"], answer.inspect
    ensure
      client&.close
    end
  end

  # Flow control stands in for TCP: while the client grants no window the
  # engine sends no more than the window, Ruby's writes wait in the
  # engine's bounded queue, and past upgrade_max_pending they are refused
  # and the connection closed with 1008 once the client reads again.
  def test_a_client_that_grants_no_window_holds_the_server_back
    with_upgrade_server(FLOOD_APP, config: "upgrade_max_pending 1_000_000\n") do |server, log|
      client = H2Client.new(server.port)
      id = client.open["stream"]
      client.pause(id)
      client.text(id, "flood")
      assert wait_until(timeout: 10) { events(log).grep(/\Arefused/).any? }, events(log).inspect
      line = events(log).grep(/\Arefused/).first
      writes = line[/after (\d+)/, 1].to_i
      assert_operator writes, :<, 40, "writes refused once 1 MB waited: #{line}"
      assert_match(/open=false/, line)
      held = client.unacked(id)["unacked"]
      assert_operator held, :<=, 65_535, "no more than the client's stream window was sent"
      client.resume(id)
      received = 0
      code = nil
      loop do
        frame = client.recv(id)
        break code = frame["code"] if frame["type"] == "close"

        assert_equal "text", frame["type"], frame.inspect
        assert_equal 65_536, frame["data"].bytesize
        received += 1
      end
      assert_equal 1008, code, "after the data that was sent, the close"
      assert_equal writes, received, "every accepted write arrived"
    ensure
      client&.close
    end
  end

  # The other way: while the handler is busy the session reads nothing,
  # so the client's window is not given back and what it still has to
  # send waits at the client, not in the server.
  def test_a_busy_handler_holds_the_client_back
    with_upgrade_server(FLOOD_APP) do |server, _log|
      client = H2Client.new(server.port)
      id = client.open["stream"]
      client.text(id, "slow")
      40.times { client.binary(id, "b" * 65_536) }
      sleep 0.5
      unsent = client.unacked(id)["unsent"]
      # 2.5 MiB offered; the stream's window (h2_initial_window_size, 1 MiB)
      # is all the server takes while the handler sleeps.
      assert_operator unsent, :>, 1_200_000, "the client was held back: #{unsent} bytes still unsent"
      40.times { assert_equal 65_536, client.read_message(id, timeout: 20).bytesize }
      assert_equal 0, client.unacked(id)["unsent"], "and all of it went once the handler was free"
    ensure
      client&.close
    end
  end

  def test_a_reset_stream_ends_the_session_and_not_the_connection
    with_upgrade_server do |server, log|
      client = H2Client.new(server.port)
      first = client.open["stream"]
      second = client.open["stream"]
      [first, second].each { |id| assert_equal "welcome", client.read_message(id) }
      client.reset(first)
      assert wait_until { events(log).include?("close false") }, events(log).inspect
      client.text(second, "still here")
      assert_equal "still here", client.read_message(second)
      assert_equal "1", server.get("/publish?channel=chat&message=x").body, "only the open stream is subscribed"
    ensure
      client&.close
    end
  end

  def test_a_stop_calls_on_shutdown_and_closes_with_1001_over_h2
    with_upgrade_server do |server, log|
      client = H2Client.new(server.port)
      id = client.open["stream"]
      assert_equal "welcome", client.read_message(id)
      server.signal("TERM")
      assert_equal "bye", client.read_message(id), "on_shutdown may still write"
      assert_equal 1001, client.recv(id)["code"]
      assert_equal 0, Timeout.timeout(15) { Process.wait2(server.pid).last }.exitstatus
      assert_equal ["open websocket", "shutdown", "close false"], events(log)
    ensure
      client&.close
    end
  end
end
