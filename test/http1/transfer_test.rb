# frozen_string_literal: true

require "http1/support"

# Large bodies both ways, checked byte for byte by digest, and clients that
# go away in the middle of a response.
class HttpTransferTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport

  def probe(**opts, &block)
    with_server(PROBE_APP, **opts, &block)
  end

  # 50 MiB of bytes that are not all alike, with a digest to check them by.
  def upload_data
    block = Random.new(99).bytes(1 << 20)
    Array.new(50) { |i| format("%08d", i) + block.byteslice(8..) }
  end

  def test_large_upload_with_content_length_is_spooled_intact
    pieces = upload_data
    size = pieces.sum(&:bytesize)
    expected = Digest::SHA256.new.tap { |d| pieces.each { |p| d << p } }.hexdigest
    # /sha rewinds the server's rack.input; Rack 3's Lint input has no rewind (optional since 3.1).
    probe(lint: RACK2) do |s|
      client = conn(s, timeout: 30)
      client.write("POST /sha HTTP/1.1\r\nHost: a\r\nContent-Length: #{size}\r\n\r\n")
      pieces.each { |piece| client.write(piece) }
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      # size read, digest, the digest after a rewind matched, CONTENT_LENGTH
      assert_equal "#{size} #{expected} true #{size}", response.body
      client.write(get_request("/after"))
      assert_equal "/after", client.read_response.body
    ensure
      client&.close
    end
  end

  def test_large_chunked_upload_is_dechunked_intact
    pieces = upload_data
    size = pieces.sum(&:bytesize)
    expected = Digest::SHA256.new.tap { |d| pieces.each { |p| d << p } }.hexdigest
    # /sha rewinds the server's rack.input; Rack 3's Lint input has no rewind (optional since 3.1).
    probe(lint: RACK2) do |s|
      client = conn(s, timeout: 30)
      client.write("POST /sha HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
      pieces.each_with_index do |piece, i|
        # Uneven chunks, some with extensions, split across writes.
        a, b = piece.byteslice(0, 1000 + i), piece.byteslice((1000 + i)..)
        client.write("#{a.bytesize.to_s(16)};n=#{i}\r\n#{a}\r\n")
        client.write("#{b.bytesize.to_s(16)}\r\n")
        client.write(b)
        client.write("\r\n")
      end
      client.write("0\r\nX-Sum: #{expected}\r\n\r\n")
      response = client.read_response
      assert_equal "HTTP/1.1 200 OK", response.status_line
      assert_equal "#{size} #{expected} true #{size}", response.body
      client.write(get_request("/after"))
      assert_equal "/after", client.read_response.body
    ensure
      client&.close
    end
  end

  def download(client, path)
    digest = Digest::SHA256.new
    counter = Struct.new(:size) do
      def <<(bytes)
        self.size += bytes.bytesize
        @digest << bytes
        self
      end
    end.new(0)
    counter.instance_variable_set(:@digest, digest)
    client.write(get_request(path))
    response = client.read_response(sink: counter)
    [response, counter.size, digest.hexdigest]
  end

  def test_large_array_body_download
    # Rack 2's Lint hides the Array body, whose length is checked.
    probe(lint: LINT_FORWARDS_BODY) do |s|
      client = conn(s, timeout: 30)
      response, size, digest = download(client, "/big-array")
      assert_equal "HTTP/1.1 200 OK", response.status_line
      assert_equal BIG_SIZE.to_s, response["content-length"]
      assert_equal [BIG_SIZE, Tsubame::HttpSupport.big_digest], [size, digest]
      client.write(get_request("/after"))
      assert_equal "/after", client.read_response.body
    ensure
      client&.close
    end
  end

  def test_large_each_body_download_is_chunked_intact
    probe do |s|
      client = conn(s, timeout: 30)
      response, size, digest = download(client, "/big-each")
      assert_equal "HTTP/1.1 200 OK", response.status_line
      assert_equal "chunked", response["transfer-encoding"]
      assert_equal [BIG_SIZE, Tsubame::HttpSupport.big_digest], [size, digest]
      client.write(get_request("/after"))
      assert_equal "/after", client.read_response.body
    ensure
      client&.close
    end
  end

  def test_large_file_downloads
    in_tmpdir do |dir|
      File.open(File.join(dir, "big.bin"), "wb") { |f| Tsubame::HttpSupport.big_pieces.each { |p| f.write(p) } }
      File.write(File.join(dir, "small.txt"), "small file\n")
      probe(env: { "FILES_DIR" => dir }) do |s|
        client = conn(s, timeout: 30)
        # Rack::Files: its body has to_path.
        response, size, digest = download(client, "/files/big.bin")
        assert_equal "HTTP/1.1 200 OK", response.status_line
        assert_equal BIG_SIZE.to_s, response["content-length"]
        refute response.header?("transfer-encoding")
        assert_equal [BIG_SIZE, Tsubame::HttpSupport.big_digest], [size, digest]
        # A body of its own with to_path.
        response, size, digest = download(client, "/to-path")
        assert_equal [BIG_SIZE.to_s, BIG_SIZE, Tsubame::HttpSupport.big_digest],
                     [response["content-length"], size, digest]
        # Range requests go through Rack::Files' own partial body.
        client.write(get_request("/files/big.bin", "Range" => "bytes=65536-65551"))
        partial = client.read_response
        assert_equal "HTTP/1.1 206 Partial Content", partial.status_line
        assert_equal ["16", "bytes 65536-65551/#{BIG_SIZE}"], [partial["content-length"], partial["content-range"]]
        assert_equal Tsubame::HttpSupport.big_pieces[1].byteslice(0, 16), partial.body
        client.write(get_request("/files/small.txt") + request("HEAD", "/files/small.txt"))
        small = client.read_response
        assert_equal ["HTTP/1.1 200 OK", "11", "small file\n"], [small.status_line, small["content-length"], small.body]
        head = client.read_response(head: true)
        assert_equal ["HTTP/1.1 200 OK", "11"], [head.status_line, head["content-length"]]
        client.write(get_request("/after"))
        assert_equal "/after", client.read_response.body
      ensure
        client&.close
      end
    end
  end

  def test_client_disconnecting_mid_response
    probe do |s|
      client = conn(s)
      client.write(get_request("/slow/gone"))
      head = client.read_until("\r\n\r\n")
      assert head.start_with?("HTTP/1.1 200 OK\r\n"), head
      assert_equal "7\r\ntick 0\n\r\n", client.read_exact(12)
      # Drop the connection hard, mid-body.
      client.sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
      client.close

      # The server goes on serving while that body is being torn down.
      other = conn(s)
      other.write(get_request("/ping"))
      assert_equal "/ping", other.read_response.body
      other.close

      closed = ""
      deadline = Time.now + 5
      while closed.empty? && Time.now < deadline
        sleep 0.05
        closed = s.get("/closed/gone").body
      end
      refute_empty closed, "the body's close was never called"
      assert_operator Integer(closed, 10), :<, 50, "the body kept being produced for a gone client"

      # A full slow body still works for a client that stays.
      stayer = conn(s)
      stayer.write(get_request("/sleep/0/still-alive"))
      assert_equal "/sleep/0/still-alive", stayer.read_response.body
      stayer.close
      assert_equal "", s.stderr.lines.grep_v(/client disconnected/).join
    ensure
      client&.close
    end
  end

  def test_many_clients_disconnecting_do_not_exhaust_the_threads
    probe(args: ["-t", "2"]) do |s|
      6.times do |i|
        client = conn(s)
        client.write(get_request("/slow/c#{i}"))
        client.read_until("\r\n\r\n")
        client.sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
        client.close
      end
      # With two threads, a thread held by each abandoned body would leave
      # none for this request.
      client = conn(s, timeout: 5)
      client.write(get_request("/alive"))
      assert_equal "/alive", client.read_response.body
      client.close
      deadline = Time.now + 5
      sleep 0.05 until (0...6).all? { |i| !s.get("/closed/c#{i}").body.empty? } || Time.now > deadline
      assert((0...6).all? { |i| !s.get("/closed/c#{i}").body.empty? }, "every abandoned body must be closed")
    end
  end
end
