# frozen_string_literal: true

require "observe/support"

# /metrics in single mode: what the engine counted equals what the test
# sent, the exposition passes promtool, the token rules, metrics_url.
class MetricsTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::ObserveHelpers

  APP = <<~'RUBY'
    run lambda { |env|
      case env["PATH_INFO"]
      when "/missing" then [404, { "content-type" => "text/plain" }, ["nope"]]
      when "/create" then [201, { "content-type" => "text/plain" }, ["made #{env["rack.input"].read.bytesize}"]]
      when "/slow"
        sleep 6
        [200, { "content-type" => "text/plain" }, ["late"]]
      else [200, { "content-type" => "text/plain" }, ["hello"]]
      end
    }
  RUBY

  def start(args = [])
    control = free_port
    server = Tsubame::TestServer.new(APP, args: ["--control-url", "tcp://127.0.0.1:#{control}",
                                                 "--control-token", TOKEN, *args])
    [server, control]
  end

  def test_counters_equal_what_was_sent_and_promtool_accepts_them
    server, control = start(%w[--health-check-path /up --readiness-check-path /ready --request-timeout 3])
    port = server.port
    5.times { assert_equal "200", request(port, "GET", "/").code }
    3.times { assert_equal "404", request(port, "GET", "/missing").code }
    2.times { assert_equal "201", request(port, "POST", "/create", body: "x" * 10).code }
    assert_equal "200", request(port, "HEAD", "/").code
    # Shed: the engine answers 503 at the request timeout.
    2.times { assert_equal "503", request(port, "GET", "/slow").code }
    2.times { assert_equal "200", request(port, "GET", "/up").code }
    assert_equal "200", request(port, "GET", "/ready").code

    # A request is counted once its last byte is written, which may be
    # just after the client read it.
    text = wait_until(timeout: 10) do
      t = scrape(control)
      total(t, "tsubame_http_requests_total") >= 13 ? t : nil
    end
    refute_nil text, "13 requests never counted:\n#{scrape(control)}"
    ok, out = promtool_check(text)
    assert ok, "promtool check metrics:\n#{out}\n#{text}"

    count = ->(code, method) { sample(text, "tsubame_http_requests_total", code: code, method: method, protocol: "1.1") }
    assert_equal 5, count.call("2xx", "GET")
    assert_equal 3, count.call("4xx", "GET")
    assert_equal 2, count.call("2xx", "POST")
    assert_equal 1, count.call("2xx", "HEAD")
    assert_equal 2, count.call("5xx", "GET")
    assert_equal 13, total(text, "tsubame_http_requests_total")
    assert_equal 2, sample(text, "tsubame_requests_shed_total", reason: "request_timeout")
    assert_equal 0, sample(text, "tsubame_requests_shed_total", reason: "queue_full")
    # Every request has a duration; all of them waited in the queue; only
    # those the app answered have an app time.
    assert_equal 13, sample(text, "tsubame_http_request_duration_seconds_count")
    assert_equal 13, sample(text, "tsubame_http_request_queue_wait_seconds_count")
    assert_equal 11, sample(text, "tsubame_http_request_app_seconds_count")
    assert_equal 13, sample(text, "tsubame_http_request_duration_seconds_bucket", le: "+Inf")
    # The two shed requests took at least the 3 s timeout (the request
    # timeout is generous: a loaded machine must not shed the others).
    assert_operator sample(text, "tsubame_http_request_duration_seconds_bucket", le: "2.5"), :<=, 11
    assert_operator sample(text, "tsubame_http_request_duration_seconds_sum"), :>=, 6.0
    assert_equal 20, sample(text, "tsubame_http_request_body_bytes_total")
    # hello x5, nope x3, "made 10" x2: the app's bodies (HEAD sends none;
    # the engine's own 503 bodies are not counted).
    assert_equal 25 + 12 + 14, sample(text, "tsubame_http_response_body_bytes_total")
    assert_equal 2, sample(text, "tsubame_probes_total", probe: "liveness", result: "ok")
    assert_equal 1, sample(text, "tsubame_probes_total", probe: "readiness", result: "ready")
    assert_equal 5, sample(text, "tsubame_threads_max")
    assert_operator sample(text, "tsubame_process_resident_memory_bytes"), :>, 1_000_000
    assert_operator sample(text, "tsubame_ruby_heap_live_slots"), :>, 1000
    refute_match(/worker=/, text, "single mode has no worker label")
  ensure
    server&.kill
  end

  def test_token_rules_and_bearer_and_metrics_url
    metrics_port = free_port
    server, control = start(["--metrics-url", "tcp://127.0.0.1:#{metrics_port}"])
    status, = control_get(control, "/metrics")
    assert_equal 403, status
    status, = control_get(control, "/metrics?token=wrong")
    assert_equal 403, status
    status, _, body = control_get(control, "/metrics", "Authorization" => "Bearer #{TOKEN}")
    assert_equal 200, status
    assert_match(/^tsubame_threads_max 5$/, body)
    # Its own bind: no token, and nothing but /metrics.
    request(server.port, "GET", "/")
    text = wait_until(timeout: 10) do
      _, _, t = control_get(metrics_port, "/metrics")
      total(t, "tsubame_http_requests_total") >= 1 ? t : nil
    end
    refute_nil text
    assert_equal 1, total(text, "tsubame_http_requests_total")
    status, = control_get(metrics_port, "/stats")
    assert_equal 404, status
    status, = control_get(metrics_port, "/stop")
    assert_equal 404, status
    assert_match(/\* Metrics on tcp:\/\/127\.0\.0\.1:#{metrics_port} \(no token required\)/, server.stdout)
    # tsubame ctl metrics prints the same text.
    out, err, status = run_tsubame("ctl", "--control-url", "tcp://127.0.0.1:#{control}", "--control-token", TOKEN,
                                   "metrics")
    assert status.success?, err
    assert_match(/^tsubame_http_requests_total\{code="2xx",method="GET",protocol="1\.1"\} 1$/, out)
    _, err, status = run_tsubame("ctl", "--control-url", "tcp://127.0.0.1:#{control}", "--control-token", "bad",
                                 "metrics")
    assert_equal 1, status.exitstatus
    assert_match(/tsubame ctl: metrics: invalid token \(HTTP 403\)/, err)
  ensure
    server&.kill
  end

  # README: without --control-token a random token is made, printed at boot
  # and written to the state file; the control app takes it and no other.
  def test_a_control_app_without_a_token_makes_one_and_takes_only_it
    control = free_port
    Dir.mktmpdir do |dir|
      state = File.join(dir, "state.yml")
      server = Tsubame::TestServer.new(APP, args: ["--control-url", "tcp://127.0.0.1:#{control}", "-S", state])
      token = server.stdout[/token \(generated\): (\h+)$/, 1]
      assert_match(/\A\h{32}\z/, token.to_s, server.stdout)
      wait_for_file(state)
      assert_includes File.read(state), token
      assert_includes scrape(control, token: token), "tsubame_queue_depth 0"
      status, = control_get(control, "/metrics?token=#{token.reverse}")
      assert_equal 403, status
    ensure
      server&.kill
    end
  end

  def test_http2_requests_are_counted_under_their_protocol_and_carry_the_id
    server, control = start(%w[--h2c --request-id])
    out, err, status = Open3.capture3("nghttp", "-v", "-H", "x-request-id: h2-id-7",
                                      "http://127.0.0.1:#{server.port}/missing")
    assert status.success?, err
    assert_match(/:status: 404/, out)
    assert_match(/x-request-id: h2-id-7/, out)
    text = wait_until(timeout: 10) do
      t = scrape(control)
      total(t, "tsubame_http_requests_total") >= 1 ? t : nil
    end
    refute_nil text
    assert_equal 1, sample(text, "tsubame_http_requests_total", code: "4xx", method: "GET", protocol: "2")
    assert_equal 1, total(text, "tsubame_http_requests_total")
  ensure
    server&.kill
  end

  # A connection the app takes over (rack.hijack) or upgrades is counted
  # when the engine hands it over: as a 1xx, with no body.
  def test_a_hijacked_request_is_counted_once
    app = <<~'RUBY'
      run lambda { |env|
        io = env["rack.hijack"].call
        io.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi")
        io.close
        [200, {}, []]
      }
    RUBY
    control = free_port
    server = Tsubame::TestServer.new(app, args: ["--control-url", "tcp://127.0.0.1:#{control}", "--control-token", TOKEN])
    assert_equal "hi", request(server.port, "GET", "/").body
    text = wait_until(timeout: 10) do
      t = scrape(control)
      total(t, "tsubame_http_requests_total") >= 1 ? t : nil
    end
    refute_nil text
    assert_equal 1, sample(text, "tsubame_http_requests_total", code: "1xx", method: "GET", protocol: "1.1")
    assert_equal 1, total(text, "tsubame_http_requests_total")
  ensure
    server&.kill
  end

  def test_no_metrics_leaves_out_the_per_request_series
    server, control = start(%w[--no-metrics])
    request(server.port, "GET", "/")
    sleep 0.2
    text = scrape(control)
    refute_match(/tsubame_http_requests_total/, text)
    refute_match(/tsubame_http_request_duration_seconds/, text)
    # What the engine always counted is still there.
    assert_match(/^tsubame_connections_accepted_total 1$/, text)
    ok, out = promtool_check(text)
    assert ok, out
  ensure
    server&.kill
  end
end
