# frozen_string_literal: true

require "test_helper"

# Of the pool's sleeping threads, the one that fell asleep last is woken
# for the next request (docs/ARCHITECTURE.md step 5): requests one after
# another keep one warm thread busy and the others asleep, rather than
# handing each request to the thread that slept longest.
class WarmThreadTest < Minitest::Test
  include Tsubame::TestHelpers

  APP = "run ->(_env) { [200, { \"content-type\" => \"text/plain\" }, [Thread.current.object_id.to_s]] }\n"

  def test_requests_one_after_another_are_served_by_the_thread_that_slept_last
    # No spin: every request finds its thread asleep and wakes one.
    with_server(APP, args: ["-t", "5:5", "--handoff-spin", "0"]) do |s|
      http = s.http
      threads = Array.new(60) { http.get("/").body }
      http.finish
      counts = threads.tally.values.sort.reverse
      # Longest sleeper first, the five threads took turns (12 each). A
      # request can still go to another thread when the watcher nudges one
      # awake on a loaded machine, hence not all 60.
      assert_operator counts.first, :>=, 50, "requests per thread: #{counts.inspect}"
    end
  end
end
