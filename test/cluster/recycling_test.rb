# frozen_string_literal: true

require "cluster/support"

# worker_max_requests and worker_max_memory replace a worker gracefully:
# its replacement boots first, then it drains.
class ClusterRecyclingTest < Minitest::Test
  include Tsubame::ClusterHelpers

  def recycle_under_load(config)
    with_cluster(PID_APP, workers: 2, config: "worker_check_interval 0.2\n#{config}") do |s|
      first = s.booted_workers.values
      load = Tsubame::LoadLoop.new(s.port)
      s.wait_until(15, "both first workers replaced") { first.none? { |pid| s.alive?(pid) } }
      load.stop
      assert_empty load.failures.map(&:detail), "no request failed"
      assert_empty load.refused.map(&:detail), "no connection was refused"
      yield s, first, load
    end
  end

  def test_worker_max_requests_recycles_without_a_failed_request
    recycle_under_load("worker_max_requests 40\n") do |s, first, load|
      assert_operator load.ok.size, :>, 80
      log = s.stdout
      first.each do |pid|
        assert_match(/Worker \d \(PID: #{pid}\) served \d+ requests \(worker_max_requests 40\); starting its/, log)
        replaced = log.index(/Worker \d \(PID: #{pid}\) served/)
        stopped = log.index(/Worker \d \(PID: #{pid}\) stopped \(replaced by PID (\d+)\)/)
        assert stopped, "#{pid} was stopped by its replacement"
        replacement = log[stopped..][/replaced by PID (\d+)/, 1]
        booted = log.index(/PID: #{replacement}\) booted/)
        assert_operator replaced, :<, booted
        assert_operator booted, :<, stopped, "the replacement booted before the old worker stopped"
      end
      assert_equal 2, s.wait_for_workers(2).size
    end
  end

  def test_worker_max_memory_recycles_a_worker_over_the_limit
    # Every worker is over 1 MB, so each is replaced in turn.
    recycle_under_load("worker_max_memory 1\n") do |s, first, _load|
      first.each do |pid|
        assert_match(/Worker \d \(PID: #{pid}\) uses [\d.]+ MB \(worker_max_memory 1\.0\); starting its replacement/,
                     s.stdout)
      end
      rss = s.stats["worker_status"].select { |w| w["booted"] }.map { |w| w["rss_mb"] }
      assert(rss.all? { |mb| mb.is_a?(Numeric) && mb > 1 }, "stats report each worker's RSS: #{rss}")
    end
  end
end
