# frozen_string_literal: true

require "test_helper"
require "fiber/support"

# A fiber that raises, or that outlives its request deadline, must cost
# its own request only: the loop and the other fibers go on.
class FiberFailureTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::FiberSupport

  APP = <<~'RUBY'
    CANCELLED = Queue.new
    run lambda { |env|
      case env["PATH_INFO"]
      when "/raise" then sleep 0.1; raise ArgumentError, "the app failed"
      when "/orphan"
        # A fiber of the app's own whose error nobody handles.
        Fiber.schedule { sleep 0.05; raise "unhandled in a child fiber" }
        [200, {}, ["orphan started"]]
      when "/forever"
        begin
          sleep 30
          [200, {}, ["woke up"]]
        ensure
          CANCELLED << $!.class.name
        end
      when "/cancelled" then [200, {}, [Array.new(CANCELLED.size) { CANCELLED.pop }.join(",")]]
      when "/sleep" then sleep 1; [200, {}, ["slept"]]
      else [200, {}, ["fast"]]
      end
    }
  RUBY

  def test_a_raising_fiber_gets_a_500_and_the_loop_stays_healthy
    with_server(APP, args: %w[--fibers]) do |server|
      paths = Array.new(5) { "/sleep" } + Array.new(5) { "/raise" } + ["/orphan"]
      results, elapsed = concurrently(server, paths)
      assert_equal [[200, "slept"]] * 5, results.first(5).map { |r| r.first(2) }
      assert_equal [500] * 5, results[5, 5].map(&:first)
      assert_equal [200, "orphan started"], results.last.first(2)
      assert_operator elapsed, :<, 2.0
      sleep 0.2
      results, elapsed = concurrently(server, Array.new(20) { "/sleep" })
      assert_equal [200] * 20, results.map(&:first)
      assert_operator elapsed, :<, 2.0, "the loop still runs fibers side by side"
      assert_includes server.stderr, "ArgumentError"
      assert_includes server.stderr, "unhandled in a child fiber"
    end
  end

  def test_a_fiber_past_its_deadline_is_cancelled_and_the_others_finish
    with_server(APP, args: %w[--fibers --request-timeout 0.5]) do |server|
      paths = Array.new(3) { "/forever" } + Array.new(3) { "/fast" }
      results, = concurrently(server, paths)
      results.first(3).each do |status, body, seconds|
        assert_equal 503, status
        assert_includes body, "request_timeout"
        assert_in_delta 0.5, seconds, 0.4
      end
      assert_equal [[200, "fast"]] * 3, results.last(3).map { |r| r.first(2) }
      cancelled = []
      deadline = now + 5
      while cancelled.size < 3 && now < deadline
        cancelled.concat(server.get("/cancelled").body.split(","))
        sleep 0.05
      end
      assert_equal ["Tsubame::RequestTimeout"] * 3, cancelled, "each fiber's ensure ran with the timeout"
      assert_match(/raising Tsubame::RequestTimeout in its fiber/, server.stderr)
      refute_match(/stuck/, server.stderr)
      results, elapsed = concurrently(server, Array.new(10) { "/fast" })
      assert_equal [200] * 10, results.map(&:first)
      assert_operator elapsed, :<, 1.0
    end
  end

  def test_a_graceful_stop_lets_the_fibers_in_flight_finish
    with_server(APP, args: %w[--fibers]) do |server|
      load = Thread.new { concurrently(server, Array.new(20) { "/sleep" }) }
      sleep 0.5
      status = server.stop("TERM")
      results, = load.value
      assert_equal [[200, "slept"]] * 20, results.map { |r| r.first(2) }
      assert_equal 0, status.exitstatus, server.stderr
    end
  end
end
