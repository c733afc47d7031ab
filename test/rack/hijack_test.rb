# frozen_string_literal: true

require "rack/support"

# rack.hijack (full and partial) and the callbacks that run after a
# response: rack.response_finished and rack.after_reply.
class RackHijackTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::RackSupport

  RAW_RESPONSE = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Hijacked: full\r\nConnection: close\r\n\r\nraw body from the app"

  APP = <<~'RUBY'
    RAW = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Hijacked: full\r\nConnection: close\r\n\r\nraw body from the app"
    log = lambda do |line|
      File.open(ENV.fetch("EVENT_LOG"), "a") { |f| f.puts(line) }
    end

    app = lambda do |env|
      case env["PATH_INFO"]
      when "/full"
        io = env["rack.hijack"].call
        io_ok = Rack.release.start_with?("2.") ? env["rack.hijack_io"].equal?(io) : true
        log.call("full hijack io=#{io.class} hijack_io_set=#{io_ok}")
        io.write(RAW)
        io.close
        [-1, {}, []]
      when "/full-turns"
        # Non-blocking writes for 50 ms beside a plain thread that counts
        # the writer's passes of the GVL: a turn that finds a new write
        # count means the writer let go since the last one. (Counting every
        # turn would also count the counter winning the GVL back from
        # itself when the OS is slow to run the writer, as on a busy CI
        # machine.) The writer passes about once a millisecond, not after
        # every write.
        io = env["rack.hijack"].call
        turns = 0
        writes = 0
        counter = Thread.new do
          seen = nil
          loop do
            (turns += 1; seen = writes) unless seen == writes
            Thread.pass
          end
        end
        sleep 0.01
        before = turns
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.05
        while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
          io.write_nonblock(writes < 200 ? "x" : "", exception: false)
          writes += 1
        end
        during = turns - before
        counter.kill.join
        io.write(" writes=#{writes} turns=#{during}")
        io.close
        [-1, {}, []]
      when "/full-answer-order"
        # The writer's turn at the GVL comes before its write, not after:
        # what the app does right after a write (ActionCable marks a
        # connection ready to take messages after writing its welcome)
        # happens before another thread can read the client's answer. A
        # spinning reader stands in for that thread: it waits for the GVL
        # when the writer writes, and looks for the client's answer.
        io = env["rack.hijack"].call
        written = false
        early = nil
        reader = Thread.new do
          loop do
            answer = io.read_nonblock(16, exception: false)
            next unless answer.is_a?(String)

            early = !written
            break
          end
        end
        sleep 0.01 # the reader spins; the writer gets the GVL back at a time slice
        io.write_nonblock("ask\n")
        written = true
        reader.join(5)
        io.write("answer read before the writer went on: #{early.inspect}")
        io.close
        [-1, {}, []]
      when "/full-allocs"
        # Objects allocated by 1,000 write_nonblock calls on the hijacked
        # socket (each call's own; the bytes are one string made before).
        io = env["rack.hijack"].call
        byte = "z"
        io.write_nonblock(byte, exception: false)
        before = GC.stat(:total_allocated_objects)
        1000.times { io.write_nonblock(byte, exception: false) }
        allocated = GC.stat(:total_allocated_objects) - before
        io.write(" allocs=#{allocated}")
        io.close
        [-1, {}, []]
      when "/full-hold"
        # Holds the GVL for 1.5 s, writing without blocking, as
        # ActionCable's threads do through a long broadcast.
        io = env["rack.hijack"].call
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1.5
        io.write_nonblock("y", exception: false) while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        io.close
        [-1, {}, []]
      when "/quick"
        [200, { "content-type" => "text/plain" }, ["quick"]]
      when "/full-lint"
        io = env["rack.hijack"].call
        log.call("lint hijack_io_set=#{!env["rack.hijack_io"].nil?}")
        io.write(RAW)
        io.close
        [200, {}, []]
      when "/full-echo"
        # The hijacked socket reads what the client sends after the request.
        io = env["rack.hijack"].call
        io.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
        line = io.gets
        io.write("echo: #{line}")
        io.close
        [200, {}, []]
      when "/partial", "/partial-lint"
        lint = env["PATH_INFO"].end_with?("-lint")
        hijack = lambda do |stream|
          stream.write("partial raw ")
          # Rack 2 Lint's wrapper has write but not <<.
          lint ? stream.write("bytes") : stream << "bytes"
          stream.close
          log.call("partial done")
        end
        [200, { "content-type" => "text/plain", "x-partial" => "yes", "rack.hijack" => hijack }, ["ignored body"]]
      when "/finished"
        env["rack.response_finished"] << lambda do |e, status, headers, error|
          log.call("response_finished #{e["PATH_INFO"]} #{status} #{headers["x-mark"]} #{error.inspect}")
        end
        env["rack.after_reply"] << -> { log.call("after_reply") }
        [200, { "content-type" => "text/plain", "x-mark" => "m1" }, ["finished body"]]
      when "/finished-slow"
        env["rack.response_finished"] << lambda do |*|
          # Held until the test has the response (or 10 s pass), so
          # "sent before the callback finished" needs no clock.
          release = "#{ENV.fetch("EVENT_LOG")}.release"
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
          sleep 0.01 until File.exist?(release) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          log.call("slow callback done")
        end
        [200, { "content-type" => "text/plain" }, ["fast"]]
      when "/finished-error"
        env["rack.response_finished"] << lambda do |_e, status, _headers, error|
          log.call("after error #{status} #{error.class}: #{error&.message}")
        end
        env["rack.after_reply"] << -> { raise "callback-failure-marker" }
        raise "finished-error-marker"
      else
        [200, { "content-type" => "text/plain" }, ["ok"]]
      end
    end

    run(lambda do |env|
      if env["PATH_INFO"].end_with?("-lint")
        require "rack/lint"
        Rack::Lint.new(app).call(env)
      else
        app.call(env)
      end
    end)
  RUBY

  def setup
    @dir = Dir.mktmpdir("tsubame-rack-hijack")
    @log = File.join(@dir, "events.log")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def serve(args: [], &block)
    # The app wraps its own -lint paths in Lint; the others return status -1 after a full
    # hijack, check the socket's class, and use the stream's << (Rack 2's Lint wrapper lacks it).
    with_server(APP, args: args, env: { "EVENT_LOG" => @log }, lint: false, &block)
  end

  # The log once it holds every one of `texts` (callbacks may write one
  # after the other).
  def log_with(*texts)
    wait_for_file(@log) { |t| texts.all? { |text| t.include?(text) } }.to_s
  end

  def test_full_hijack_sends_exactly_the_apps_bytes
    serve do |s|
      # Keep-alive request: the app closing the socket ends the exchange.
      data, closed = raw_exchange(s, get_bytes("/full"))
      assert_equal RAW_RESPONSE, data
      assert closed, "closed when the app closed the IO"
      assert_includes log_with("full hijack"), "hijack_io_set=true"
      assert_includes File.read(@log), "io=Tsubame::HijackedSocket"
      assert_equal "ok", s.get("/").body, "server keeps serving"
      assert_equal "", s.stderr
    end
  end

  # HijackedSocket: a broadcast written with write_nonblock (ActionCable)
  # lets other threads have the GVL between its frames, about once a
  # millisecond when no Tsubame thread is waiting for it.
  def test_full_hijack_write_nonblock_passes_the_gvl_once_a_millisecond
    serve do |s|
      data, closed = raw_exchange(s, get_bytes("/full-turns"))
      assert closed
      assert_equal "x" * 200, data[0, 200]
      writes, turns = data.match(/ writes=(\d+) turns=(\d+)\z/)&.captures&.map(&:to_i)
      refute_nil turns, data
      # A plain BasicSocket gives no turns in 50 ms (Ruby's time slice is
      # 100 ms); a pass after every write gave about one turn per write.
      assert_operator turns, :>=, 5, "the counting thread's turns in 50 ms of writes"
      assert_operator turns, :<=, [writes / 10, 500].min, "#{writes} writes: not a pass after each"
      assert_equal "", s.stderr
    end
  end

  # The pass comes before a write: a thread waiting for the GVL cannot
  # read the client's answer to a frame before the writing thread has done
  # what follows it. Passing after the write lost one ActionCable
  # subscription in a few hundred: the welcome went out, the writer passed,
  # ActionCable's event loop read the client's subscribe while the
  # connection was not yet marked ready and buffered it after the buffer
  # had been emptied (its MessageBuffer checks, then acts, with no lock).
  def test_full_hijack_write_nonblock_passes_the_gvl_before_writing
    serve do |s|
      _, rest, closed = converse(s, "/full-answer-order", upto: "ask\n", answer: "ok\n")
      assert closed
      assert_equal "answer read before the writer went on: false", rest
      assert_equal "", s.stderr
    end
  end

  # Requests `path` on a new connection, reads until what was read ends
  # with `upto`, sends `answer`, and reads to the close: [what came
  # before the answer, what came after, whether the server closed].
  def converse(server, path, upto:, answer:)
    sock = server.socket
    sock.write(get_bytes(path))
    before = +""
    before << sock.readpartial(1024) until before.end_with?(upto)
    sock.write(answer)
    [before, *read_until_close(sock, 5)]
  ensure
    sock&.close
  end

  # The GVL pass costs the GC nothing: HijackedSocket#write_nonblock
  # allocates no object per call (a `super` passing keywords allocated a
  # Hash each time: 1,000 here).
  def test_full_hijack_write_nonblock_allocates_nothing
    serve do |s|
      data, closed = raw_exchange(s, get_bytes("/full-allocs"))
      assert closed
      assert_equal "z" * 1001, data[0, 1001]
      allocated = data[/ allocs=(\d+)\z/, 1]
      refute_nil allocated, data
      # Another Ruby thread of the server may allocate meanwhile; one
      # object per call would be 1,000.
      assert_operator allocated.to_i, :<, 100, "objects allocated by 1,000 write_nonblock calls"
      assert_equal "", s.stderr
    end
  end

  # A request that arrives while an app thread holds the GVL writing to a
  # hijacked socket runs at the next write, not after Ruby's 100 ms slice.
  def test_requests_get_the_gvl_from_a_thread_writing_to_a_hijacked_socket
    serve(args: ["-t", "4:4"]) do |s|
      holder = s.socket
      holder.write(get_bytes("/full-hold"))
      sleep 0.2 # the holder is writing
      http = s.socket
      latencies = Array.new(20) do
        started = monotonic
        http.write(get_bytes("/quick"))
        reply = +""
        reply << http.readpartial(4096) until reply.end_with?("quick")
        monotonic - started
      end
      median = latencies.sort[latencies.size / 2]
      assert_operator median, :<, 0.03, "median of 20 requests while the GVL is held: #{latencies.map { |l| (l * 1000).round(1) }}"
      assert_equal "", s.stderr
    ensure
      http&.close
      holder&.close
    end
  end

  def test_full_hijack_under_lint
    serve do |s|
      data, closed = raw_exchange(s, get_bytes("/full-lint"))
      assert_equal RAW_RESPONSE, data, s.stderr
      assert closed
      assert_includes log_with("lint"), "lint hijack_io_set=true"
      refute_match(/LintError/, s.stderr)
    end
  end

  def test_full_hijack_socket_is_bidirectional
    serve do |s|
      head, rest, closed = converse(s, "/full-echo", upto: "\r\n\r\n", answer: "ping over the hijacked socket\n")
      assert_equal "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n", head
      assert_equal "echo: ping over the hijacked socket\n", rest
      assert closed
    end
  end

  def test_partial_hijack_sends_head_then_raw_bytes
    serve do |s|
      data, closed = raw_exchange(s, get_bytes("/partial"))
      head, body = data.split("\r\n\r\n", 2)
      lines = head.split("\r\n")
      assert_equal "HTTP/1.1 200 OK", lines.shift
      headers = lines.map { |l| l.split(": ", 2) }
      assert_includes headers, %w[content-type text/plain]
      assert_includes headers, %w[x-partial yes]
      refute(headers.any? { |(name, _)| name.start_with?("rack.") }, "rack.hijack is not sent")
      refute(headers.any? { |(name, _)| name.match?(/\A(content-length|transfer-encoding)\z/i) }, "the app frames the rest")
      assert_equal "partial raw bytes", body, "raw bytes, not chunked, body array ignored"
      assert closed, "closed when the app closed the stream"
      assert_includes log_with("partial done"), "partial done"
    end
  end

  def test_partial_hijack_under_lint
    serve do |s|
      data, closed = raw_exchange(s, get_bytes("/partial-lint"))
      assert_match %r{\AHTTP/1\.1 200 OK\r\n.*x-partial: yes\r\n.*\r\n\r\npartial raw bytes\z}m, data, s.stderr
      assert closed
      refute_match(/LintError/, s.stderr)
    end
  end

  def test_response_finished_and_after_reply_run_after_the_response
    serve do |s|
      res = s.get("/finished")
      assert_equal "finished body", res.body
      log = log_with("after_reply", "response_finished")
      assert_includes log, "response_finished /finished 200 m1 nil\n"
      assert_includes log, "after_reply\n"
    end
  end

  def test_response_finished_does_not_delay_the_response
    serve do |s|
      reply = exchange(s, get_bytes("/finished-slow", { "Connection" => "close" }))
      assert_equal "fast", reply.body
      refute File.exist?(@log) && File.read(@log).include?("slow callback done"),
             "the response came while the callback was still held"
      File.write("#{@log}.release", "")
      assert_includes log_with("slow callback done"), "slow callback done\n"
    end
  end

  def test_response_finished_gets_the_error
    serve do |s|
      res = s.get("/finished-error")
      assert_equal "500", res.code
      assert_includes log_with("after error"), "after error 500 RuntimeError: finished-error-marker\n"
      stderr = wait_until { s.stderr.then { |t| t if t.include?("callback-failure-marker") } }.to_s
      assert_match(/RuntimeError: callback-failure-marker/, stderr, "a failing callback is logged")
      assert_equal "ok", s.get("/").body
    end
  end

  private

  def raw_exchange(server, bytes, timeout: 5)
    sock = server.socket
    sock.write(bytes)
    read_until_close(sock, timeout)
  ensure
    sock&.close
  end
end
