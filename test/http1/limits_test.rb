# frozen_string_literal: true

require "http1/support"

# Limits that depend on configuration (max_headers, max_uri_size,
# max_header_size, max_body_size from a file or a flag) and on time (408,
# keep-alive timeouts). Malformed and hostile requests at the default
# limits are the adversarial corpus's job (test/adversarial/).
class HttpLimitsTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport

  def probe(**opts, &block)
    with_server(PROBE_APP, **opts, &block)
  end

  def test_max_headers_from_the_config_file
    in_tmpdir do |dir|
      config = write_file(dir, "tsubame.rb", "max_headers 5\nmax_uri_size 50\nmax_header_size 2000\n")
      probe(args: ["-C", config]) do |s|
        assert_refused(s, get_request("/", (1..5).to_h { |i| ["X-#{i}", "v"] }), "HTTP/1.1 431 Request Header Fields Too Large")
        assert_refused(s, get_request("/#{"u" * 50}"), "HTTP/1.1 414 URI Too Long")
        assert_refused(s, get_request("/", "X" => "v" * 2000), "HTTP/1.1 431 Request Header Fields Too Large")
        client = conn(s)
        client.write(get_request("/#{"u" * 49}", (1..4).to_h { |i| ["X-#{i}", "v"] }))
        assert_equal "HTTP/1.1 200 OK", client.read_response.status_line
        client.close
        assert_equal ["GET /#{"u" * 49}"], seen(s)
      end
    end
  end

  def test_body_over_the_config_file_limit_is_413
    in_tmpdir do |dir|
      config = write_file(dir, "tsubame.rb", "http_content_length_limit 1000\n")
      probe(args: ["-C", config]) { |s| check_body_limit(s) }
    end
  end

  def test_body_over_the_flag_limit_is_413
    probe(args: ["--max-body-size", "1000"]) { |s| check_body_limit(s) }
  end

  def check_body_limit(server)
    client = conn(server)
    client.write(request("POST", "/echo", {}, "a" * 1000))
    assert_equal %("1000" nil #{"a" * 1000}), client.read_response.body
    client.close
    # Refused on the declared length, before the body is read.
    assert_refused(server, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\n",
                   "HTTP/1.1 413 Content Too Large")
    assert_refused(server, request("POST", "/echo", {}, "b" * 5000), "HTTP/1.1 413 Content Too Large")
    # A chunked body is refused once its decoded size passes the limit.
    chunked = "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" \
              "3e8\r\n#{"c" * 1000}\r\n1\r\nc\r\n0\r\n\r\n"
    assert_refused(server, chunked, "HTTP/1.1 413 Content Too Large")
    # Exactly at the limit, chunked, is fine.
    client = conn(server)
    client.write("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" \
                 "1f4\r\n#{"d" * 500}\r\n1f4\r\n#{"d" * 500}\r\n0\r\n\r\n")
    assert_equal %("1000" nil #{"d" * 1000}), client.read_response.body
    client.close
    assert_equal ["POST /echo", "POST /echo"], seen(server)
  end

  # A client that writes its whole body before it reads, and gives up when
  # a write fails (curl without Expect, most HTTP libraries), still gets the
  # 413 the server sent while it was writing: the server reads and drops
  # the rest of the body before it closes, so the close is not a reset that
  # fails the client's write. (Net::HTTP would hide the difference: it
  # reads the response after EPIPE.)
  def test_a_client_still_sending_a_refused_body_reads_the_413
    probe(args: ["--max-body-size", "1000"]) do |s|
      3.times do
        client = small_send_buffer(conn(s))
        client.write(request("POST", "/echo", {}, "b" * (3 * 1024 * 1024)))
        response = client.read_response
        assert_equal "HTTP/1.1 413 Content Too Large", response.status_line
        assert_equal "close", response["connection"]
        assert response.body.start_with?("413 Content Too Large\n"), response.body
        assert_equal :eof, client.wait_close
      ensure
        client&.close
      end
      assert_equal [], seen(s)
    end
  end

  # The draining is bounded: a client that goes on sending is cut off (its
  # write fails) once a few MiB were dropped, instead of holding the
  # connection for as long as it likes.
  def test_a_client_that_never_stops_sending_after_a_413_is_cut_off
    probe(args: ["--max-body-size", "1000"]) do |s|
      client = small_send_buffer(conn(s))
      client.write("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100000000000\r\n\r\n")
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      sent = 0
      chunk = "c" * 65_536
      assert_raises(Errno::EPIPE, Errno::ECONNRESET) do
        loop do
          sent += client.sock.write(chunk)
          break if Process.clock_gettime(Process::CLOCK_MONOTONIC) - started > 20
        end
      end
      elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      # 4 MiB are read and dropped (without the drain, only what the
      # socket buffers hold, far less, would go). `sent` counts whole
      # 64 KiB writes: the one cut short by the reset is not in it, so
      # with little left in the buffers it is exactly 4 MiB.
      assert_operator sent, :>=, 4 * 1024 * 1024, "the server drained before closing"
      assert_operator sent, :<, 16 * 1024 * 1024
      assert_operator elapsed, :<, 10, "cut off after the drain's bounds"
      assert_equal [], seen(s)
    ensure
      client&.close
    end
  end

  # Loopback lets the kernel buffer megabytes a client writes (send
  # buffers grow to 4 MiB here), which would hide whether the server reads
  # them; a fixed small send buffer keeps in flight what a real network
  # path would.
  def small_send_buffer(client)
    client.sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_SNDBUF, 64 * 1024)
    client
  end

  def test_expect_100_continue_with_a_body_over_the_limit_gets_413_instead
    probe(args: ["--max-body-size", "1000"]) do |s|
      client = conn(s, timeout: 3)
      client.write("PUT /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1001\r\n\r\n")
      # The point of 100-continue: the client learns before sending the body.
      response = client.read_response
      assert_equal "HTTP/1.1 413 Content Too Large", response.status_line
      assert_equal :eof, client.wait_close
      client.close
      # Within the limit it is asked for as usual.
      client = conn(s, timeout: 3)
      client.write("PUT /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1000\r\n\r\n")
      assert_equal "HTTP/1.1 100 Continue", client.read_until("\r\n\r\n")
      client.write("e" * 1000)
      assert_equal %("1000" nil #{"e" * 1000}), client.read_response.body
      assert_equal ["PUT /echo"], seen(s)
    ensure
      client&.close
    end
  end

  def test_slow_request_body_gets_408
    in_tmpdir do |dir|
      config = write_file(dir, "tsubame.rb", "body_timeout 1\n")
      probe(args: ["-C", config]) do |s|
        client = conn(s, timeout: 4)
        started = Time.now
        client.write("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhalf")
        response = client.read_response
        assert_equal "HTTP/1.1 408 Request Timeout", response.status_line
        assert_in_delta 1.0, Time.now - started, 0.8
        assert_equal :eof, client.wait_close
        assert_equal [], seen(s)
      ensure
        client&.close
      end
    end
  end

  # One whole 32 MiB response (an Array body: written as one reply, not
  # streamed).
  BIG_APP = <<~RUBY
    body = ("x" * (32 * 1024 * 1024)).freeze
    run ->(_env) { [200, { "content-type" => "text/plain" }, [body]] }
  RUBY

  # body_timeout also bounds a response write that stalls: a client that
  # stops reading is dropped after it, not held with its reply forever.
  # (A reply the socket takes at once arms no timer; this one cannot.)
  def test_a_client_that_stops_reading_a_response_is_dropped_after_body_timeout
    in_tmpdir do |dir|
      config = write_file(dir, "tsubame.rb", "body_timeout 1\n")
      with_server(BIG_APP, args: ["-C", config], lint: false) do |s|
        sock = TCPSocket.new("127.0.0.1", s.port)
        sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_RCVBUF, 64 * 1024)
        sock.write(get_request("/"))
        sleep 3 # reads nothing for three times body_timeout
        got = 0
        closed = false
        deadline = monotonic + 10
        while monotonic < deadline && got < 32 * 1024 * 1024 && sock.wait_readable(2)
          chunk = begin
            sock.read_nonblock(1 << 20, exception: false)
          rescue Errno::ECONNRESET
            nil
          end
          break closed = true if chunk.nil?

          got += chunk.bytesize if chunk.is_a?(String)
        end
        assert closed, "the server dropped the stalled connection (#{got} bytes read)"
        assert_operator got, :<, 32 * 1024 * 1024, "the reply was cut short, not delivered whole"
      ensure
        sock&.close
      end
    end
  end

  def test_nothing_pipelined_behind_a_413_runs
    probe(args: ["--max-body-size", "10"]) do |s|
      raw = s.raw("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nGET /smuggl\r\n" \
                  "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", timeout: 3)
      assert raw.start_with?("HTTP/1.1 413 Content Too Large\r\n"), raw
      assert_equal 1, raw.scan(%r{HTTP/1\.1 \d{3} }).size, raw
      assert_equal [], seen(s)
    end
  end

  def test_idle_keep_alive_connection_is_closed_after_persistent_timeout
    in_tmpdir do |dir|
      config = write_file(dir, "tsubame.rb", "persistent_timeout 1\n")
      probe(args: ["-C", config]) do |s|
        client = conn(s)
        client.write(get_request("/first"))
        assert_equal "/first", client.read_response.body
        answered = Time.now
        assert_equal :eof, client.wait_close(5)
        idle = Time.now - answered
        assert_operator idle, :>=, 0.8, "closed too early"
        assert_operator idle, :<, 3, "closed too late"

        # Activity restarts the clock: requests 0.5 s apart keep it open,
        # and it closes a timeout after the last one, not after the first
        # (the connection's one timer is moved along, not made again).
        client = conn(s)
        4.times do |i|
          sleep 0.5 if i.positive?
          client.write(get_request("/again#{i}"))
          assert_equal "/again#{i}", client.read_response.body
        end
        answered = Time.now
        assert_equal :eof, client.wait_close(5)
        idle = Time.now - answered
        assert_operator idle, :>=, 0.8, "closed too early after the last request"
        assert_operator idle, :<, 1.6, "closed too late after the last request"
      ensure
        client&.close
      end
    end
  end

  def test_slow_request_head_gets_408
    in_tmpdir do |dir|
      config = write_file(dir, "tsubame.rb", "first_data_timeout 1\n")
      probe(args: ["-C", config]) do |s|
        client = conn(s)
        started = Time.now
        client.write("GET /sl")
        response = client.read_response
        assert_equal "HTTP/1.1 408 Request Timeout", response.status_line
        assert_equal "close", response["connection"]
        assert_in_delta 1.0, Time.now - started, 0.8
        assert_equal :eof, client.wait_close

        # Dribbling bytes does not extend the deadline.
        client = conn(s)
        started = Time.now
        raw = +""
        "GET /dribble HTTP/1.1\r\nHost: a\r\n".each_char do |char|
          raw << client.available(0.1)
          break unless raw.empty?

          client.write(char)
        end
        raw << client.available(2)
        assert raw.start_with?("HTTP/1.1 408 Request Timeout\r\n"), raw
        assert_operator Time.now - started, :<, 2.5

        # A connection that sends nothing is closed silently.
        client = conn(s)
        started = Time.now
        assert_equal :eof, client.wait_close(4)
        assert_in_delta 1.0, Time.now - started, 0.8
        assert_equal [], seen(s)
      ensure
        client&.close
      end
    end
  end
end
