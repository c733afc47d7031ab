# frozen_string_literal: true

require "test_helper"
require "fiber/support"

# Every Fiber::Scheduler hook exercised by a request whose unmodified app
# code uses it, on a server with one fiber loop thread. "Yields instead of
# blocking" is checked by when the server ran them: several requests each
# waiting ~0.3 s are in flight at once (/spans), where a blocked loop runs
# them one after another. The scheduler's call counters (/calls) show the
# hook really ran.
class FiberHooksTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::FiberSupport

  APP = <<~'RUBY'
    require "socket"
    require "timeout"
    JOBS = Queue.new
    # A plain thread (no scheduler) on the other side of a Queue handoff.
    Thread.new { loop { n, reply = JOBS.pop; sleep 0.05; reply << n * 2 } }
    LOCK = Mutex.new
    $counter = 0
    ECHO = TCPServer.new("127.0.0.1", 0)
    # An echo service on a thread: answers each line upper-cased after 0.3 s.
    Thread.new do
      loop do
        Thread.new(ECHO.accept) { |s| line = s.gets; sleep 0.3; s.write(line.upcase); s.close }
      end
    end
    inner = lambda { |env|
      q = env["QUERY_STRING"]
      body = case env["PATH_INFO"]
      when "/socket"
        sock = TCPSocket.new("127.0.0.1", ECHO.addr[1])
        sock.write("hello #{q}\n")
        line = sock.gets
        sock.close
        line.chomp
      when "/dns" then Socket.getaddrinfo("localhost", 80, nil, :STREAM).map { |a| a[3] }.uniq.sort.join(",")
      when "/timeout"
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        begin
          Timeout.timeout(0.3) { sleep 10 }
          "not interrupted"
        rescue Timeout::Error
          "timed out after #{(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).round(1)}"
        end
      when "/mutex"
        LOCK.synchronize do
          seen = $counter
          sleep 0.2
          $counter = seen + 1
        end.to_s
      when "/queue"
        reply = Queue.new
        JOBS << [Integer(q), reply]
        reply.pop.to_s
      when "/sized"
        pipe = SizedQueue.new(1)
        Fiber.schedule { 3.times { |i| pipe << i } }
        Array.new(3) { pipe.pop }.join(",")
      when "/condvar"
        m = Mutex.new
        cv = ConditionVariable.new
        done = false
        Fiber.schedule { sleep 0.1; m.synchronize { done = true; cv.signal } }
        m.synchronize { cv.wait(m) until done }
        "signalled"
      when "/popen" then IO.popen(["sh", "-c", "sleep 0.3; echo popen #{Integer(q)}"], &:read).chomp + " exit=#{$?.exitstatus}"
      when "/wait"
        pid = Process.spawn("sh", "-c", "sleep 0.3; exit 3")
        Process.wait(pid)
        "exit=#{$?.exitstatus}"
      when "/calls" then Fiber.scheduler.calls.sort.map { |k, v| "#{k}=#{v}" }.join(" ")
      else "fast"
      end
      [200, { "content-type" => "text/plain" }, [body]]
    }
    # When each request ran, by path: /spans?PATH lists "start,end" pairs
    # (monotonic seconds), so a test sees overlap without timing anything.
    SPANS = Hash.new { |h, k| h[k] = [] }
    clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    run lambda { |env|
      if env["PATH_INFO"] == "/spans"
        next [200, { "content-type" => "text/plain" }, [SPANS[env["QUERY_STRING"]].map { |a, b| "#{a},#{b}" }.join(" ")]]
      end
      started = clock.call
      response = inner.call(env)
      SPANS[env["PATH_INFO"]] << [started, clock.call]
      response
    }
  RUBY

  def calls(server)
    server.get("/calls").body.split.to_h { |pair| k, v = pair.split("="); [k.to_sym, Integer(v)] }
  end

  # [start, end] of every request to `path` so far, in the server's clock.
  def spans(server, path)
    server.get("/spans?#{path}").body.split.map { |pair| pair.split(",").map { |t| Float(t) } }
  end

  # The most of `spans` running at one moment: a loop that blocks runs one
  # request at a time, whatever the machine's load.
  def most_at_once(spans)
    spans.map { |t0, _| spans.count { |a, b| a <= t0 && t0 < b } }.max || 0
  end

  # Runs `count` requests to `path` (with ?0, ?1...) at once; asserts they
  # overlapped in the server and returns the bodies and the hooks each
  # counter moved by.
  def overlapping(server, path, count)
    before = calls(server)
    results, = concurrently(server, Array.new(count) { |i| "#{path}?#{i}" })
    results.each { |status, body| assert_equal 200, status, body }
    at_once = most_at_once(spans(server, path).last(count))
    assert_operator at_once, :>=, 2, "#{count} x #{path} ran one at a time: the loop blocked"
    after = calls(server)
    [results.map { |r| r[1] }, after.to_h { |k, v| [k, v - before.fetch(k, 0)] }]
  end

  def test_sockets_yield_on_connect_read_and_write
    with_server(APP, args: %w[--fibers]) do |server|
      bodies, moved = overlapping(server, "/socket", 6)
      assert_equal Array.new(6) { |i| "HELLO #{i}" }, bodies
      assert_operator moved[:io_wait], :>=, 6
      assert_operator moved[:io_read], :>=, 6
      assert_operator moved[:io_write], :>=, 6
    end
  end

  def test_dns_resolution_of_localhost_goes_through_address_resolve
    with_server(APP, args: %w[--fibers]) do |server|
      before = calls(server)
      addresses = server.get("/dns").body.split(",")
      refute_empty addresses
      assert(addresses.all? { |a| ["127.0.0.1", "::1"].include?(a) }, addresses.inspect)
      assert_equal before.fetch(:address_resolve, 0) + 1, calls(server)[:address_resolve]
    end
  end

  def test_timeout_interrupts_a_sleeping_fiber_and_others_go_on
    with_server(APP, args: %w[--fibers]) do |server|
      bodies, moved = overlapping(server, "/timeout", 5)
      bodies.each { |body| assert_match(/\Atimed out after 0\.[345]\z/, body) }
      assert_equal 5, moved[:timeout_after]
      assert_equal "fast", server.get("/fast").body
    end
  end

  def test_mutex_contention_between_fibers_serialises_the_critical_section_only
    with_server(APP, args: %w[--fibers]) do |server|
      load = Thread.new { concurrently(server, Array.new(5) { "/mutex" }) }
      sleep 0.3
      assert_equal "fast", server.get("/fast").body
      results, = load.value
      assert_equal %w[1 2 3 4 5], results.map { |r| r[1] }.sort, "a lost update: the Mutex did not exclude"
      mutex = spans(server, "/mutex")
      fast_end = spans(server, "/fast").last.last
      assert_operator fast_end, :<, mutex.map(&:last).max, "the loop is free while fibers wait for the lock"
      assert_equal 1, most_at_once(mutex.map { |_, t1| [t1 - 0.19, t1] }),
                   "the critical sections (each request's last 0.2 s) never overlap"
      moved = calls(server)
      assert_operator moved[:block], :>=, 4
      assert_operator moved[:unblock], :>=, 4
    end
  end

  def test_queue_handoff_between_a_fiber_and_a_thread_and_between_fibers
    with_server(APP, args: %w[--fibers]) do |server|
      before = calls(server)
      results, = concurrently(server, Array.new(4) { |i| "/queue?#{i + 20}" })
      assert_equal %w[40 42 44 46], results.map { |r| r[1] }
      moved = calls(server)
      assert_operator moved[:block] - before.fetch(:block, 0), :>=, 4, "every pop waited for the thread"
      assert_operator moved[:unblock] - before.fetch(:unblock, 0), :>=, 4, "the thread woke each fiber"
      assert_equal "0,1,2", server.get("/sized").body
      assert_equal "signalled", server.get("/condvar").body
      assert_operator calls(server)[:fiber], :>=, 2, "Fiber.schedule went through the scheduler"
    end
  end

  def test_popen_and_process_wait_yield_while_the_child_runs
    with_server(APP, args: %w[--fibers]) do |server|
      bodies, moved = overlapping(server, "/popen", 4)
      assert_equal Array.new(4) { |i| "popen #{i} exit=0" }, bodies
      assert_operator moved[:process_wait], :>=, 4
      bodies, moved = overlapping(server, "/wait", 4)
      assert_equal ["exit=3"] * 4, bodies
      assert_equal 4, moved[:process_wait]
    end
  end

  def test_sleep_yields_through_kernel_sleep
    with_server(APP, args: %w[--fibers]) do |server|
      before = calls(server)
      results, = concurrently(server, Array.new(10) { "/condvar" })
      assert_equal ["signalled"] * 10, results.map { |r| r[1] }
      assert_operator most_at_once(spans(server, "/condvar")), :>=, 2,
                      "10 requests sleeping 0.1 s in a child fiber each ran one at a time"
      assert_operator calls(server)[:kernel_sleep] - before.fetch(:kernel_sleep, 0), :>=, 10
    end
  end
end
