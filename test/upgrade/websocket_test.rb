# frozen_string_literal: true

require "test_helper"
require "upgrade/support"

# rack.upgrade WebSockets: the engine does the handshake and the protocol,
# the handler's callbacks run per event (docs/WEBSOCKETS.md).
class UpgradeWebSocketTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::UpgradeSupport

  def with_upgrade_server(args: [], &block)
    with_event_log(APP, args: args, &block)
  end

  def test_handshake_echo_and_callbacks
    with_upgrade_server do |server, log|
      assert_equal "upgrade? nil", server.get("/plain").body, "a plain request is offered no upgrade"
      client = Client.new(server.port)
      assert client.accepted?, client.response_head
      assert_equal "welcome", client.read_message, "on_open wrote first"
      client.text("héllo")
      assert_equal "héllo", client.read_message.force_encoding(Encoding::UTF_8)
      client.binary("\x00\xFFbin".b)
      assert_equal "\x00\xFFbin".b, client.read_message
      # Fragments with a ping between them: one message, the ping answered.
      client.send_frame(0x1, "frag", fin: false)
      client.send_frame(0x9, "are you there")
      client.send_frame(0x0, "mented")
      assert_equal [0xA, "are you there"], client.read_frame, "pong with the ping's payload"
      assert_equal "fragmented", client.read_message
      big = "x" * 200_000
      client.text(big)
      assert_equal big, client.read_message
      client.close_frame(1000)
      assert_equal 1000, client.read_close, "the close is echoed"
      assert client.eof?, "then the connection ends"
      assert wait_until { events(log).last == "close false" }, events(log).inspect
      assert_equal ["open websocket", "message UTF-8 6", "message ASCII-8BIT 5", "message UTF-8 10",
                    "message UTF-8 200000", "close false"], events(log)
    ensure
      client&.close
    end
  end

  def test_the_handler_closes_and_errors_are_logged
    with_upgrade_server do |server, log|
      client = Client.new(server.port)
      client.read_message
      client.text("raise")
      client.text("still here")
      assert_equal "still here", client.read_message, "a raising callback does not end the connection"
      assert wait_until { server.stderr.include?("raised in on_message: RuntimeError: handler failure") }, server.stderr
      client.text("close-4001")
      assert_equal 4001, client.read_close
      client.close_frame(4001)
      assert client.eof?
      assert wait_until { events(log).last == "close false" }
    ensure
      client&.close
    end
  end

  def test_publish_reaches_every_subscriber_and_idle_sockets_hold_no_thread
    with_upgrade_server do |server, _log|
      before = Integer(server.get("/threads").body)
      clients = Array.new(50) { Client.new(server.port) }
      clients.each { |c| assert_equal "welcome", c.read_message }
      during = Integer(server.get("/threads").body)
      # The handler threads start with the first upgrade; 50 sockets add
      # nothing more.
      assert_operator during - before, :<=, 2, "threads before #{before}, with 50 WebSockets #{during}"
      assert_equal "50", server.get("/publish?channel=chat&message=hello+all").body
      clients.each { |c| assert_equal "hello all", c.read_message }
      assert_equal "0", server.get("/publish?channel=nobody&message=x").body
    ensure
      clients&.each(&:close)
    end
  end

  # Tsubame.publish in one worker reaches the subscribers of every worker.
  def test_publish_crosses_the_workers_of_a_cluster
    with_upgrade_server(args: ["-w", "2"]) do |server, _log|
      clients = []
      pids = Hash.new { |h, k| h[k] = [] }
      deadline = monotonic + 20
      until pids.size == 2 && pids.values.all? { |list| list.size >= 2 }
        flunk "connections never reached both workers: #{pids.transform_values(&:size)}" if monotonic > deadline
        client = Client.new(server.port)
        assert_equal "welcome", client.read_message
        client.text("pid")
        pids[client.read_message] << client
        clients << client
      end
      count = Integer(server.get("/publish?channel=chat&message=everyone").body)
      assert_includes pids.values.map(&:size), count, "the count is the publishing worker's own subscribers"
      clients.each { |c| assert_equal "everyone", c.read_message }
      # Binary crosses the master as base64 and arrives as a binary frame.
      server.get("/publish?channel=chat&message=%00%FFraw&binary=1")
      clients.each { |c| assert_equal [2, "\x00\xFFraw".b], c.read_frame }
    ensure
      clients&.each(&:close)
    end
  end

  def test_a_stop_calls_on_shutdown_and_closes_with_1001
    with_upgrade_server do |server, log|
      client = Client.new(server.port)
      client.read_message
      server.signal("TERM")
      assert_equal "bye", client.read_message, "on_shutdown may still write"
      assert_equal 1001, client.read_close
      client.close_frame(1001)
      assert_equal 0, Timeout.timeout(10) { Process.wait2(server.pid).last }.exitstatus
      assert_equal ["open websocket", "shutdown", "close false"], events(log)
    ensure
      client&.close
    end
  end

  def test_invalid_handshakes_are_refused_before_the_handler_runs
    with_upgrade_server do |server, log|
      client = Client.new(server.port, headers: { "Sec-WebSocket-Version" => "8" })
      assert_match(%r{\AHTTP/1.1 426 }, client.response_head)
      assert_match(/^sec-websocket-version: 13\r$/i, client.response_head)
      assert wait_until { events(log) == ["close false"] }, "only on_close: #{events(log).inspect}"
      # A second key (RFC 6455 allows one): 400, and again only on_close.
      other = Client.new(server.port, headers: { "Sec-WebSocket-Key" => "AAAAAAAAAAAAAAAAAAAAAA==" })
      assert_match(%r{\AHTTP/1.1 400 }, other.response_head)
      assert wait_until { events(log) == ["close false", "close false"] }, events(log).inspect
    ensure
      client&.close
      other&.close
    end
  end
end
