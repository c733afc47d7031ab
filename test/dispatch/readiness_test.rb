# frozen_string_literal: true

require "test_helper"
require "cluster/support"
require "json"

# The readiness probe follows sustained saturation, not an instant's queue
# depth (docs/OVERLOAD.md, "Readiness"): it must not flap at light load,
# must fail soon under overload, and must come back once the load drops.
class ReadinessTest < Minitest::Test
  include Tsubame::ClusterHelpers

  APP = <<~RUBY
    run lambda { |env|
      sleep Float(env["QUERY_STRING"][/s=([\\d.]+)/, 1] || 0.02)
      [200, { "content-type" => "text/plain" }, ["done"]]
    }
  RUBY

  ARGS = %w[-t 2:2 --readiness-check-path /ready].freeze

  # [status, state] of one readiness check on a fresh connection.
  def ready(server)
    http = Net::HTTP.new("127.0.0.1", server.port)
    http.max_retries = 0
    http.read_timeout = 5
    response = http.request(Net::HTTP::Get.new("/ready"))
    [response.code.to_i, JSON.parse(response.body)["status"]]
  end

  def get(server, path)
    http = Net::HTTP.new("127.0.0.1", server.port)
    http.max_retries = 0
    http.read_timeout = 30
    http.request(Net::HTTP::Get.new(path)).code.to_i
  end

  # Polls readiness every 20 ms until it answers `status`; returns the
  # seconds that took, or fails after `timeout`.
  def seconds_until(server, status, timeout: 10)
    started = monotonic
    loop do
      return monotonic - started if ready(server).first == status
      flunk "readiness never answered #{status} within #{timeout}s" if monotonic - started > timeout

      sleep 0.02
    end
  end

  def wait_for_json(server, timeout: 5)
    deadline = monotonic + timeout
    until yield(JSON.parse(server.get("/ready").body))
      flunk "the server never reached the state expected" if monotonic > deadline
      sleep 0.02
    end
  end

  # Keeps `count` requests of `seconds` each in the server at all times
  # (more than its threads: the queue grows) until readiness fails, then
  # stops the load and waits until readiness recovers. Returns the seconds
  # each took.
  def saturate_then_recover(server, count, seconds)
    stop = false
    threads = Array.new(count) { Thread.new { get(server, "/?s=#{seconds}") until stop } }
    became_busy = seconds_until(server, 503)
    stop = true
    threads.each(&:join)
    [became_busy, seconds_until(server, 200)]
  end

  def test_light_load_never_fails_readiness
    with_server(APP, args: ARGS) do |s|
      # 20 ms requests, two clients each pausing 30 ms between requests:
      # about a third of capacity, and requests do queue for an instant
      # (the old rule failed ~10% of checks at this load).
      stop = false
      clients = Array.new(2) { Thread.new { (get(s, "/") && sleep(0.03)) until stop } }
      answers = Array.new(300) { ready(s).tap { sleep 0.005 } }
      stop = true
      clients.each(&:join)
      assert_equal({ [200, "ready"] => 300 }, answers.tally)
      assert_operator JSON.parse(s.get("/ready").body)["requests_total"], :>, 50, "the load really ran"
    end
  end

  def test_saturation_fails_readiness_within_a_second_and_it_recovers_after_the_hold
    with_server(APP, args: ARGS) do |s|
      assert_equal [200, "ready"], ready(s)
      became_busy, recovered = saturate_then_recover(s, 6, 0.2)
      assert_operator became_busy, :<, 1.0, "busy within a second of saturation"
      assert_operator recovered, :<, 2.0, "ready within 2 s of the load ending"
    end
  end

  def test_the_threshold_counts_how_many_wait_and_the_limits_are_configurable
    args = ARGS + %w[--readiness-queue-wait 0.1 --readiness-hold 0.2]
    config = "readiness_queue_threshold 2\n"
    in_tmpdir do |dir|
      path = write_file(dir, "tsubame.rb", config)
      with_server(APP, args: args + ["-C", path]) do |s|
        running = Array.new(2) { Thread.new { get(s, "/?s=3") } }
        wait_for_json(s) { |json| json["busy_threads"] == 2 }
        queued = Array.new(2) { Thread.new { get(s, "/?s=0.01") } }
        wait_for_json(s) { |json| json["queue_depth"] == 2 }
        sleep 0.3 # both have waited well past readiness_queue_wait
        assert_equal [200, "ready"], ready(s), "two waiting is not more than the threshold"
        queued << Thread.new { get(s, "/?s=0.01") }
        assert_operator seconds_until(s, 503), :<, 1.0
        (running + queued).each(&:join)
        assert_operator seconds_until(s, 200), :<, 1.0, "a 0.2 s hold"
      end
    end
  end

  def test_fiber_requests_waiting_for_a_busy_fiber_loop_fail_readiness_too
    app = <<~RUBY
      run lambda { |env|
        # Burns the fiber loop's thread: fibers queue behind it.
        finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.3
        nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
        [200, {}, ["spun"]]
      }
    RUBY
    with_server(app, args: %w[--fibers --readiness-check-path /ready]) do |s|
      became_busy, recovered = saturate_then_recover(s, 4, 0)
      assert_operator became_busy, :<, 1.5
      assert_operator recovered, :<, 3.0
    end
  end

  def test_a_saturated_cluster_fails_readiness_and_recovers
    with_cluster(APP, workers: 2, args: ARGS) do |s|
      assert_equal [200, "ready"], ready(s)
      became_busy, recovered = saturate_then_recover(s, 12, 0.2)
      assert_operator became_busy, :<, 1.5
      assert_operator recovered, :<, 3.0
    end
  end
end
