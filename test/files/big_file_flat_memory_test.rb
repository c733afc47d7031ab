# frozen_string_literal: true

require "files/support"

# A 1 GiB file (sparse, so the test writes nothing to disk) goes out
# through the engine with the server's RSS flat (within 5 MB of what it was
# just before the download) and the app's single Ruby thread busy for under
# 1 ms: the engine takes the open file and sends it itself, the app's body
# is closed as soon as the head and the file are handed over, and the
# thread serves other requests while the bytes are still going out. The
# same download through --public (no Ruby at all) keeps RSS as flat.
class BigFileFlatMemoryTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport
  include Tsubame::FilesMeasureSupport

  GIB = 1 << 30
  RSS_LIMIT = 5_000_000 # bytes
  THREAD_LIMIT = 0.001 # seconds
  # Sending 1 GiB takes this VM 300 ms and more; a thread that sent any
  # part of it in 64 KiB reads and writes would spend far over this.
  STEAL_BOUND = 0.05 # seconds

  # /big is a body of our own with to_path (each would read the file, so
  # an engine that iterated it would be caught by the time it took). It
  # records, when the server closes it, how long the thread had been in
  # the request since the app was called: wall time, the thread's own CPU
  # time, and the time it spent runnable but waiting for a core (the
  # second field of its schedstat). The span starts at app.call (the env
  # is already built, a few µs) and ends in body.close, which the server
  # runs right after handing the response to the engine.
  APP = <<~'RUBY'
    $timing = "none"
    queued = -> { File.read("/proc/thread-self/schedstat").split[1].to_i / 1e9 }
    sleeps = -> { File.read("/proc/thread-self/status")[/^voluntary_ctxt_switches:\s*(\d+)/, 1].to_i }
    big_body = Struct.new(:to_path, :wall, :cpu, :queued, :sleeps) do
      def each
        File.open(to_path, "rb") { |f| while (part = f.read(65_536)) do yield part end }
      end

      def close
        wall_busy = Process.clock_gettime(Process::CLOCK_MONOTONIC) - wall
        cpu_busy = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - cpu
        queued_busy = File.read("/proc/thread-self/schedstat").split[1].to_i / 1e9 - queued
        slept = File.read("/proc/thread-self/status")[/^voluntary_ctxt_switches:\s*(\d+)/, 1].to_i - sleeps
        $timing = format("%.9f %.9f %.9f %d", wall_busy, cpu_busy, queued_busy, slept)
      end
    end
    run lambda { |env|
      wall = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
      case env["PATH_INFO"]
      when "/big"
        body = big_body.new(ENV.fetch("BIG_FILE"), wall, cpu, queued.call, sleeps.call)
        [200, { "content-type" => "application/octet-stream" }, body]
      when "/timing" then [200, { "content-type" => "text/plain" }, [$timing]]
      else
        # The warm-up request collects garbage now, so a GC that the app's
        # own allocations would have triggered (1 ms and more on a loaded
        # machine) does not fall into /big's span: the hand-off is measured.
        GC.start
        [200, { "content-type" => "text/plain" }, ["small"]]
      end
    }
  RUBY

  # A sparse file of exactly 1 GiB in a fresh directory, removed afterwards.
  def with_big_file
    in_tmpdir do |dir|
      path = File.join(dir, "big.bin")
      File.open(path, "wb") { |f| f.truncate(GIB) }
      yield dir, path
    end
  end

  # Sends a GET and reads the head: [socket, status line, content-length,
  # body bytes already read with the head]. The socket then carries only
  # the rest of the body.
  def start_download(server, path)
    sock = server.socket
    sock.write(get_request(path))
    head = +"".b
    head << read_some(sock) until head.include?("\r\n\r\n")
    head, rest = head.split("\r\n\r\n", 2)
    [sock, head.lines.first.strip, head[/^content-length:\s*(\d+)/i, 1], rest.bytesize]
  end

  def read_some(sock, buffer = nil)
    raise "no data within 10 s" unless sock.wait_readable(10)

    chunk = sock.read_nonblock(1 << 20, buffer, exception: false)
    raise "connection closed" if chunk.nil?

    chunk == :wait_readable ? +"".b : chunk
  end

  # Reads (and drops) the body up to `total` bytes; returns the count.
  def drain(sock, have, total)
    buffer = String.new(capacity: 1 << 20, encoding: Encoding::BINARY)
    have += read_some(sock, buffer).bytesize while have < total
    have
  end

  # Downloads `path`, sampling the server's RSS every 20 ms meanwhile.
  # Returns [RSS just before, highest RSS during, bytes, content-length,
  # seconds].
  def download_measured(server, path)
    assert_equal "200", server.get("/small").code # the app thread and a connection have run once
    before = rss_bytes(server.pid)
    peak = before
    done = false
    sampler = Thread.new do
      until done
        peak = [peak, rss_bytes(server.pid)].max
        sleep 0.02
      end
    end
    started = monotonic
    sock, status, length, have = start_download(server, path)
    assert_equal "HTTP/1.1 200 OK", status
    bytes = drain(sock, have, GIB)
    seconds = monotonic - started
    done = true
    sampler.join
    peak = [peak, rss_bytes(server.pid)].max
    assert_empty Tsubame::HttpSupport::Conn.new(sock).available(0.1), "nothing after the 1 GiB body"
    [before, peak, bytes, length, seconds]
  ensure
    done = true
    sock&.close
  end

  def test_a_1_gib_to_path_body_keeps_rss_flat_and_the_ruby_thread_free
    with_big_file do |_dir, path|
      # Rack 2's Lint hides to_path, which is what is checked.
      with_server(APP, args: ["-t", "1:1"], env: { "BIG_FILE" => path }, lint: LINT_FORWARDS_BODY) do |server|
        before, peak, bytes, length, seconds = download_measured(server, "/big")
        assert_equal [GIB.to_s, GIB], [length, bytes], "exactly 1 GiB, and the content-length says so"
        wall, cpu, queued, slept = server.get("/timing").body.split.map { |s| Float(s) }
        report(format("to_path: RSS %.1f MB before, +%d KB peak during 1 GiB in %.2f s; " \
                      "app thread %d µs wall, %d µs CPU, %d µs queued, %d sleeps",
                      before / 1e6, (peak - before) / 1000, seconds, wall * 1e6, cpu * 1e6, queued * 1e6, slept))
        assert_operator peak - before, :<, RSS_LIMIT, "RSS rose #{peak - before} bytes during the download"
        assert_operator cpu, :<, THREAD_LIMIT, "the app thread's CPU time in the request"
        # The thread never waited for anything (the GVL, a lock, I/O, the
        # transfer): each such wait is a voluntary context switch.
        assert_equal 0, slept, "the app thread slept between app.call and body.close " \
                               "(wall #{wall}, queued #{queued}, CPU #{cpu})"
        # Wall time less the time the kernel kept the thread waiting for a
        # core: on 2 cores, with the download itself (engine and client)
        # taking both, the thread is often queued 1-4 ms between handing
        # the file over and body.close while running ~0.1 ms. What is left
        # is the time it ran plus the time this VM's vCPU was taken by the
        # hypervisor (steal; no switch in the guest shows it, and the CI
        # failures that had 1.8 ms here had 0.14 ms of CPU): it is checked
        # as a whole only against a bound a hand-off could never meet, a
        # thread that sent even a sliver of the 1 GiB itself.
        assert_operator wall - queued, :<, STEAL_BOUND,
                        "the app thread's time from app.call to body.close, less run-queue waits " \
                        "(wall #{wall}, queued #{queued}, CPU #{cpu})"
      end
    end
  end

  def test_a_1_gib_file_from_the_public_folder_keeps_rss_flat
    with_big_file do |dir, _path|
      with_server(APP, args: ["-t", "1:1", "--public", dir], env: { "BIG_FILE" => "/nonexistent" }) do |server|
        before, peak, bytes, length, seconds = download_measured(server, "/big.bin")
        assert_equal [GIB.to_s, GIB], [length, bytes], "exactly 1 GiB, and the content-length says so"
        report(format("--public: RSS %.1f MB before, +%d KB peak during 1 GiB in %.2f s",
                      before / 1e6, (peak - before) / 1000, seconds))
        assert_operator peak - before, :<, RSS_LIMIT, "RSS rose #{peak - before} bytes during the download"
        assert_equal "none", server.get("/timing").body, "the app never saw the file's request"
      end
    end
  end

  # The download is held mid-way (the client stops reading, so the engine
  # waits on a full socket): the single Ruby thread answers another
  # request meanwhile, and had closed the big body already.
  def test_a_small_request_is_answered_while_the_download_is_in_progress
    with_big_file do |_dir, path|
      # Rack 2's Lint hides to_path, which is what is checked.
      with_server(APP, args: ["-t", "1:1"], env: { "BIG_FILE" => path }, lint: LINT_FORWARDS_BODY) do |server|
        sock, status, length, have = start_download(server, "/big")
        assert_equal ["HTTP/1.1 200 OK", GIB.to_s], [status, length]
        have = drain(sock, have, 16 << 20)
        started = monotonic
        small = server.get("/small")
        waited = monotonic - started
        assert_equal "small", small.body
        report(format("mid-download: small request answered in %.1f ms after %d MiB", waited * 1e3, have >> 20))
        assert_operator waited, :<, 1, "the small request waited #{waited} s behind the download"
        refute_equal "none", server.get("/timing").body, "the big body was closed before the download ended"
        assert_operator have, :<, GIB / 2, "the download was still in progress"
        assert_equal GIB, drain(sock, have, GIB), "and it finishes afterwards"
      ensure
        sock&.close
      end
    end
  end

  # The figures, on stderr, when TSUBAME_MEASURES is set.
  def report(line)
    warn "\n#{line}" if ENV["TSUBAME_MEASURES"]
  end
end
