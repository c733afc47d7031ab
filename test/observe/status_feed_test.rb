# frozen_string_literal: true

require "test_helper"
require "tsubame/control/status_feed"

# The status page's numbers from a scripted series of samples: a rate per
# second, the minute's percentiles from the histogram, and a worker that
# was replaced (a new pid, counters from zero) adding what it served
# rather than pulling the totals down.
class StatusFeedTest < Minitest::Test
  def sample(pid, index, requests, buckets)
    { "pid" => pid, "index" => index, "threads_busy" => 1, "threads_max" => 5,
      "stats" => { "shed_total" => 0, "backlog" => 0, "connections_active" => 2, "shed" => {} },
      "engine" => { "requests" => [["2xx", "GET", "1.1", requests]], "bounds" => [0.001, 0.01, 0.1],
                    "total" => { "buckets" => buckets } } }
  end

  def test_rates_percentiles_and_a_replaced_worker
    script = [
      [sample(10, 0, 100, [100, 100, 100, 100]), sample(11, 1, 50, [50, 50, 50, 50])],
      # 100 more on worker 0, all between 1 and 10 ms.
      [sample(10, 0, 200, [100, 200, 200, 200]), sample(11, 1, 50, [50, 50, 50, 50])],
      # Worker 1 replaced by pid 12, which served 10 (over 10 ms).
      [sample(10, 0, 200, [100, 200, 200, 200]), sample(12, 1, 10, [0, 0, 10, 10])]
    ]
    calls = 0
    feed = Tsubame::StatusFeed.new(lambda {
      step = script[[calls, script.size - 1].min]
      calls += 1
      [step, nil]
    })
    first = feed.latest
    assert_equal [150, 0.0, 2, 10, 4], first.values_at("requests_total", "rps", "threads_busy", "threads_max",
                                                     "connections")
    assert_equal [[0, 10, 100], [1, 11, 50]], first["workers"].map { |w| w.values_at("index", "pid", "requests") }
    second = feed.next_after(first, 5)
    # 100 requests over the time between two samples: a second, or more
    # on a loaded machine.
    assert_operator second["rps"], :<=, 105
    assert_operator second["rps"], :>=, 10
    third = feed.next_after(second, 5)
    assert_equal 210, third["requests_total"]
    assert_operator third["rps"], :>, 0, "the replacement's 10 count; the dead worker's are not subtracted"
    # Over the window: pid 10's 100 (1-10 ms) and pid 12's 10 (10-100 ms).
    assert_operator third["p50_ms"], :>, 1.0
    assert_operator third["p50_ms"], :<=, 10.0
    assert_operator third["p99_ms"], :>, 10.0
    assert_operator third["p99_ms"], :<=, 100.0
    assert_equal "single", third["mode"]
  end
end
