# frozen_string_literal: true

require "test_helper"
require "cluster/support"
require "http1/support"
require "json"

# Drains a client or proxy can follow (docs/SIGNALS.md): a response written
# after a stop begins says `connection: close`, HTTP/2 gets GOAWAY before
# its streams finish, idle keep-alive connections close at once; and the
# lame-duck period of shutdown_delay.
class DrainTest < Minitest::Test
  include Tsubame::ClusterHelpers
  include Tsubame::HttpSupport

  # /slow?S writes its pid to $MARK, then sleeps S seconds.
  APP = <<~RUBY
    run lambda { |env|
      if env["PATH_INFO"] == "/slow"
        File.write(ENV["MARK"], Process.pid.to_s) if ENV["MARK"]
        sleep Float(env["QUERY_STRING"])
      end
      [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
    }
  RUBY

  def setup
    @dir = Dir.mktmpdir("tsubame-drain")
    @mark = File.join(@dir, "mark")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  # Sends GET /slow?seconds on a keep-alive connection and returns the
  # connection and the pid of the process running it, once it runs.
  def in_flight(server, seconds)
    File.delete(@mark) if File.exist?(@mark)
    c = conn(server, timeout: 20)
    c.write("GET /slow?#{seconds} HTTP/1.1\r\nHost: x\r\n\r\n")
    Timeout.timeout(10) { sleep 0.01 until File.exist?(@mark) && !File.read(@mark).empty? }
    [c, File.read(@mark).to_i]
  end

  def assert_closing_response(connection, what)
    response = connection.read_response
    assert_equal 200, response.status, what
    assert_equal "close", response["connection"], "#{what}: the response says the connection closes"
    assert_equal :eof, connection.wait_close(5), "#{what}: and then closes"
  ensure
    connection.close
  end

  def test_term_single_mode_closes_idle_connections_soon_and_in_flight_responses_say_close
    with_server(APP, env: { "MARK" => @mark }) do |s|
      idle = conn(s)
      idle.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_nil idle.read_response["connection"], "kept alive before the stop"
      pooled = conn(s)
      pooled.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      pooled.read_response
      busy, = in_flight(s, 1.5)
      started = monotonic
      s.signal("TERM")
      # A proxy may send on a pooled connection just as the stop begins:
      # that request is served, and the connection then closes.
      sleep 0.05
      pooled.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_closing_response(pooled, "a request on an idle connection just after TERM")
      assert_equal :eof, idle.wait_close(1)
      assert_operator monotonic - started, :<, 1.2,
                      "an idle keep-alive connection is closed after IDLE_GRACE (0.25 s), not at the end of the 1.5 s drain"
      assert_closing_response(busy, "TERM")
    end
  end

  def test_usr2_single_mode_in_flight_response_says_close
    with_server(APP, env: { "MARK" => @mark }) do |s|
      busy, = in_flight(s, 2)
      s.signal("USR2")
      assert_closing_response(busy, "USR2")
    end
  end

  def test_phased_restart_and_a_single_worker_stop_say_close
    with_cluster(APP, workers: 2, env: { "MARK" => @mark }) do |s|
      busy, = in_flight(s, 2)
      s.signal("USR1")
      assert_closing_response(busy, "USR1 phased restart")
      s.wait_for_workers(2, phase: 1)
      busy, pid = in_flight(s, 1.5)
      Process.kill("TERM", pid)
      assert_closing_response(busy, "one worker's TERM")
    end
  end

  # HTTP/2 frames over h2c with prior knowledge, by hand: the client must
  # see GOAWAY (with the real last stream id, after the PING the server
  # uses to settle it) before the response of its open stream.
  def assert_goaway_before_the_response(server, what)
    sock = server.socket
    sock.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    sock.write(frame(4, 0, 0, ""))
    # :method GET, :scheme http from the static table; :path and
    # :authority literal with indexed names; END_STREAM | END_HEADERS.
    path = "/slow?1.5"
    block = [0x82, 0x86, 0x44, path.bytesize].pack("C*") + path + [0x41, 1].pack("C*") + "x"
    File.delete(@mark) if File.exist?(@mark)
    sock.write(frame(1, 0x5, 1, block))
    Timeout.timeout(10) { sleep 0.01 until File.exist?(@mark) && !File.read(@mark).empty? }
    yield File.read(@mark).to_i
    seen = []
    Timeout.timeout(10) do
      loop do
        type, flags, stream, payload = read_frame(sock)
        break unless type

        case type
        when 6 then sock.write(frame(6, 0x1, 0, payload)) if flags.nobits?(0x1) # PING: ack
        when 4 then sock.write(frame(4, 0x1, 0, "")) if flags.nobits?(0x1) # SETTINGS: ack
        when 7 then seen << [:goaway, payload.unpack1("N") & 0x7fff_ffff]
        when 1 then seen << [:headers, stream]
        when 0 then seen << [:data, stream, flags.anybits?(0x1)]
        end
      end
    end
    final_goaway = seen.index([:goaway, 1])
    refute_nil final_goaway, "#{what}: a GOAWAY naming stream 1 as the last: #{seen}"
    assert_operator final_goaway, :<, seen.index([:headers, 1]), "#{what}: GOAWAY before the response: #{seen}"
    assert_includes seen, [:data, 1, true], "#{what}: and the stream finished: #{seen}"
  ensure
    sock&.close
  end

  def test_http2_gets_goaway_with_the_last_stream_id_before_its_stream_finishes
    with_server(APP, args: %w[--h2c], env: { "MARK" => @mark }) do |s|
      assert_goaway_before_the_response(s, "TERM") { s.signal("TERM") }
    end
    with_server(APP, args: %w[--h2c], env: { "MARK" => @mark }) do |s|
      assert_goaway_before_the_response(s, "USR2") { s.signal("USR2") }
    end
  end

  def test_http2_goaway_in_a_phased_restart_and_a_single_worker_stop
    with_cluster(APP, workers: 2, args: %w[--h2c], env: { "MARK" => @mark }) do |s|
      assert_goaway_before_the_response(s, "USR1") { s.signal("USR1") }
      s.wait_for_workers(2, phase: 1)
      assert_goaway_before_the_response(s, "one worker's TERM") { |pid| Process.kill("TERM", pid) }
    end
  end

  def frame(type, flags, stream, payload)
    [payload.bytesize >> 16, payload.bytesize & 0xffff, type, flags, stream].pack("CnCCN") + payload.b
  end

  def read_frame(sock)
    head = sock.read(9)
    return nil if head.nil? || head.bytesize < 9

    high, low, type, flags, stream = head.unpack("CnCCN")
    length = (high << 16) | low
    [type, flags, stream & 0x7fff_ffff, length.zero? ? "".b : sock.read(length)]
  end

  # A client that opens a new connection every 10 ms and never retries.
  def steady_client(port, stop)
    Thread.new do
      results = []
      until stop.call
        begin
          http = Net::HTTP.new("127.0.0.1", port)
          http.max_retries = 0
          http.open_timeout = 2
          http.read_timeout = 5
          response = http.start { |h| h.get("/") }
          results << [response.code, response["connection"]]
        rescue StandardError => e
          results << [e.class.name, nil]
        end
        sleep 0.01
      end
      results
    end
  end

  def lame_duck_run(server)
    stopped_at = nil
    client = steady_client(server.port, -> { stopped_at && monotonic > stopped_at + 1.5 })
    sleep 0.3
    server.signal("TERM")
    stopped_at = monotonic
    sleep 0.1
    ready = server.get("/ready")
    assert_equal ["503", "draining"], [ready.code, JSON.parse(ready.body)["status"]], "readiness fails at once"
    results = client.value
    assert_operator results.size, :>, 80, "the client really ran through the delay"
    assert_equal({ "200" => results.size }, results.map(&:first).tally, "no refused connection, no error")
    assert_includes results.map(&:last), "close", "responses during the delay close their connections"
    Timeout.timeout(15) { Process.wait(server.pid) }
    assert_operator monotonic - stopped_at, :>=, 2.0, "the process served for the whole delay"
  end

  def test_shutdown_delay_single_mode_keeps_serving_new_connections_with_readiness_failing
    server = Tsubame::TestServer.new(APP, args: %w[--shutdown-delay 2 --readiness-check-path /ready])
    lame_duck_run(server)
    assert_includes server.stdout, "Shutdown delay: readiness fails now; serving 2.0s more"
  ensure
    server&.kill
  end

  def test_shutdown_delay_cluster_mode
    server = Tsubame::ClusterServer.new(APP, workers: 2, args: %w[--shutdown-delay 2 --readiness-check-path /ready])
    lame_duck_run(server)
  ensure
    server&.kill
  end
end
