# frozen_string_literal: true

require "test_helper"
require "fiber/support"

# Hybrid routing in one worker: fiber_paths picks the requests that run
# on fibers, the rest stay on the thread pool; max_fibers bounds them.
class FiberRoutingTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::FiberSupport

  APP = <<~'RUBY'
    where = -> { Fiber.current.blocking? ? "thread #{Thread.current.name}" : "fiber #{Thread.current.name}" }
    run lambda { |env|
      case env["PATH_INFO"]
      when "/cpu"
        # CPU-bound: 0.3 s of Ruby work, no I/O.
        finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.3
        n = 0
        n += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
        [200, {}, ["#{where.call} #{n.positive?}"]]
      when "/io/sleep" then sleep 1; [200, {}, [where.call]]
      else [200, {}, [where.call]]
      end
    }
  RUBY

  CONFIG = <<~'RUBY'
    threads 2, 2
    fiber_scheduler true
    fiber_paths "/io/", %r{\A/re/\d+\z}
  RUBY

  def with_config(config, &block)
    in_tmpdir do |dir|
      path = write_file(dir, "tsubame.rb", config)
      with_server(APP, args: ["-C", path], &block)
    end
  end

  def test_paths_pick_the_pool
    with_config(CONFIG) do |server|
      assert_equal "fiber tsubame-fiber-0", server.get("/io/x?y").body
      assert_equal "fiber tsubame-fiber-0", server.get("/re/12").body
      assert_match(/\Athread tsubame-\d\z/, server.get("/re/12x").body)
      assert_match(/\Athread tsubame-\d\z/, server.get("/").body)
      assert_match(/\Athread tsubame-\d true\z/, server.get("/cpu").body)
    end
  end

  def test_cpu_bound_threads_and_sleeping_fibers_both_progress_under_load
    with_config(CONFIG) do |server|
      paths = Array.new(100) { "/io/sleep" } + Array.new(6) { "/cpu" }
      results, elapsed = concurrently(server, paths.shuffle(random: Random.new(5)))
      sleeps = results.select { |_, body| body.start_with?("fiber") }
      cpus = results.select { |_, body| body.start_with?("thread") }
      assert_equal 100, sleeps.size, results.reject { |status, _| status == 200 }.first(3).inspect
      assert_equal 6, cpus.size
      assert(results.all? { |status, _| status == 200 })
      # 100 sleeps of 1 s next to 1.8 s of CPU work on 2 threads: one by one
      # that is 100 s; the sleeps overlap each other and the CPU work.
      assert_operator elapsed, :<, 3.5, "took #{elapsed.round(2)}s"
      assert_operator sleeps.map(&:last).max, :<, 3.0
    end
  end

  def test_max_fibers_answers_503_beyond_the_cap_while_threads_keep_serving
    with_server(APP, args: %w[--fibers --fiber-path /io/ --max-fibers 5 -t 2:2]) do |server|
      load = Thread.new { concurrently(server, Array.new(10) { "/io/sleep" }) }
      sleep 0.5
      assert_match(/\Athread /, server.get("/").body, "the thread pool is not capped by max_fibers")
      results, = load.value
      statuses = results.map(&:first).tally
      assert_equal({ 200 => 5, 503 => 5 }, statuses)
      refused = results.find { |status, _| status == 503 }
      assert_includes refused[1], "fiber_limit"
      assert_equal "fiber tsubame-fiber-0", server.get("/io/after").body, "slots come back"
    end
  end

  def test_the_app_declares_its_own_fiber_routes_in_its_rackup
    app = %(Tsubame.fiber_route "/io/", %r{\\A/re/\\d+\\z}\n#{APP})
    with_server(app, args: %w[-t 2:2]) do |server|
      assert_equal "fiber tsubame-fiber-0", server.get("/io/x").body
      assert_equal "fiber tsubame-fiber-0", server.get("/re/7").body
      assert_match(/\Athread tsubame-\d\z/, server.get("/other").body)
    end
  end

  def test_a_pattern_the_engine_cannot_compile_fails_the_boot_naming_the_line
    in_tmpdir do |dir|
      path = write_file(dir, "tsubame.rb", "fiber_scheduler\nfiber_paths %r{(?<=/)io}\n")
      _, stderr, status = run_tsubame("-C", path, "-b", "tcp://127.0.0.1:0", File.join(dir, "none.ru"))
      refute status.success?
      assert_match(%r{tsubame\.rb:2: fiber_paths pattern /\(\?<=/\)io/ is not supported: .*look-around}, stderr)
    end
  end
end
