# frozen_string_literal: true

require "test_helper"
require "json"
require "socket"
require "tsubame/bench"

# `tsubame bench` against servers whose behaviour is known, over real
# sockets on 127.0.0.1. Each run is short (at most 3 s); the whole file
# takes about 12 s.
class BenchTest < Minitest::Test
  include Tsubame::TestHelpers

  # A keep-alive HTTP/1.1 server in Ruby threads. `status` gets the
  # request number (0, 1, 2, ... over all connections) and the request,
  # and returns the status, or :close to drop the connection unanswered.
  # `delay` is slept before each answer; `stall_at` makes that request
  # (and every request answered meanwhile) wait `stall` seconds, once.
  class ScriptedServer
    attr_reader :port, :requests, :connections, :accepted_at, :first_request_at

    def initialize(delay: 0, stall_at: nil, stall: 1.0, status: ->(_n, _request) { 200 })
      @delay = delay
      @stall_at = stall_at
      @stall = stall
      @status = status
      @server = TCPServer.new("127.0.0.1", 0)
      @port = @server.addr[1]
      @lock = Mutex.new
      @count = 0
      @connections = 0
      @accepted_at = []
      @first_request_at = nil
      @requests = []
      @stalled_until = nil
      @threads = []
      @acceptor = Thread.new { accept_loop }
    end

    def url(path = "/")
      "http://127.0.0.1:#{@port}#{path}"
    end

    def close
      @server.close
      @acceptor.kill
      @threads.each(&:kill)
    end

    private

    def accept_loop
      loop do
        client = @server.accept
        @lock.synchronize do
          @connections += 1
          @accepted_at << Process.clock_gettime(Process::CLOCK_MONOTONIC)
        end
        @threads << Thread.new(client) { |c| serve(c) }
      end
    rescue IOError, Errno::EBADF
      nil
    end

    def serve(client)
      while (request = read_request(client))
        n, stall_for = @lock.synchronize do
          @first_request_at ||= Process.clock_gettime(Process::CLOCK_MONOTONIC)
          @requests << request
          number = @count
          @count += 1
          if number == @stall_at
            @stalled_until = Time.now + @stall
            [number, @stall]
          else
            [number, @stalled_until ? @stalled_until - Time.now : 0]
          end
        end
        sleep(stall_for) if stall_for.positive?
        sleep(@delay) if @delay.positive?
        status = @status.call(n, request)
        break if status == :close

        client.write("HTTP/1.1 #{status} X\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")
      end
    rescue IOError, SystemCallError
      nil
    ensure
      client.close
    end

    # Returns { method:, path:, headers:, body: } or nil at EOF.
    def read_request(client)
      line = client.gets("\r\n")
      return nil if line.nil?

      method, path = line.split(" ", 3)
      headers = {}
      while (header = client.gets("\r\n")) && header != "\r\n"
        name, value = header.chomp("\r\n").split(":", 2)
        headers[name.downcase] = value.to_s.strip
      end
      length = headers["content-length"].to_i
      body = length.positive? ? client.read(length) : ""
      { method: method, path: path, headers: headers, body: body }
    end
  end

  def setup
    return if Tsubame::Bench.find

    flunk "the tsubame-bench binary is missing: run `make build`"
  end

  def with_scripted(**opts)
    server = ScriptedServer.new(**opts)
    yield server
  ensure
    server&.close
  end

  # Runs `tsubame bench ARGS` through exe/tsubame; returns [stdout, stderr, status].
  def bench(*args)
    run_tsubame("bench", *args)
  end

  # Runs with --json and returns the parsed report; the run must succeed
  # quietly (stderr is not a terminal, so no progress line).
  def bench_json(*args)
    stdout, stderr, status = bench(*args, "--json")
    assert_equal 0, status.exitstatus, stderr
    assert_empty stderr
    JSON.parse(stdout)
  end

  def assert_one_line_error(args, pattern)
    stdout, stderr, status = bench(*args)
    refute_equal 0, status.exitstatus
    assert_empty stdout
    assert_equal 1, stderr.lines.size, "expected one line: #{stderr.inspect}"
    assert_match(/\Atsubame bench: /, stderr)
    assert_match pattern, stderr
  end

  def test_fixed_delay_shows_in_percentiles
    with_scripted(delay: 0.02) do |server|
      report = bench_json("-c", "4", "-n", "100", server.url)
      latency = report.fetch("latency_ms")
      assert_equal 100, report["requests"]
      assert_equal({ "200" => 100 }, report["status_codes"])
      assert_equal 1.0, report["success_ratio"]
      # Each answer takes at least 20 ms; allow scheduling noise on top
      # (a loaded machine wakes the Ruby server's sleeps late), but not a
      # second delay's worth, which counting some wait twice would add.
      assert_operator latency["min"], :>=, 19.9
      assert_operator latency["p50"], :<, 32
      assert_operator latency["p99"], :<, 60
      # Keep-alive: one connection each, plus the check made before the run.
      assert_equal 4 + 1, server.connections
    end
  end

  def test_status_mix_counts_are_exact
    with_scripted(status: ->(n, _) { n % 4 == 3 ? 500 : 200 }) do |server|
      report = bench_json("-c", "5", "-n", "200", server.url)
      assert_equal({ "200" => 150, "500" => 50 }, report["status_codes"])
      assert_equal 200, report["requests"]
      assert_equal 150, report["success"]
      assert_equal 0.75, report["success_ratio"]
      assert_equal({}, report["errors"])
      assert_equal 200, server.requests.size
    end
  end

  def test_failure_rate_is_counted_by_kind
    with_scripted(status: ->(n, _) { n % 10 == 9 ? :close : 200 }) do |server|
      report = bench_json("-c", "2", "-n", "100", server.url)
      assert_equal({ "200" => 90 }, report["status_codes"])
      assert_equal({ "connection closed early" => 10 }, report["errors"])
      assert_equal 0.9, report["success_ratio"]
      assert_equal 100, server.requests.size, "failed requests are not retried"
    end
  end

  # The server stops answering for 1 s once, after about 1 s of the run.
  # Open loop (100 req/s): the ~100 requests due during the stall wait,
  # and their latency counts from when they were due, so the stall fills
  # the tail. Closed loop with one connection: the client waits with the
  # server, so only one request sees the stall among thousands.
  def test_open_loop_shows_a_stall_that_closed_loop_hides
    open_report = with_scripted(stall_at: 100) do |server|
      bench_json("--rate", "100", "-c", "4", "-d", "3s", server.url)
    end
    open = open_report["latency_ms"]
    assert_equal 300, open_report["requests"], "every due request was sent"
    assert_equal 0, open_report["unsent"]
    assert_operator open["max"], :>=, 950
    assert_operator open["p99"], :>=, 900
    assert_operator open["p90"], :>=, 500, "about a third of the requests waited for the stall"
    assert(open_report["timeline"].any? { |w| w["max_ms"] >= 900 }, "the stall shows in the timeline")

    closed_report = with_scripted(stall_at: 100) do |server|
      bench_json("-c", "1", "-d", "3s", server.url)
    end
    closed = closed_report["latency_ms"]
    assert_operator closed_report["requests"], :>=, 500, "a fast server answers many requests in 2 s"
    assert_operator closed["max"], :>=, 950, "the stalled request itself is seen"
    assert_operator closed["p99"], :<, 100, "but it is one sample among hundreds"
    assert_operator closed["p99"] * 9, :<, open["p99"]
  end

  def test_timeout_and_unreachable_errors
    with_scripted(delay: 1.0) do |server|
      report = bench_json("-c", "2", "-n", "2", "--timeout", "200ms", server.url)
      assert_equal({ "timeout" => 2 }, report["errors"])
      assert_equal({}, report["status_codes"])
      assert_nil report["latency_ms"]
      assert_operator report["duration_s"], :<, 0.9
    end
  end

  def test_no_keepalive_opens_a_connection_per_request
    with_scripted do |server|
      report = bench_json("-c", "2", "-n", "20", "--no-keepalive", server.url)
      assert_equal({ "200" => 20 }, report["status_codes"])
      assert_equal 20 + 1, server.connections, "one per request, plus the check made before the run"
      assert(server.requests.all? { |r| r[:headers]["connection"] == "close" })
    end
  end

  # The clock starts 20 ms after the last connection is open, so every
  # connection is accepted well before any request arrives; without
  # --preconnect each connection opens as it sends its first request.
  def test_preconnect_opens_every_connection_before_the_first_request
    with_scripted do |server|
      report = bench_json("-c", "4", "-n", "8", "--preconnect", server.url)
      assert_equal({ "200" => 8 }, report["status_codes"])
      assert report["preconnect"]
      assert_equal 4 + 1, server.connections, "the run's four, plus the check made before the run"
      gap = server.first_request_at - server.accepted_at.max
      assert_operator gap, :>=, 0.015, "first request #{(gap * 1000).round(1)} ms after the last accept"
    end
  end

  def test_method_headers_body_and_path
    with_scripted do |server|
      bench_json("-n", "3", "-c", "1", "-m", "PUT", "-H", "X-One: 1", "-H", "X-Two: two",
                 "--body", "payload", server.url("/things?id=7"))
      request = server.requests.first
      assert_equal ["PUT", "/things?id=7", "payload"], request.values_at(:method, :path, :body)
      assert_equal "1", request[:headers]["x-one"]
      assert_equal "two", request[:headers]["x-two"]
      assert_equal "127.0.0.1:#{server.port}", request[:headers]["host"]
    end
  end

  def test_targets_file_mixes_requests_by_weight
    with_scripted do |server|
      in_tmpdir do |dir|
        write_file(dir, "body.json", %({"name":"swift"}))
        targets = write_file(dir, "targets.txt", <<~TARGETS)
          # three reads for each write
          GET /items weight=3
          POST /items @body.json
            Content-Type: application/json
        TARGETS
        report = bench_json("-c", "2", "-n", "40", "--targets", targets, server.url)
        assert_equal 40, report["requests"]
        by_route = server.requests.group_by { |r| [r[:method], r[:path]] }.transform_values(&:size)
        assert_equal({ %w[GET /items] => 30, %w[POST /items] => 10 }, by_route)
        post = server.requests.find { |r| r[:method] == "POST" }
        assert_equal %({"name":"swift"}), post[:body]
        assert_equal "application/json", post[:headers]["content-type"]
      end
    end
  end

  def test_json_and_html_reports
    with_scripted(delay: 0.002) do |server|
      in_tmpdir do |dir|
        html_path = File.join(dir, "report.html")
        report = bench_json("-c", "2", "-d", "1s", "--html", html_path, server.url)
        %w[url mode requests duration_s rate throughput success_ratio status_codes errors latency_ms timeline].each do |key|
          assert report.key?(key), "JSON has #{key}"
        end
        assert_equal "closed", report["mode"]
        %w[min mean p50 p90 p95 p99 p99_9 max].each { |k| assert_kind_of Numeric, report["latency_ms"][k] }
        assert_operator report["timeline"].size, :>=, 5

        html = File.read(html_path)
        assert_match(/\A<!DOCTYPE html>/, html)
        assert_equal 3, html.scan("<svg").size
        assert_includes html, "Latency over time"
        assert_includes html, "Latency by percentile"
        refute_match(/<script[^>]+src=|<link[^>]+href=/, html, "self-contained")
        data = html[%r{<script type="application/json" id="bench-data">(.*?)</script>}m, 1]
        embedded = JSON.parse(data)
        assert_equal report["requests"], embedded["requests"]
        assert_equal report["timeline"].size, embedded["timeline"].size
        assert_operator embedded["distribution"].size, :>, 10
      end
    end
  end

  def test_text_report
    with_scripted(status: ->(n, _) { n.even? ? 200 : 404 }) do |server|
      stdout, stderr, status = bench("-c", "1", "-n", "10", server.url)
      assert_equal 0, status.exitstatus
      assert_empty stderr
      assert_match(/^Requests    10 /, stdout)
      assert_match(/^Success     50\.00% \(5 of 10 got 2xx\/3xx\)/, stdout)
      assert_match(/^Status      200: 5   404: 5$/, stdout)
      assert_match(/^Latency +min +mean +p50 +p90 +p95 +p99 +p99\.9 +max$/, stdout)
    end
  end

  def test_unix_socket_against_tsubame_with_the_benchmark_app
    app = File.join(Tsubame::TestHelpers::ROOT, "benchmarks", "apps", "bench_app.rb")
    with_server("require #{app.inspect}\nrun BenchApp.chunked\n", unix: true) do |server|
      report = bench_json("-c", "2", "-n", "50", "-H", "X-Body-KiB: 4", "unix://#{server.unix_path}/")
      assert_equal({ "200" => 50 }, report["status_codes"])
      assert_operator report["bytes_read"], :>=, 50 * 4 * 1024
      assert_operator report["bytes_read"], :<, 50 * 6 * 1024
    end
  end

  def test_bad_arguments_give_one_line
    # Reserved for this process and never listened on: refused.
    closed_port = free_port
    assert_one_line_error(["-n", "1", "http://127.0.0.1:#{closed_port}/"],
                          %r{cannot connect to http://127\.0\.0\.1:\d+/: connection refused})
    assert_one_line_error(["-d", "10x", "http://127.0.0.1:1/"], /invalid duration "10x"/)
    assert_one_line_error(["--frobnicate", "http://127.0.0.1:1/"], /unknown option --frobnicate/)
    assert_one_line_error([], /missing URL/)
    assert_one_line_error(["ftp://127.0.0.1/"], /invalid URL "ftp:/)
    assert_one_line_error(["unix:///nonexistent/bench.sock/"], /cannot connect to unix:.*no such file/)
    in_tmpdir do |dir|
      targets = write_file(dir, "targets.txt", "GET /\nFETCH\n")
      assert_one_line_error(["--targets", targets, "http://127.0.0.1:1/"],
                            /#{Regexp.escape(targets)}:2: expected "METHOD \/PATH/)
      targets = write_file(dir, "weights.txt", "GET / weight=-1\n")
      assert_one_line_error(["--targets", targets, "http://127.0.0.1:1/"], /weights\.txt:1: invalid weight "-1"/)
    end
  end

  def test_help_and_version
    stdout, _, status = bench("--help")
    assert_equal 0, status.exitstatus
    assert_match(/\AUsage: tsubame bench \[options\] URL/, stdout)
    %w[--connections --rate --duration --requests --threads --no-keepalive --timeout --method --header
       --body --body-file --targets --json --html --quiet].each { |flag| assert_includes stdout, flag }
    stdout, _, status = bench("--version")
    assert_equal 0, status.exitstatus
    assert_equal "tsubame bench #{Tsubame::VERSION}\n", stdout
  end
end
