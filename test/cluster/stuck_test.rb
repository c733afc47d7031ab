# frozen_string_literal: true

require "test_helper"
require "cluster/support"

# Issue 4 in cluster mode: a thread that will not let go of a timed-out
# request cannot be freed, so its worker is replaced.
class ClusterStuckTest < Minitest::Test
  include Tsubame::ClusterHelpers

  STUBBORN_APP = <<~RUBY
    run lambda { |env|
      if env["PATH_INFO"] == "/stubborn"
        begin
          sleep 30
        rescue Exception # swallows Tsubame::RequestTimeout
          sleep 30
        end
      end
      [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
    }
  RUBY

  def test_a_worker_with_a_stuck_thread_is_replaced
    config = "request_timeout 1\nrequest_timeout_grace 1\n"
    with_cluster(STUBBORN_APP, workers: 1, config: config, args: %w[-t 2:2]) do |s|
      old_pid = get_pid(s)
      http = Net::HTTP.new("127.0.0.1", s.port)
      http.read_timeout = 5
      http.max_retries = 0
      assert_equal "503", http.request(Net::HTTP::Get.new("/stubborn")).code
      deadline = monotonic + 15
      new_pid = old_pid
      while new_pid == old_pid && monotonic < deadline
        sleep 0.2
        new_pid = get_pid(s)
      end
      refute_equal old_pid, new_pid, "the worker with the stuck thread was replaced"
      assert_match(/stuck past request_timeout_grace/, s.stdout + s.stderr)
    end
  end
end
