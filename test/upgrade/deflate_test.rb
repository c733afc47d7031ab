# frozen_string_literal: true

require "test_helper"
require "upgrade/support"
require "zlib"
require "open3"

# permessage-deflate (RFC 7692) on rack.upgrade WebSockets: accepted when
# the client offers it, each message compressed on its own both ways, and
# compressed input held to the same limits as plain (docs/WEBSOCKETS.md).
class UpgradeDeflateTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::UpgradeSupport

  OFFER = { "Sec-WebSocket-Extensions" => "permessage-deflate; client_max_window_bits" }.freeze
  ACCEPTED = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"

  def with_upgrade_server(args: [], &block)
    with_event_log(APP, args: args, &block)
  end

  # A message as a client compresses it: raw deflate, sync-flushed, the
  # 00 00 ff ff tail taken off (RFC 7692 §7.2.1).
  def deflate(data)
    z = Zlib::Deflate.new(Zlib::DEFAULT_COMPRESSION, -Zlib::MAX_WBITS)
    out = z.deflate(data.b, Zlib::SYNC_FLUSH)
    z.reset # a message ends without a final block: reset, or close warns
    z.close
    out.delete_suffix("\x00\x00\xff\xff".b)
  end

  def inflate(data)
    z = Zlib::Inflate.new(-Zlib::MAX_WBITS)
    out = z.inflate(data + "\x00\x00\xff\xff".b)
    z.reset
    z.close
    out
  end

  def extensions(client)
    client.response_head[/^sec-websocket-extensions:\s*(.*?)\r?$/i, 1]
  end

  def test_compressed_messages_both_ways
    with_upgrade_server do |server, log|
      client = Client.new(server.port, headers: OFFER)
      assert client.accepted?, client.response_head
      assert_equal ACCEPTED, extensions(client)
      assert_equal "welcome", client.read_message
      assert_equal 0, client.last_rsv, "a short message goes out plain"
      text = "compress me, I repeat myself. " * 100
      client.send_frame(0x1, deflate(text), rsv: 4)
      echoed = client.read_message
      assert_equal 4, client.last_rsv, "a long message goes out compressed (RSV1)"
      assert_operator echoed.bytesize, :<, text.bytesize / 5
      assert_equal text, inflate(echoed).force_encoding(Encoding::UTF_8)
      # A compressed message split over two frames (RSV1 on the first only).
      packed = deflate("héllo again " * 20)
      client.send_frame(0x1, packed[0, 10], fin: false, rsv: 4)
      client.send_frame(0x0, packed[10..])
      assert_equal "héllo again " * 20, inflate(client.read_message).force_encoding(Encoding::UTF_8)
      # Uncompressed messages stay allowed beside compressed ones.
      client.text("plain")
      assert_equal "plain", client.read_message
      assert wait_until { events(log).include?("message UTF-8 3000") }, events(log).inspect
    ensure
      client&.close
    end
  end

  def test_compressed_input_is_held_to_the_limits
    with_upgrade_server(args: ["--websocket-max-message", "10000"]) do |server, _log|
      cases = {
        "a bomb past the message limit" => [deflate("a" * 20_000), 1009],
        "data that is not deflate" => ["\xff\xfe\xfd\xfc not deflate".b, 1007],
        "text that inflates to invalid UTF-8" => [deflate("caf\xE9 ".b * 30), 1007]
      }
      cases.each do |what, (payload, code)|
        client = Client.new(server.port, headers: OFFER)
        assert_equal "welcome", client.read_message, what
        client.send_frame(0x1, payload, rsv: 4)
        assert_equal code, client.read_close, what
      ensure
        client&.close
      end
      # RSV1 on a control frame is a protocol error even with the extension.
      client = Client.new(server.port, headers: OFFER)
      client.read_message
      client.send_frame(0x9, "ping", rsv: 4)
      assert_equal 1002, client.read_close
    ensure
      client&.close
    end
  end

  def test_not_offered_declined_or_turned_off_means_no_extension
    with_upgrade_server do |server, _log|
      plain = Client.new(server.port)
      assert plain.accepted?
      assert_nil extensions(plain)
      plain.read_message
      plain.send_frame(0x1, deflate("x" * 100), rsv: 4)
      assert_equal 1002, plain.read_close, "RSV1 without the extension"
      plain.close
      # A window the encoder cannot keep to is declined, and the connection goes on plain.
      narrow = Client.new(server.port, headers: { "Sec-WebSocket-Extensions" => "permessage-deflate; server_max_window_bits=10" })
      assert narrow.accepted?
      assert_nil extensions(narrow)
      narrow.close
    end
    with_upgrade_server(args: ["--no-websocket-deflate"]) do |server, _log|
      client = Client.new(server.port, headers: OFFER)
      assert client.accepted?
      assert_nil extensions(client)
      assert_equal "welcome", client.read_message
      client.text("y" * 500)
      assert_equal "y" * 500, client.read_message
      assert_equal 0, client.last_rsv
      client.close
    end
  end

  # Python's websockets (Debian's python3-websockets) offers
  # permessage-deflate by default: a real client's view of it.
  def test_a_real_client_negotiates_and_round_trips
    script = <<~'PY'
      import asyncio, sys, websockets
      async def main():
          async with websockets.connect(sys.argv[1]) as ws:
              await ws.recv()
              text = "spam and eggs " * 200
              await ws.send(text)
              assert await ws.recv() == text
              print(",".join(e.name for e in ws.extensions))
      asyncio.run(main())
    PY
    with_upgrade_server do |server, _log|
      out, err, status = Open3.capture3("/usr/bin/python3", "-c", script, "ws://127.0.0.1:#{server.port}/ws")
      assert status.success?, err
      assert_equal "permessage-deflate", out.strip
    end
  end
end
