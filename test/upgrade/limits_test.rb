# frozen_string_literal: true

require "test_helper"
require "upgrade/support"
require "tls/support"

# The engine's limits and timers on rack.upgrade connections, drained and
# pending, and WebSockets over TLS (docs/WEBSOCKETS.md).
class UpgradeLimitsTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::UpgradeSupport
  include Tsubame::TlsSupport

  # Writes until the engine refuses; reports drained and the write count.
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
          record.call("refused after #{writes} open=#{conn.open?} pending=#{conn.pending}")
        when "big"
          # More than loopback's socket buffers take while the client
          # does not read (a 4 MiB send buffer here, and the receiver's
          # default), less than upgrade_max_pending (16 MiB).
          conn.write("b" * 14_000_000)
          record.call("pending #{conn.pending}")
        else conn.write(data)
        end
      end
      define_method(:on_drained) { |conn| record.call("drained #{conn.pending}") }
      define_method(:on_close) { |_conn| record.call("close") }
    end
    run lambda { |env|
      env["rack.upgrade"] = handler.new if env["rack.upgrade?"]
      [200, {}, []]
    }
  RUBY

  def with_events(app, args: [], config: nil, &block)
    with_event_log(app, args: args, config: config, &block)
  end

  def test_a_client_over_the_message_rate_is_closed_with_1008
    with_events(FLOOD_APP, args: ["--websocket-max-rate", "5"]) do |server, _log|
      client = Client.new(server.port)
      10.times { |i| client.text("m#{i}") }
      echoed = []
      code = nil
      while (frame = client.read_frame)
        if frame[0] == 8
          code = frame[1].unpack1("n")
          break
        end
        echoed << frame[1]
      end
      assert_equal 1008, code
      assert_equal %w[m0 m1 m2 m3 m4], echoed, "the first five in the second were handled"
    ensure
      client&.close
    end
  end

  def test_a_client_that_does_not_read_is_dropped_past_max_pending
    with_events(FLOOD_APP, config: "upgrade_max_pending 200_000\n") do |server, log|
      client = Client.new(server.port)
      client.text("flood")
      assert wait_until(timeout: 10) { events(log).grep(/\Arefused/).any? }, events(log).inspect
      line = events(log).grep(/\Arefused/).first
      writes = line[/after (\d+)/, 1].to_i
      assert_operator writes, :<, 2000, "the writes were refused once the client stopped reading: #{line}"
      assert_match(/open=false/, line)
      assert_equal 1008, client.read_close(timeout: 10), "after the data that was sent, the close"
      assert wait_until { events(log).include?("close") }
    ensure
      client&.close
    end
  end

  def test_on_drained_follows_a_write_the_socket_took_later
    with_events(FLOOD_APP) do |server, log|
      client = Client.new(server.port)
      client.text("big")
      assert wait_until { events(log).grep(/\Apending/).any? }
      assert_operator events(log).grep(/\Apending/).first[/\d+/].to_i, :>, 0, "14 MB could not all be sent at once"
      assert_equal 14_000_000, client.read_message(timeout: 20).bytesize
      assert wait_until { events(log).include?("drained 0") }, events(log).inspect
    ensure
      client&.close
    end
  end

  def test_the_engine_pings_a_quiet_client_and_drops_a_silent_one
    with_events(APP, config: "upgrade_ping_interval 0.3\n") do |server, _log|
      client = Client.new(server.port)
      assert_equal "welcome", client.read_message
      started = monotonic
      assert_equal [9, ""], client.read_frame(timeout: 3), "a ping after the quiet interval"
      assert_operator monotonic - started, :>=, 0.25
      # No pong, nothing: dropped after another interval.
      assert client.eof?(3), "the silent client was dropped"
    ensure
      client&.close
    end
  end

  def test_a_frame_over_websocket_max_frame_is_closed_with_1009_and_smaller_fragments_pass
    with_events(APP, config: "websocket_max_frame 512\n") do |server, _log|
      client = Client.new(server.port)
      assert_equal "welcome", client.read_message
      client.send_frame(0x1, "a" * 400, fin: false)
      client.send_frame(0x0, "b" * 400)
      assert_equal "a" * 400 + "b" * 400, client.read_message, "each frame under the limit: the message passes"
      client.text("c" * 600)
      assert_equal 1009, client.read_close
    ensure
      client&.close
    end
  end

  def test_upgrade_threads_is_how_many_handler_threads_start
    with_events(APP, config: "upgrade_threads 3\n") do |server, _log|
      before = Integer(server.get("/threads").body)
      client = Client.new(server.port)
      assert_equal "welcome", client.read_message
      assert_equal before + 3, Integer(server.get("/threads").body), "started with the first upgrade"
      other = Client.new(server.port)
      assert_equal "welcome", other.read_message
      assert_equal before + 3, Integer(server.get("/threads").body), "and no more after"
    ensure
      client&.close
      other&.close
    end
  end

  def test_websockets_over_tls
    with_events(APP, args: ["-b", ssl_bind]) do |server, log|
      context = OpenSSL::SSL::SSLContext.new
      context.ca_file = certs.path("ca.pem")
      context.verify_mode = OpenSSL::SSL::VERIFY_PEER
      client = Client.new(ssl_port(server), tls: context)
      assert client.accepted?, client.response_head
      assert_equal "welcome", client.read_message
      client.text("over tls")
      assert_equal "over tls", client.read_message
      client.close_frame(1000)
      assert_equal 1000, client.read_close
      assert wait_until { events(log).last == "close false" }
    ensure
      client&.close
    end
  end
end
