# frozen_string_literal: true

require "test_helper"
require "upgrade/support"

# Client frames that break RFC 6455, sent to a rack.upgrade WebSocket: each
# ends the connection with the close code the RFC names, and none of it
# reaches the handler (its on_message never runs).
class WebSocketFramesTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::UpgradeSupport

  # [name, expected close code, how to send it]
  CASES = [
    ["unmasked frame", 1002, ->(c) { c.send_frame(0x1, "hi", mask: false) }],
    ["RSV1 without an extension", 1002, ->(c) { c.send_frame(0x1, "hi", rsv: 4) }],
    ["RSV2", 1002, ->(c) { c.send_frame(0x1, "hi", rsv: 2) }],
    ["RSV3", 1002, ->(c) { c.send_frame(0x1, "hi", rsv: 1) }],
    ["reserved data opcode 0x3", 1002, ->(c) { c.send_frame(0x3, "hi") }],
    ["reserved control opcode 0xB", 1002, ->(c) { c.send_frame(0xB, "hi") }],
    ["ping over 125 bytes", 1002, ->(c) { c.send_frame(0x9, "p" * 126) }],
    ["fragmented ping", 1002, ->(c) { c.send_frame(0x9, "p", fin: false) }],
    ["continuation with no message", 1002, ->(c) { c.send_frame(0x0, "lost") }],
    ["new message inside a fragmented one", 1002,
     ->(c) { c.send_frame(0x1, "one", fin: false) && c.send_frame(0x1, "two") }],
    ["invalid UTF-8", 1007, ->(c) { c.send_frame(0x1, "\xC3\x28".b) }],
    ["overlong encoding", 1007, ->(c) { c.send_frame(0x1, "\xC0\xAF".b) }],
    ["UTF-16 surrogate", 1007, ->(c) { c.send_frame(0x1, "\xED\xA0\x80".b) }],
    ["code point over U+10FFFF", 1007, ->(c) { c.send_frame(0x1, "\xF4\x90\x80\x80".b) }],
    ["invalid UTF-8 in the first fragment", 1007, ->(c) { c.send_frame(0x1, "ok\xFF".b, fin: false) }],
    ["close with a 1-byte payload", 1002, ->(c) { c.send_frame(0x8, "\x03".b) }],
    ["close code 1005 (never sent)", 1002, ->(c) { c.close_frame(1005) }],
    ["close code 1006 (never sent)", 1002, ->(c) { c.close_frame(1006) }],
    ["close code 1015 (never sent)", 1002, ->(c) { c.close_frame(1015) }],
    ["close code 999", 1002, ->(c) { c.close_frame(999) }],
    ["close code 1016 (unassigned)", 1002, ->(c) { c.close_frame(1016) }],
    ["close code 2999 (reserved)", 1002, ->(c) { c.close_frame(2999) }],
    ["close code 5000", 1002, ->(c) { c.close_frame(5000) }],
    ["close reason not UTF-8", 1007, ->(c) { c.close_frame(1000, "\xFF".b) }],
    ["message over websocket_max_message", 1009, ->(c) { c.send_frame(0x2, "x" * 1001) }],
    ["fragments adding up over the limit", 1009,
     ->(c) { c.send_frame(0x2, "x" * 600, fin: false) && c.send_frame(0x0, "x" * 600) }],
    ["64-bit length with the high bit set", 1002,
     ->(c) { c.sock_write([0x82, 0x80 | 127].pack("CC") + [1 << 63].pack("Q>") + "mask") }],
    ["length not in its shortest form", 1002,
     ->(c) { c.sock_write([0x82, 0x80 | 126, 5].pack("CCn") + "\x00\x00\x00\x00hello".b) }]
  ].freeze

  def test_each_bad_frame_gets_its_close_code_and_never_reaches_the_app
    assert_operator CASES.size, :>=, 25
    Dir.mktmpdir do |dir|
      log = File.join(dir, "events")
      with_server(APP, args: ["--websocket-max-message", "1000"], env: { "TSUBAME_TEST_EVENTS" => log }) do |server|
        CASES.each do |name, code, send|
          client = Client.new(server.port)
          assert client.accepted?, name
          assert_equal "welcome", client.read_message, name
          send.call(client)
          assert_equal code, client.read_close, name
          assert client.eof?, "#{name}: the connection ends"
        ensure
          client&.close
        end
        assert wait_until { events(log).count("close false") == CASES.size }, events(log).tally.inspect
        assert_empty events(log).grep(/\Amessage/), "nothing reached on_message"
        # The server is unharmed: a good client still echoes.
        client = Client.new(server.port)
        client.read_message
        client.text("after the corpus")
        assert_equal "after the corpus", client.read_message
        client.close
      end
    end
  end
end
