# frozen_string_literal: true

require "http1/support"

# The engine's HTTP/1.1 connection handling, over real sockets against
# exe/tsubame: persistence, pipelining, HTTP/1.0, 100-continue, chunked
# request bodies, response framing, and the listeners.
class HttpEngineTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport

  def probe(**opts, &block)
    with_server(PROBE_APP, **opts, &block)
  end

  def test_keep_alive_serves_several_requests_on_one_connection
    probe do |s|
      client = conn(s)
      %w[/one /two /three].each do |path|
        client.write(get_request(path))
        response = client.read_response
        assert_equal "HTTP/1.1 200 OK", response.status_line
        assert_equal path, response.body
        assert_equal path.bytesize.to_s, response["content-length"]
        refute response.header?("connection"), "HTTP/1.1 keep-alive needs no Connection header"
        refute_nil response["date"]
      end
      assert_equal :timeout, client.wait_close(0.3), "the connection must stay open"
      client.write(get_request("/four"))
      assert_equal "/four", client.read_response.body
      assert_equal ["GET /one", "GET /two", "GET /three", "GET /four"], seen(s)
    ensure
      client&.close
    end
  end

  def test_connection_close_closes_after_the_response
    probe do |s|
      client = conn(s)
      client.write(get_request("/bye", "Connection" => "close"))
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      assert_equal "/bye", response.body
      assert_equal "close", response["connection"]
      assert_equal :eof, client.wait_close
    ensure
      client&.close
    end
  end

  def test_pipelined_requests_are_answered_in_order
    probe do |s|
      client = conn(s)
      # The first is the slowest, so answering out of order would show.
      requests = [
        get_request("/sleep/0.3/first"),
        request("POST", "/echo", { "Content-Type" => "text/plain" }, "posted body"),
        request("HEAD", "/fixed"),
        get_request("/third?q=1"),
        get_request("/last")
      ]
      client.write(requests.join)
      first = client.read_response
      assert_equal ["HTTP/1.1 200 OK", "/sleep/0.3/first"], [first.status_line, first.body]
      assert_equal %("11" nil posted body), client.read_response.body
      head = client.read_response(head: true)
      assert_equal ["HTTP/1.1 200 OK", "11"], [head.status_line, head["content-length"]]
      assert_equal "/third", client.read_response.body
      assert_equal "/last", client.read_response.body
      assert_equal :timeout, client.wait_close(0.3), "no bytes may follow the fifth response"
      assert_equal ["GET /sleep/0.3/first", "POST /echo", "HEAD /fixed", "GET /third?q=1", "GET /last"], seen(s)
    ensure
      client&.close
    end
  end

  def test_many_pipelined_requests_and_blank_lines_between_them
    probe do |s|
      client = conn(s)
      # Some clients send a stray CRLF after a body; it is skipped.
      client.write((1..50).map { |i| get_request("/p#{i}") }.join + "\r\n" +
                   request("POST", "/echo", {}, "x") + "\r\n\r\n" + get_request("/end"))
      (1..50).each do |i|
        response = client.read_response
        assert_equal ["HTTP/1.1 200 OK", "/p#{i}"], [response.status_line, response.body]
      end
      assert_equal %("1" nil x), client.read_response.body
      assert_equal "/end", client.read_response.body
      assert_equal 52, seen(s).size
    ensure
      client&.close
    end
  end

  def test_response_after_the_client_half_closes
    probe do |s|
      raw = s.raw(get_request("/half") + get_request("/closed"), close_write: true)
      responses = raw.split(/(?=HTTP\/1\.1 )/)
      assert_equal 2, responses.size, raw
      assert responses[0].start_with?("HTTP/1.1 200 OK\r\n") && responses[0].end_with?("\r\n\r\n/half"), responses[0]
      assert responses[1].end_with?("\r\n\r\n/closed"), responses[1]
    end
  end

  def test_array_body_is_sent_with_its_real_length
    # A content-length that does not match the body, on purpose.
    probe(lint: false) do |s|
      client = conn(s)
      client.write(get_request("/wrong-length") + get_request("/after"))
      response = client.read_response
      assert_equal ["HTTP/1.1 200 OK", "5", "hello"], [response.status_line, response["content-length"], response.body]
      assert_equal "/after", client.read_response.body
    ensure
      client&.close
    end
  end

  def test_streamed_body_longer_than_its_content_length_is_cut_and_closed
    probe do |s|
      client = conn(s)
      client.write(get_request("/each-too-long") + get_request("/smuggled"))
      response = client.read_response
      assert_equal ["HTTP/1.1 200 OK", "5", "hello"], [response.status_line, response["content-length"], response.body]
      # The surplus bytes must not be read as a next response.
      assert_equal :eof, client.wait_close
      client.close

      client = conn(s)
      client.write(get_request("/each-too-short"))
      head = client.read_until("\r\n\r\n")
      assert_includes head.split("\r\n"), "content-length: 20"
      assert_equal "hi", client.read_exact(2)
      assert_equal :eof, client.wait_close, "a short body must end in a close, not a hang"
    ensure
      client&.close
    end
  end

  def test_http10_closes_by_default
    probe do |s|
      client = conn(s)
      client.write("GET /env HTTP/1.0\r\n\r\n")
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      assert_equal "127.0.0.1 HTTP/1.0 HTTP/1.0", response.body
      assert_equal "close", response["connection"]
      assert_equal :eof, client.wait_close
    ensure
      client&.close
    end
  end

  def test_http10_keep_alive_when_asked
    probe do |s|
      client = conn(s)
      client.write("GET /a HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
      first = client.read_response
      assert_equal ["HTTP/1.1 200 OK", "/a", "keep-alive"], [first.status_line, first.body, first["connection"]]
      client.write("GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      second = client.read_response
      assert_equal ["HTTP/1.1 200 OK", "/b", "keep-alive"], [second.status_line, second.body, second["connection"]]
      # A third without the token ends the connection.
      client.write("GET /c HTTP/1.0\r\n\r\n")
      third = client.read_response
      assert_equal ["/c", "close"], [third.body, third["connection"]]
      assert_equal :eof, client.wait_close
    ensure
      client&.close
    end
  end

  def test_http10_streamed_body_is_delimited_by_close
    probe do |s|
      client = conn(s)
      client.write("GET /gated?#{File::NULL} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      refute response.header?("transfer-encoding"), "HTTP/1.0 has no chunked coding"
      refute response.header?("content-length")
      assert_equal "close", response["connection"]
      assert_equal "firstsecond", response.body
    ensure
      client&.close
    end
  end

  def test_expect_100_continue
    probe do |s|
      client = conn(s, timeout: 3)
      client.write("POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 13\r\n\r\n")
      assert_equal "HTTP/1.1 100 Continue", client.read_until("\r\n\r\n"),
                   "the server must ask for the body before it is sent"
      client.write("hello, server")
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      assert_equal %("13" nil hello, server), response.body
      # The connection carries on normally afterwards.
      client.write(get_request("/after"))
      assert_equal "/after", client.read_response.body
    ensure
      client&.close
    end
  end

  def test_expect_100_continue_not_sent_when_the_body_is_already_there
    probe do |s|
      client = conn(s)
      client.write("POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc")
      response = client.read_response
      assert_equal ["HTTP/1.1 200 OK", %("3" nil abc)], [response.status_line, response.body]
    ensure
      client&.close
    end
  end

  def test_chunked_request_body_is_dechunked
    probe do |s|
      client = conn(s)
      body = "5;name=value\r\nhello\r\n1\r\n,\r\n6;a=b;c=\"d\"\r\n world\r\n0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
      client.write("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n#{body}#{get_request("/next")}")
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      # CONTENT_LENGTH is the decoded size; Transfer-Encoding is gone.
      assert_equal %("12" nil hello, world), response.body
      assert_equal "/next", client.read_response.body, "the trailers must be consumed exactly"
    ensure
      client&.close
    end
  end

  def test_chunked_request_body_in_pieces
    probe do |s|
      client = conn(s)
      client.write("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
      ["a\r\n0123", "456789\r", "\n3;x=y\r\nabc\r\n0\r", "\n\r\n"].each do |piece|
        sleep 0.05
        client.write(piece)
      end
      assert_equal %("13" nil 0123456789abc), client.read_response.body
    ensure
      client&.close
    end
  end

  def test_empty_chunked_body
    probe do |s|
      client = conn(s)
      client.write("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
      assert_equal %("0" nil ), client.read_response.body
    ensure
      client&.close
    end
  end

  def test_head_keeps_content_length_and_sends_no_body
    # Rack 2's Lint hides the Array body whose length HEAD keeps.
    probe(lint: LINT_FORWARDS_BODY) do |s|
      client = conn(s)
      # The GET right behind each HEAD would be misread if any body bytes
      # followed a HEAD response.
      client.write(request("HEAD", "/fixed") + get_request("/fixed") + request("HEAD", "/no-length") +
                   get_request("/no-length"))
      head = client.read_response(head: true)
      assert_equal "HTTP/1.1 200 OK", head.status_line
      assert_equal "11", head["content-length"]
      assert_equal "text/plain", head["content-type"]
      get = client.read_response
      assert_equal ["11", "hello world"], [get["content-length"], get.body]
      # Without a length from the app, HEAD must not claim a wrong one.
      head = client.read_response(head: true)
      assert_equal "HTTP/1.1 200 OK", head.status_line
      assert_includes [nil, "11"], head["content-length"]
      get = client.read_response
      assert_equal ["11", "hello world"], [get["content-length"], get.body]
      assert_equal :timeout, client.wait_close(0.3)
    ensure
      client&.close
    end
  end

  def test_204_and_304_have_no_body
    # A body and a content-type on 204 and 304, on purpose.
    probe(lint: false) do |s|
      client = conn(s)
      client.write(get_request("/204") + get_request("/304") + get_request("/after"))
      no_content = client.read_response
      assert_equal "HTTP/1.1 204 No Content", no_content.status_line
      refute no_content.header?("content-length")
      refute no_content.header?("transfer-encoding")
      not_modified = client.read_response
      assert_equal "HTTP/1.1 304 Not Modified", not_modified.status_line
      assert_equal '"x"', not_modified["etag"]
      refute not_modified.header?("transfer-encoding")
      after = client.read_response
      assert_equal ["HTTP/1.1 200 OK", "/after"], [after.status_line, after.body]
      assert_equal :timeout, client.wait_close(0.3)
    ensure
      client&.close
    end
  end

  def test_each_body_without_length_is_chunked_as_produced
    in_tmpdir do |dir|
      gate = File.join(dir, "gate")
      probe do |s|
        client = conn(s, timeout: 5)
        client.write(get_request("/gated?#{gate}"))
        head = client.read_until("\r\n\r\n")
        assert head.start_with?("HTTP/1.1 200 OK\r\n"), head
        assert_includes head.split("\r\n"), "transfer-encoding: chunked"
        refute_match(/^content-length:/i, head)
        # "second" cannot exist before the gate opens, so "first" arriving
        # now proves chunks leave as they are produced.
        assert_equal "5\r\nfirst\r\n", client.read_exact(10)
        assert_equal "", client.available(0.3), "nothing more before the gate opens"
        File.write(gate, "")
        assert_equal "6\r\nsecond\r\n0\r\n\r\n", client.read_exact(16)
        client.write(get_request("/after"))
        assert_equal "/after", client.read_response.body, "a chunked response keeps the connection"
      ensure
        client&.close
      end
    end
  end

  # The writer sends several queued chunks in one write; the last pieces
  # of a burst must still leave at once, not wait for the app's next one.
  def test_a_burst_of_chunks_arrives_whole_while_the_app_waits
    %w[/burst /burst-call].each do |path|
      in_tmpdir do |dir|
        gate = File.join(dir, "gate")
        # Rack 2's SPEC has no streaming (call) body.
        probe(lint: !(RACK2 && path == "/burst-call")) do |s|
          client = conn(s, timeout: 5)
          client.write(get_request("#{path}?#{gate}"))
          head = client.read_until("\r\n\r\n")
          assert_includes head.split("\r\n"), "transfer-encoding: chunked", path
          burst = Array.new(300) { |i| format("a\r\npiece %03d\n\r\n", i) }.join
          assert_equal burst, client.read_exact(burst.bytesize), "#{path}: every piece, each its own chunk"
          assert_equal "", client.available(0.3), "#{path}: nothing more before the gate opens"
          File.write(gate, "")
          assert_equal "5\r\nafter\r\n0\r\n\r\n", client.read_exact(15), path
        ensure
          client&.close
        end
      end
    end
  end

  def test_each_body_with_content_length_is_not_chunked
    probe do |s|
      client = conn(s)
      client.write(get_request("/each-with-length") + get_request("/after"))
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      assert_equal "11", response["content-length"]
      refute response.header?("transfer-encoding")
      assert_equal "hello world", response.body
      assert_equal "/after", client.read_response.body
    ensure
      client&.close
    end
  end

  def test_unix_socket
    probe(unix: true) do |s|
      sock = UNIXSocket.new(s.unix_path)
      client = Tsubame::HttpSupport::Conn.new(sock)
      client.write(get_request("/env") + get_request("/unix", "Connection" => "close"))
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      assert_equal "127.0.0.1 HTTP/1.1 HTTP/1.1", response.body
      assert_equal "/unix", client.read_response.body
      assert_equal :eof, client.wait_close
      assert_includes s.addresses, "unix://#{s.unix_path}"
    ensure
      client&.close
    end
  end

  def test_ipv6_loopback
    unless Socket.ip_address_list.any? { |a| a.ipv6? && a.ip_address == "::1" }
      skip "::1 is not configured on this machine, so an IPv6 listener cannot be tested"
    end
    probe(args: ["-b", "tcp://[::1]:0"]) do |s|
      address = s.addresses.find { |a| a.start_with?("http://[::1]:") }
      refute_nil address, "banner should list the IPv6 listener: #{s.addresses.inspect}"
      port = Integer(address[/\]:(\d+)\z/, 1], 10)
      client = Tsubame::HttpSupport::Conn.new(TCPSocket.new("::1", port))
      client.write(request("GET", "/env", { "Host" => "[::1]:#{port}" }))
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      assert_equal "::1 HTTP/1.1 HTTP/1.1", response.body
    ensure
      client&.close
    end
  end
end
