# frozen_string_literal: true

require "http1/support"
require "tls/support"

# Bodies with to_path (Rack::Files, send_file): the engine opens the file
# and sends it itself, with sendfile(2) on plain TCP and UNIX sockets and
# by reading and writing on TLS and HTTP/2 (and for files up to 32 KiB,
# sent with their head in one write). The engine's counters
# files_sendfile and files_copied say which way each went.
class SendfileTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport
  include Tsubame::TlsSupport

  APP = <<~'RUBY'
    require "rack"
    files = Rack::Files.new(ENV.fetch("FILES_DIR"))
    run lambda { |env|
      if env["PATH_INFO"] == "/hello"
        [200, { "content-type" => "text/plain", "content-length" => "5" }, ["hello"]]
      else
        files.call(env)
      end
    }
  RUBY

  TOKEN = "t"

  # A server over FILES_DIR=dir with the control app on, yielded with a
  # lambda that reads the engine's counters.
  def with_files_server(dir, args: [], unix: false)
    control = free_port
    args = ["--control-url", "tcp://127.0.0.1:#{control}", "--control-token", TOKEN, *args]
    # Rack 2's Lint hides to_path, which is what is checked.
    with_server(APP, args: args, env: { "FILES_DIR" => dir }, unix: unix, lint: LINT_FORWARDS_BODY) do |server|
      counters = lambda do
        stats = JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{control}/stats?token=#{TOKEN}")))
        stats.fetch("engine").values_at("files_sendfile", "files_copied")
      end
      yield server, counters
    end
  end

  def big_file(dir)
    path = File.join(dir, "big.bin")
    File.open(path, "wb") { |f| Tsubame::HttpSupport.big_pieces.each { |piece| f.write(piece) } }
    path
  end

  def digest_sink
    Struct.new(:size, :digest) do
      def <<(bytes)
        self.size += bytes.bytesize
        digest << bytes
        self
      end
    end.new(0, Digest::SHA256.new)
  end

  def assert_files_served_exactly(client)
    client.write(get_request("/small.txt"))
    small = client.read_response
    assert_equal ["HTTP/1.1 200 OK", "11", "small file\n"], [small.status_line, small["content-length"], small.body]
    client.write(get_request("/empty.txt"))
    empty = client.read_response
    assert_equal ["HTTP/1.1 200 OK", "0", ""], [empty.status_line, empty["content-length"], empty.body]
    sink = digest_sink
    client.write(get_request("/big.bin"))
    big = client.read_response(sink: sink)
    assert_equal [BIG_SIZE.to_s, BIG_SIZE, Tsubame::HttpSupport.big_digest],
                 [big["content-length"], sink.size, sink.digest.hexdigest]
    client.write(request("HEAD", "/big.bin"))
    head = client.read_response(head: true)
    assert_equal ["HTTP/1.1 200 OK", BIG_SIZE.to_s], [head.status_line, head["content-length"]]
    # Nothing stray after the body or the HEAD: the next answer parses.
    client.write(get_request("/hello"))
    assert_equal "hello", client.read_response.body
  end

  def write_fixture(dir)
    File.write(File.join(dir, "small.txt"), "small file\n")
    File.write(File.join(dir, "empty.txt"), "")
    big_file(dir)
  end

  def test_plain_tcp_and_unix_connections_send_files_with_sendfile
    in_tmpdir do |dir|
      write_fixture(dir)
      with_files_server(dir, unix: true) do |server, counters|
        client = conn(server, timeout: 30)
        assert_files_served_exactly(client)
        client.close
        unix = Conn.new(UNIXSocket.new(server.unix_path), timeout: 30)
        assert_files_served_exactly(unix)
        unix.close
        # Three files per connection (HEAD sends none): the large one in the
        # kernel, the small ones (up to 32 KiB) read and sent with their head.
        assert_equal [2, 4], counters.call
      end
    end
  end

  def test_tls_and_http2_read_and_write_the_same_bytes
    in_tmpdir do |dir|
      write_fixture(dir)
      with_files_server(dir, args: ["-b", ssl_bind, "--h2c"]) do |server, counters|
        port = ssl_port(server)
        https(port).start do |http|
          assert_equal ["11", "small file\n"], http.get("/small.txt").then { |r| [r["content-length"], r.body] }
          assert_equal ["0", ""], http.get("/empty.txt").then { |r| [r["content-length"], r.body.to_s] }
          big = http.get("/big.bin")
          assert_equal [BIG_SIZE.to_s, Tsubame::HttpSupport.big_digest],
                       [big["content-length"], Digest::SHA256.hexdigest(big.body)]
          assert_equal BIG_SIZE.to_s, http.head("/big.bin")["content-length"]
          # The same connection: nothing stray was left after the bodies.
          assert_equal "hello", http.get("/hello").body
        end
        assert_equal [0, 3], counters.call
        out, err, status = curl("--http2", "--cacert", certs.path("ca.pem"), "https://localhost:#{port}/big.bin")
        assert status.success?, err
        assert_equal Tsubame::HttpSupport.big_digest, Digest::SHA256.hexdigest(out)
        out, err, status = curl("--http2-prior-knowledge", "http://127.0.0.1:#{server.port}/small.txt")
        assert status.success?, err
        assert_equal "small file\n", out
        assert_equal [0, 5], counters.call, "HTTP/2 (h2 and h2c) copies"
      end
    end
  end

  # The head promised the length the file had; the file then shrinks
  # under the send. The client gets the bytes the file still has, exactly,
  # and then the connection ends: never other bytes to make up the length.
  def test_a_file_that_shrinks_while_being_sent_ends_the_connection
    in_tmpdir do |dir|
      path = big_file(dir)
      with_files_server(dir) do |server, counters|
        client = conn(server, timeout: 30)
        client.write(get_request("/big.bin"))
        head = client.read_until("\r\n\r\n")
        assert_match(/content-length: #{BIG_SIZE}\r\n/i, head)
        # The client does not read: the socket buffers fill (a few MiB) and
        # the engine waits to send the rest, which is then cut off.
        sleep 0.5
        kept = 256 * 65_536
        File.truncate(path, kept)
        sink = digest_sink
        client.send(:read_to_close, sink)
        expected = Digest::SHA256.new
        Tsubame::HttpSupport.big_pieces.first(256).each { |piece| expected << piece }
        assert_equal [kept, expected.hexdigest], [sink.size, sink.digest.hexdigest]
        assert_equal [1, 0], counters.call
        assert_match(/file body ended before its length/, server.stderr)
        # The server goes on serving.
        assert_equal "hello", server.get("/hello").body
      end
    end
  end

  # The app's thread is done once the head and the open file are handed
  # over: with one thread, a client that does not read a large file does
  # not keep another client waiting.
  def test_the_app_thread_is_free_while_the_engine_sends_the_file
    in_tmpdir do |dir|
      big_file(dir)
      with_files_server(dir, args: %w[-t 1:1]) do |server, _counters|
        stalled = conn(server, timeout: 30)
        stalled.write(get_request("/big.bin"))
        assert_match(/\AHTTP\/1.1 200 OK/, stalled.read_until("\r\n\r\n"))
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        assert_equal "hello", server.get("/hello").body
        assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 5
        stalled.close
      end
    end
  end
end
