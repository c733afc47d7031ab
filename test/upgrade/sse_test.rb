# frozen_string_literal: true

require "test_helper"
require "upgrade/support"

# rack.upgrade with Server-Sent Events: the engine answers with an open
# text/event-stream and sends what the handler writes as events.
class UpgradeSseTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::UpgradeSupport

  def test_events_written_and_published_reach_the_stream
    Dir.mktmpdir do |dir|
      log = File.join(dir, "events")
      with_server(APP, env: { "TSUBAME_TEST_EVENTS" => log }) do |server|
        sock = server.socket
        sock.write("GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        got = +""
        got << sock.readpartial(4096) until got.include?("data: welcome\n\n")
        head, body = got.split("\r\n\r\n", 2)
        assert_match(%r{\AHTTP/1.1 200 OK}, head)
        assert_match(%r{^content-type: text/event-stream\r?$}, head)
        assert_equal "data: welcome\n\n", body
        assert_equal "1", server.get("/publish?channel=chat&message=line+one%0Aline+two").body
        got = +""
        got << sock.readpartial(4096) until got.end_with?("\n\n")
        assert_equal "data: line one\ndata: line two\n\n", got
        sock.close
        assert wait_until { events(log).last == "close false" }, events(log).inspect
        assert_equal ["open sse", "close false"], events(log)
      end
    end
  end

  def test_a_stop_calls_on_shutdown_and_ends_the_stream
    Dir.mktmpdir do |dir|
      log = File.join(dir, "events")
      with_server(APP, env: { "TSUBAME_TEST_EVENTS" => log }) do |server|
        sock = server.socket
        sock.write("GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        got = +""
        got << sock.readpartial(4096) until got.include?("data: welcome\n\n")
        server.signal("TERM")
        rest, closed = read_until_close(sock, 10)
        assert closed, "the stream ended"
        assert_equal "data: bye\n\n", rest, "on_shutdown may still write"
        assert_equal 0, Timeout.timeout(10) { Process.wait2(server.pid).last }.exitstatus
        assert_equal ["open sse", "shutdown", "close false"], events(log)
      ensure
        sock&.close
      end
    end
  end
end
