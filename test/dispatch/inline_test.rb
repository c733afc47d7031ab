# frozen_string_literal: true

require "test_helper"
require "json"

# inline (docs/ARCHITECTURE.md, "Inline"): with one app thread, that
# thread also drives the connections, and the I/O thread only covers for
# it while it runs a request. Every test reads the engine's own `inline`
# counter, so none passes on a server that quietly did not run inline.
class InlineTest < Minitest::Test
  include Tsubame::TestHelpers

  APP = <<~RUBY
    run lambda { |env|
      case env["PATH_INFO"]
      when "/sleep" then sleep Float(env["QUERY_STRING"][/s=([\\d.]+)/, 1]); [200, {}, ["slept"]]
      when "/echo" then [200, {}, [env["rack.input"].read]]
      when "/spin"
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) - started < 0.0003
        [200, {}, ["spun"]]
      when "/stream"
        body = Object.new
        def body.each
          3.times { |i| yield "part\#{i}\\n"; sleep 0.05 }
        end
        [200, { "content-type" => "text/plain" }, body]
      when "/hints"
        env["rack.early_hints"].call("link" => "</a.css>; rel=preload")
        [200, {}, ["hinted"]]
      when "/hijack"
        io = env["rack.hijack"].call
        io.write("HTTP/1.1 200 OK\\r\\ncontent-length: 8\\r\\nconnection: close\\r\\n\\r\\nhijacked")
        io.close
        [-1, {}, []]
      else [200, { "content-type" => "text/plain" }, ["n=\#{env["QUERY_STRING"]}"]]
      end
    }
  RUBY

  HEALTH = ["--health-check-path", "/up"].freeze

  def engine(server)
    JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{server.port}/up")))
  end

  def serve(args: [], &block)
    with_server(APP, args: ["-t", "1:1", *HEALTH, *args], lint: false, &block)
  end

  # One content-length response from `sock`: [head, body]. `buffer` keeps
  # what was read past it (pipelined responses come in one read).
  def read_response(sock, buffer, timeout: 5)
    Timeout.timeout(timeout) do
      buffer << sock.readpartial(65_536) until (head_end = buffer.index("\r\n\r\n"))
      length = buffer[0, head_end][/^content-length: (\d+)/i, 1].to_i
      buffer << sock.readpartial(65_536) while buffer.bytesize < head_end + 4 + length
      response = [buffer[0, head_end], buffer[head_end + 4, length]]
      buffer.slice!(0, head_end + 4 + length)
      response
    end
  end

  def test_auto_runs_inline_with_one_app_thread_only
    serve { |s| assert_equal true, engine(s)["inline"] }
    with_server(APP, args: ["-t", "1:2", *HEALTH], lint: false) { |s| assert_equal false, engine(s)["inline"] }
    serve(args: %w[--inline off]) { |s| assert_equal false, engine(s)["inline"] }
  end

  def test_inline_on_with_more_app_threads_is_refused_at_boot
    out, err, status = run_tsubame("-t", "1:4", "--inline", "on", "-b", "tcp://127.0.0.1:#{free_port}",
                                   "examples/demo/config.ru")
    refute status.success?, out
    assert_includes err, "inline needs threads_max 1"
  end

  def test_keep_alive_and_pipelined_requests_each_get_their_own_answer
    serve do |s|
      assert engine(s)["inline"]
      sock = s.socket
      buffer = +""
      200.times do |i|
        sock.write("GET /?#{i} HTTP/1.1\r\nhost: x\r\n\r\n")
        assert_equal "n=#{i}", read_response(sock, buffer).last
      end
      sock.write((0...100).map { |i| "GET /?p#{i} HTTP/1.1\r\nhost: x\r\n\r\n" }.join)
      100.times { |i| assert_equal "n=p#{i}", read_response(sock, buffer).last }
      sock.write("POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n")
      sock.write("y" * 100_000)
      assert_equal "y" * 100_000, read_response(sock, buffer).last
      sock.close
      assert_equal "", s.stderr
    end
  end

  # The promise of every mode: while the only app thread is busy, probes
  # are answered by the engine, and other connections are read. The
  # control app's /stats has the same two counters (README, /stats).
  def test_a_probe_is_answered_while_the_only_app_thread_sleeps
    control = free_port
    serve(args: ["--control-url", "tcp://127.0.0.1:#{control}", "--control-token", "t"]) do |s|
      busy = Thread.new { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/sleep?s=1.5")) }
      sleep 0.3
      started = monotonic
      probe = engine(s)
      took = monotonic - started
      assert_equal true, probe["inline"]
      assert_operator took, :<, 0.2, "the probe waited #{took}s for the busy app thread"
      assert_operator probe["inline_takeovers"], :>=, 1, "the I/O thread drove while the app thread slept"
      assert_equal "slept", busy.value
      stats = JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{control}/stats?token=t"))).fetch("engine")
      assert_equal true, stats.fetch("inline")
      assert_operator stats.fetch("inline_takeovers"), :>=, probe["inline_takeovers"]
    end
  end

  # A queue that never empties still has its replies written as they are
  # made: a reply sent 100 µs or more after the last drive drives at once.
  # The only app thread sleeps while the keeper queues 150 requests that
  # take 0.3 ms of CPU each; run back to back they never leave the queue
  # empty (the app thread drives between requests only then) nor the
  # baton free for the keeper's 500 µs, so without that bound every reply
  # waited for the last one and all arrived within a few milliseconds.
  def test_replies_go_out_while_the_queue_stays_full
    serve do |s|
      assert engine(s)["inline"]
      sleeper = Thread.new { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/sleep?s=0.5")) }
      sleep 0.05
      clients = Array.new(150) { s.socket }
      clients.each { |c| c.write("GET /spin HTTP/1.1\r\nhost: x\r\n\r\n") }
      arrived = {}
      buffers = Hash.new { |h, c| h[c] = +"" }
      deadline = monotonic + 10
      while arrived.size < clients.size && monotonic < deadline
        ready, = IO.select(clients - arrived.keys, nil, nil, 1)
        Array(ready).each do |c|
          chunk = c.read_nonblock(4096, exception: false)
          next unless chunk.is_a?(String)

          buffers[c] << chunk
          arrived[c] = monotonic if buffers[c].end_with?("spun")
        end
      end
      assert_equal "slept", sleeper.value
      assert_equal clients.size, arrived.size, "every /spin answered"
      spread = arrived.values.max - arrived.values.min
      assert_operator spread, :>=, 0.015, "150 replies of 0.3 ms each came out as they were made, not all at the end"
    ensure
      clients&.each(&:close)
    end
  end

  # A reply is held until the next drive ("Inline", step 8→9): one made
  # just before a long request goes out with the keeper's drive while that
  # request runs, not after it. /sleep?s=0.3 keeps the app thread busy
  # while the keeper reads and queues the fast request, then the slow one;
  # the app thread answers the fast one and goes straight on to the slow.
  def test_a_reply_held_before_a_long_request_goes_out_while_it_runs
    serve do |s|
      assert engine(s)["inline"]
      busy = Thread.new { Net::HTTP.get(URI("http://127.0.0.1:#{s.port}/sleep?s=0.3")) }
      sleep 0.1
      fast = s.socket
      slow = s.socket
      started = monotonic
      fast.write("GET /?fast HTTP/1.1\r\nhost: x\r\n\r\n")
      sleep 0.02
      slow.write("GET /sleep?s=1.5 HTTP/1.1\r\nhost: x\r\n\r\n")
      _, body = read_response(fast, +"")
      fast_took = monotonic - started
      assert_equal "n=fast", body
      assert_operator fast_took, :<, 1.0, "answered while /sleep?s=1.5 ran, not after it"
      assert_equal "slept", read_response(slow, +"").last
      assert_equal "slept", busy.value
    ensure
      fast&.close
      slow&.close
    end
  end

  def test_a_request_past_its_deadline_gets_503_while_the_app_thread_is_stuck
    serve(args: %w[--request-timeout 0.5]) do |s|
      started = monotonic
      response = s.get("/sleep?s=3")
      took = monotonic - started
      assert_equal "503", response.code
      assert_operator took, :<, 1.5, "503 at the deadline, not when the app returned"
      assert_equal "n=after", s.get("/?after").body, "the thread serves again"
    end
  end

  def test_streams_early_hints_and_hijack
    serve(args: ["--early-hints"]) do |s|
      assert engine(s)["inline"]
      response = s.get("/stream")
      assert_equal "part0\npart1\npart2\n", response.body
      data, = read_until_close(s.socket.tap { |c| c.write("GET /hints HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n") }, 5)
      assert_match(/\AHTTP\/1.1 103[^\r]*\r\nlink: <\/a.css>; rel=preload\r\n(?:[^\r]+\r\n)*\r\nHTTP\/1.1 200 OK\r\n/i, data)
      assert data.end_with?("hinted"), data
      data, closed = read_until_close(s.socket.tap { |c| c.write("GET /hijack HTTP/1.1\r\nhost: x\r\n\r\n") }, 5)
      assert closed
      assert data.end_with?("hijacked"), data
      assert_equal "", s.stderr
    end
  end

  def test_stop_while_the_app_thread_waits_for_a_request
    s = Tsubame::TestServer.new(APP, args: ["-t", "1:1", *HEALTH], lint: false)
    assert engine(s)["inline"]
    assert_equal "n=x", s.get("/?x").body
    sleep 0.2 # past the spin: the app thread sleeps in epoll_wait
    started = monotonic
    status = s.stop("TERM", timeout: 10)
    assert status&.success?, "exit status #{status.inspect}: #{s.stderr}"
    assert_operator monotonic - started, :<, 3
  ensure
    s&.kill
  end
end
