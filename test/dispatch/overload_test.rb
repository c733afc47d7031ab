# frozen_string_literal: true

require "test_helper"
require "json"

# Scenario 1 of shared/USER-SCENARIOS.md and the rest of the overload
# protections, over real sockets against exe/tsubame.
class OverloadTest < Minitest::Test
  include Tsubame::TestHelpers

  APP = <<~RUBY
    run lambda { |env|
      case env["PATH_INFO"]
      when "/slow" then sleep Float(env["QUERY_STRING"][/s=([\\d.]+)/, 1] || 60); [200, {}, ["slow"]]
      when "/extended"
        request = env["tsubame.request"]
        request.deadline = 5
        sleep 2
        left = request.deadline
        env["rack.after_reply"] << -> { warn "deadline after the reply: \#{request.deadline.inspect}" }
        [200, {}, ["extended \#{left.round}"]]
      when "/stubborn"
        begin
          sleep 3
        rescue Exception # swallows Tsubame::RequestTimeout, as badly written code can
          sleep 2
        end
        [200, {}, ["too late"]]
      when "/upload" then [200, {}, [env["rack.input"].read.bytesize.to_s]]
      else [200, { "content-type" => "text/plain" }, ["fast"]]
      end
    }
  RUBY

  # Sends GET path on a fresh connection; returns [status, seconds, body]
  # or [:timeout, seconds, nil] when the client gives up first.
  def timed_get(server, path, client_timeout: 3, headers: {})
    started = now
    http = Net::HTTP.new("127.0.0.1", server.port)
    http.read_timeout = client_timeout
    http.open_timeout = client_timeout
    # Net::HTTP silently retries an idempotent request once after a read
    # timeout; a client that gives up must give up once.
    http.max_retries = 0
    response = http.request(Net::HTTP::Get.new(path, headers))
    [response.code.to_i, now - started, response.body, response]
  rescue Net::ReadTimeout, Net::OpenTimeout
    [:timeout, now - started, nil, nil]
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Reads one content-length response from a keep-alive socket: [head, body].
  def read_response(sock, timeout: 5)
    data = +""
    head_end = nil
    Timeout.timeout(timeout) do
      data << sock.readpartial(65_536) until (head_end = data.index("\r\n\r\n"))
      length = data[/^content-length: (\d+)/i, 1].to_i
      data << sock.readpartial(65_536) while data.bytesize < head_end + 4 + length
    end
    [data[0, head_end], data[head_end + 4..]]
  end

  def in_parallel(count, &block)
    Array.new(count) { |i| Thread.new { block.call(i) } }.map(&:value)
  end

  def health(server, path = "/up")
    JSON.parse(timed_get(server, path)[2])
  end

  # Polls the liveness JSON until the block accepts it, so a test starts
  # its measurement only once the server is really in the state it needs.
  def wait_for_state(server, timeout: 5)
    deadline = now + timeout
    until yield(health(server))
      flunk "server never reached the expected state: #{health(server)}" if now > deadline
      sleep 0.02
    end
  end

  def test_scenario_one_with_a_request_timeout_frees_clients_and_threads
    with_server(APP, args: %w[-t 5:5 --request-timeout 2 --health-check-path /up]) do |s|
      results = in_parallel(10) { timed_get(s, "/slow") }
      results.each do |status, seconds, body|
        assert_equal 503, status, "every client gets a 503, not a client timeout"
        assert_in_delta 2.0, seconds, 0.7
        assert_includes body, "did not answer in time"
      end
      status, seconds, body = timed_get(s, "/fast")
      assert_equal [200, "fast"], [status, body]
      assert_operator seconds, :<, 1.5, "threads were freed by the timeout"
      assert_equal 10, health(s)["timed_out"] + health(s)["shed"]["queue_timeout"]
      logged = s.stderr.scan(/503 request_timeout #\d+ GET \/slow from 127\.0\.0\.1/).size
      assert_equal 10, logged, "every timed-out request is named in the log"
      assert_match(/Tsubame::RequestTimeout/, s.stderr, "the running threads were told")
    end
  end

  def test_scenario_one_with_a_queue_timeout_answers_the_queued_requests
    with_server(APP, args: %w[-t 5:5 --queue-timeout 1]) do |s|
      results = in_parallel(10) { timed_get(s, "/slow?s=4", client_timeout: 3) }
      shed = results.select { |status, _| status == 503 }
      assert_equal 5, shed.size, results.inspect
      shed.each { |_, seconds| assert_in_delta 1.0, seconds, 0.6 }
      assert_equal 5, results.count { |status, _| status == :timeout }, "the five running ones are still running"
      assert_equal 5, s.stderr.scan(/503 queue_timeout #\d+ GET \/slow/).size
    end
  end

  # queue_timeout counts from when a request is whole: an upload that took
  # longer than it to arrive, then waited less than it for the busy
  # thread, is served.
  def test_a_slow_upload_waits_its_queue_timeout_from_its_last_byte
    with_server(APP, args: %w[-t 1:1 --queue-timeout 1]) do |s|
      upload = s.socket
      upload.write("POST /upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 8\r\n\r\nabcd")
      sleep 1.0
      # The one thread is busy until about 0.5 s after the upload is whole.
      busy = Thread.new { timed_get(s, "/slow?s=0.8", client_timeout: 5) }
      sleep 0.3
      upload.write("efgh")
      response, = read_until_close(upload, 5)
      assert_match(%r{\AHTTP/1.1 200}, response, "#{response}\n#{s.stderr}")
      assert_match(/\r\n\r\n(1\r\n)?8(\r\n0\r\n\r\n)?\z/, response, "the app read all 8 bytes")
      assert_equal 200, busy.value[0]
    ensure
      upload&.close
    end
  end

  def test_a_thread_that_ignores_its_timeout_is_reported_stuck
    Dir.mktmpdir do |dir|
      config = File.join(dir, "tsubame.rb")
      File.write(config, "request_timeout 1\nrequest_timeout_grace 1\nhealth_check_path '/up'\n")
      with_server(APP, args: ["-C", config, "-t", "2:2"]) do |s|
        status, seconds, = timed_get(s, "/stubborn", client_timeout: 5)
        assert_equal 503, status
        assert_in_delta 1.0, seconds, 0.5
        assert_equal 0, health(s)["stuck_threads"], "still inside its grace period"
        wait_for_state(s) { |h| h["stuck_threads"] == 1 }
        assert_match(/tsubame-\d is still running request #\d+ 1\.0s after its timeout: thread stuck/, s.stderr)
        assert_equal 200, timed_get(s, "/fast")[0], "the other thread still serves"
      end
    end
  end

  def test_a_deadline_moved_by_the_app_is_honoured
    with_server(APP, args: %w[-t 2:2 --request-timeout 1]) do |s|
      status, seconds, body = timed_get(s, "/extended", client_timeout: 6)
      assert_equal [200, "extended 3"], [status, body], "about 3 of its 5 seconds left after 2"
      assert_operator seconds, :>=, 1.9
      # Once answered the request has no deadline left.
      assert wait_until { s.stderr.include?("deadline after the reply: nil") }, s.stderr
    end
  end

  def test_health_never_waits_for_an_app_thread_and_readiness_says_busy
    args = %w[-t 2:2 --health-check-path /up --readiness-check-path /ready]
    with_server(APP, args: args) do |s|
      sleepers = Array.new(4) { Thread.new { timed_get(s, "/slow?s=4", client_timeout: 6) } }
      wait_for_state(s) { |h| h["queue_depth"] == 2 }
      slowest = Array.new(200) { timed_get(s, "/up") }.map do |status, seconds, body|
        assert_equal 200, status
        assert_equal "ok", JSON.parse(body)["status"]
        seconds
      end.max
      assert_operator slowest, :<, 1.0, "liveness never queues behind the app (its threads sleep 4 s)"
      # Busy once a request has waited readiness_queue_wait (0.25 s).
      deadline = now + 3
      sleep 0.02 until (ready = timed_get(s, "/ready"))[0] == 503 || now > deadline
      status, _, body, response = ready
      assert_equal 503, status
      json = JSON.parse(body)
      assert_equal "busy", json["status"]
      assert_equal [2, 2, 2], [json["busy_threads"], json["max_threads"], json["queue_depth"]]
      assert_equal "1", response["retry-after"]
      sleepers.each(&:join)
      assert_equal 200, timed_get(s, "/ready")[0], "ready again once the queue is empty"
    end
  end

  def test_nothing_is_lost_in_a_burst_against_a_saturated_server
    args = %w[-t 2:2 --max-queue 10 --queue-timeout 1 --health-check-path /up]
    with_server(APP, args: args) do |s|
      n = 120
      results = in_parallel(n) { timed_get(s, "/slow?s=0.2", client_timeout: 10) }
      ok = results.count { |status, _| status == 200 }
      shed = results.count { |status, _| status == 503 }
      assert_equal n, ok + shed, "every request got an answer: #{results.map(&:first).tally}"
      assert_operator shed, :>, 0
      stats = health(s)
      assert_equal shed, stats["shed"]["queue_full"] + stats["shed"]["queue_timeout"]
      assert_equal n, stats["requests_total"] - 0, "probes are not counted as requests"
      assert_equal shed, s.stderr.scan(/^\[tsubame\].* 503 queue_(full|timeout)/).size, "each 503 logged once"
    end
  end

  def test_queue_full_answers_json_when_asked_and_keeps_the_connection
    # Reads an Array body's bytes as they are; Rack 2's Lint hides it (sent chunked).
    with_server(APP, args: %w[-t 1:1 --max-queue 1 --health-check-path /up], lint: LINT_FORWARDS_BODY) do |s|
      # One at a time: a request counts against max_queue until a thread
      # has taken it, so two sent together could refuse each other.
      busy = [Thread.new { timed_get(s, "/slow?s=1.5", client_timeout: 5) }]
      wait_for_state(s) { |h| h["busy_threads"] == 1 && h["queue_depth"].zero? }
      busy << Thread.new { timed_get(s, "/slow?s=1.5", client_timeout: 5) }
      wait_for_state(s) { |h| h["queue_depth"] == 1 }
      sock = s.socket
      started = now
      sock.write("GET /fast HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n")
      head, body = read_response(sock)
      assert_operator now - started, :<, 1.0, "refused at once, not after waiting 1.5 s for a thread"
      assert_match(%r{\AHTTP/1\.1 503 Service Unavailable\r\n}, head)
      assert_includes head, "retry-after: 1"
      refute_includes head, "connection: close", "the request was read whole: the connection stays"
      assert_equal({ "error" => "service_unavailable", "reason" => "queue_full",
                     "detail" => "too many requests are waiting for the application" }, JSON.parse(body))
      assert_equal [200, 200], busy.map { |t| t.value[0] }
      sock.write("GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "fast", read_response(sock)[1]
      sock.close
    end
  end

  def test_connections_past_the_cap_get_503_and_are_closed
    with_server(APP, args: %w[--max-connections 3 --health-check-path /up]) do |s|
      held = Array.new(2) { s.socket }
      held << s.socket.tap { |probe| probe.write("GET /up HTTP/1.1\r\nHost: x\r\n\r\n") }
      s.read_all(held.last, 0.3)
      answer = s.raw("GET /fast HTTP/1.1\r\nHost: x\r\n\r\n", timeout: 3)
      assert_match(%r{\AHTTP/1\.1 503 Service Unavailable\r\n}, answer)
      assert_includes answer, "connection: close"
      assert_includes answer, "too many open connections"
      held.each(&:close)
      sleep 0.2
      assert_equal 200, timed_get(s, "/fast")[0]
    end
  end

  def test_concurrent_spooled_uploads_are_capped
    Dir.mktmpdir do |dir|
      config = File.join(dir, "tsubame.rb")
      File.write(config, "spool_threshold 1024\nmax_spooled_uploads 1\nupload_memory 0\n")
      # Reads an Array body's bytes as they are; Rack 2's Lint hides it (sent chunked).
      with_server(APP, args: ["-C", config], lint: LINT_FORWARDS_BODY) do |s|
        first = s.socket
        first.write("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + ("a" * 4096))
        sleep 0.3
        second = s.raw("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + ("b" * 4096), timeout: 3)
        assert_match(%r{\AHTTP/1\.1 503 }, second)
        assert_includes second, "too many uploads in progress"
        first.write("a" * (100_000 - 4096))
        reply = s.read_all(first, 3)
        assert_match(/\r\n\r\n100000\z/, reply)
        first.close
      end
    end
  end

  def test_slow_clients_do_not_hurt_normal_requests
    with_server(APP, args: %w[-t 2:2]) do |s|
      p99 = lambda do
        times = Array.new(200) { timed_get(s, "/fast")[1] }.sort
        times[(times.size * 0.99).ceil - 1]
      end
      baseline = p99.call
      dribblers = Array.new(500) do
        sock = s.socket
        sock.write("GET / HTTP/1.1\r\n")
        sock
      end
      feeder = Thread.new do
        3.times do
          dribblers.each { |sock| sock.write("X") rescue nil } # rubocop:disable Style/RescueModifier
          sleep 1
        end
      end
      loaded = p99.call
      feeder.join
      dribblers.each(&:close)
      assert_operator loaded, :<, [baseline * 2, baseline + 0.02].max,
                      "p99 #{(loaded * 1000).round(2)} ms vs #{(baseline * 1000).round(2)} ms without dribblers"
    end
  end
end
