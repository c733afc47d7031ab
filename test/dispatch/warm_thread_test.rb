# frozen_string_literal: true

require "test_helper"
require "etc"

# Which of the pool's threads run the requests (docs/ARCHITECTURE.md step
# 5 and "Wake-ups are the expensive part"): of the sleeping threads, the
# one that fell asleep last is woken, so requests one after another keep
# one warm thread busy; and more threads are woken for queued requests
# only while the running ones wait off the CPU, not while they compute.
class WarmThreadTest < Minitest::Test
  include Tsubame::TestHelpers

  APP = "run ->(_env) { [200, { \"content-type\" => \"text/plain\" }, [Thread.current.object_id.to_s]] }\n"

  # /compute burns ~2 ms (or ?ms=N) of CPU and lets the GVL go every 0.1 ms for a
  # `File.exist?` (Ruby stats without it), as Rails' static-file
  # middleware does; /wait sleeps (100 ms, or ?ms=N) without the GVL, as a
  # database query would. Both answer the thread.
  MIXED_APP = <<~'RUBY'
    cpu = -> { Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) }
    run lambda { |env|
      if env["PATH_INFO"] == "/wait"
        sleep(env["QUERY_STRING"][/ms=(\d+)/, 1]&.to_i&.fdiv(1000) || 0.1)
      else
        (env["QUERY_STRING"][/ms=(\d+)/, 1] || 2).to_i.*(10).times do
          t = cpu.()
          nil while cpu.() - t < 0.0001
          File.exist?("/nonexistent/tsubame-warm-thread-test")
        end
      end
      id = Thread.current.object_id.to_s
      [200, { "content-type" => "text/plain", "content-length" => id.bytesize.to_s }, [id]]
    }
  RUBY

  # with_server with five threads, yielded once all five wait for a job:
  # the pool's threads are started before the banner but reach the queue a
  # moment later, and one still on its way would take a job without being
  # woken (a burst would then run on two threads from its first request).
  # One request goes first: the first the process runs can wait off the CPU
  # (code loaded on first use), and the watcher rightly wakes a second
  # thread for the rest of a burst that starts with it.
  def with_pool(rackup, args: [])
    with_server(rackup, args: ["-t", "5:5", *args], control: true) do |s|
      assert_equal "200", s.get("/").code
      idle = wait_until { s.control("stats")["pool_capacity"] == 5 }
      assert idle, "the five threads wait for a job"
      yield s
    end
  end

  # Sends `count` requests for `path` at once, each on its own connection,
  # and returns the threads that answered and how long the last took.
  def burst(server, path, count)
    started = monotonic
    sockets = Array.new(count) { server.socket }
    sockets.each { |sock| sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") }
    bodies = sockets.map { |sock| read_until_close(sock, 20).first.split("\r\n\r\n", 2).last }
    [bodies, monotonic - started]
  ensure
    sockets&.each(&:close)
  end

  def test_a_burst_of_computing_requests_is_served_by_one_thread
    with_pool(MIXED_APP) do |s|
      threads, = burst(s, "/compute", 40)
      counts = threads.tally.values.sort.reverse
      # The first push wakes one thread, which computes; the watcher sees
      # the process on the CPU and wakes no other. A loaded machine can
      # leave it off the CPU for a tick, and then one more is woken.
      assert_operator counts.first, :>=, 30, "requests per thread: #{counts.inspect}"
    end
  end

  def test_requests_that_wait_off_the_cpu_get_threads_of_their_own
    with_pool(MIXED_APP) do |s|
      threads, took = burst(s, "/wait", 5)
      assert_equal 5, threads.uniq.size, "each waiting request had a thread"
      # One after another would take 0.5 s; the watcher wakes a thread a
      # tick (about a millisecond) after the last took a job.
      assert_operator took, :<, 0.35, "five 100 ms waits on five threads"
    end
  end

  # A long computation that lets the GVL go now and then does not keep a
  # request queued behind it for as long as it runs: after 50 ms without
  # progress the watcher wakes a thread, which runs in those gaps.
  def test_a_request_behind_a_long_computation_gets_a_thread_after_a_while
    with_pool(MIXED_APP) do |s|
      long = Thread.new { s.get("/compute?ms=1500") }
      sleep 0.2 # the long one is running
      started = monotonic
      reply = s.get("/wait?ms=1")
      waited = monotonic - started
      assert_equal "200", reply.code
      refute long.join(0), "the long request still runs"
      assert_operator waited, :<, 1.0, "not held until the 1.5 s computation ends"
      long.join
    end
  end

  # While the running threads wait off the CPU, a request that comes in is
  # given a sleeping thread at once, not after the watcher's two looks
  # (each at least 0.5 ms): once the watcher has seen the waiting, pushes
  # wake a thread themselves.
  def test_while_a_thread_waits_the_next_request_wakes_another_at_once
    with_pool(MIXED_APP, args: ["--handoff-spin", "0"]) do |s|
      long = Thread.new { s.get("/wait?ms=3000") }
      sleep 0.2
      http = s.http
      http.get("/wait?ms=1") # the watcher sees the waiting thread
      times = Array.new(50) do
        started = monotonic
        http.get("/wait?ms=0")
        monotonic - started
      end
      http.finish
      median = times.sort[times.size / 2]
      assert_operator median, :<, 0.0015, "median #{(median * 1000).round(2)} ms"
      long.join
    end
  end

  # Short waits, each done before the watcher's next look: the thread
  # running them takes job after job, and its idle CPU is still the sign
  # that more threads would help.
  def test_a_stream_of_short_waits_gets_every_thread
    with_pool(MIXED_APP) do |s|
      threads, took = burst(s, "/wait?ms=5", 60)
      # 60 waits of 5 ms: 0.3 s on one thread, 0.06 s on five.
      assert_operator threads.uniq.size, :>=, 4, "requests per thread: #{threads.tally.values.inspect}"
      assert_operator took, :<, 0.2
    end
  end

  # The same on a machine whose cores other processes keep busy: the
  # waiting threads' short runs get preempted there too, which is no sign
  # that they compute (docs/ARCHITECTURE.md, the queue watcher).
  def test_a_stream_of_short_waits_gets_every_thread_on_a_busy_machine
    with_pool(MIXED_APP) do |s|
      busy = Array.new(Etc.nprocessors) { Process.spawn(RbConfig.ruby, "-e", "loop {}") }
      sleep 0.2 # the busy loops have the cores
      threads, = burst(s, "/wait?ms=5", 60)
      assert_operator threads.uniq.size, :>=, 4, "requests per thread: #{threads.tally.values.inspect}"
    ensure
      busy&.each do |pid|
        Process.kill("KILL", pid)
        Process.wait(pid)
      end
    end
  end

  def test_requests_one_after_another_are_served_by_the_thread_that_slept_last
    # No spin: every request finds its thread asleep and wakes one.
    with_pool(APP, args: ["--handoff-spin", "0"]) do |s|
      http = s.http
      threads = Array.new(60) { http.get("/").body }
      http.finish
      counts = threads.tally.values.sort.reverse
      # Longest sleeper first, the five threads took turns (12 each). A
      # request can still go to another thread when the watcher nudges one
      # awake on a loaded machine, hence not all 60.
      assert_operator counts.first, :>=, 50, "requests per thread: #{counts.inspect}"
    end
  end
end
