# frozen_string_literal: true

require "test_helper"
require "stringio"
require "tsubame/tune/command"
require "tsubame/tune/steady"
require "tsubame/tune/stepper"

# The parts of `tsubame tune` that need no server: SLO and flag parsing,
# grid sizing, the rate search, the recommendation and the reports.
# test/tune/tune_test.rb runs the command against real servers.
class TuneUnitTest < Minitest::Test
  include Tsubame::TestHelpers
  Tune = Tsubame::Tune

  def test_slo_parses_limits_in_milliseconds
    slo = Tune::SLO.parse("p95=200ms")
    assert_equal({ "p95" => 200.0 }, slo.limits)
    assert_in_delta 99.9, slo.success
    slo = Tune::SLO.parse("p95=200ms, p99=1.5s,p99.9=2500us", success: "99.5%")
    assert_equal({ "p95" => 200.0, "p99" => 1500.0, "p99.9" => 2.5 }, slo.limits)
    assert_in_delta 99.5, slo.success
    assert_in_delta 1500.0, slo.max_ms
    assert_equal "p95 <= 200 ms, p99 <= 1.5 s, p99.9 <= 2.50 ms, success >= 99.5%", slo.to_s
  end

  def test_slo_rejects_malformed_and_impossible_specs
    {
      "p95=200" => /needs a unit/,
      "p95=abc" => /needs a unit/,
      "p96=10ms" => /pNN=TIME with pNN one of p50, p90, p95, p99, p99.9/,
      "" => /expected e.g. p95=200ms/,
      "p95=0ms" => /impossible --slo "p95=0ms": the latency limit must be more than 0/,
      "p95=0.001us" => /impossible/,
      "p95=1ms,p95=2ms" => /names p95 twice/
    }.each do |spec, message|
      error = assert_raises(Tune::UsageError, spec) { Tune::SLO.parse(spec) }
      assert_match message, error.message, spec
    end
    %w[0 101 abc -5].each do |bad|
      assert_raises(Tune::UsageError, bad) { Tune::SLO.parse("p95=1s", success: bad) }
    end
  end

  def test_slo_miss_names_the_first_broken_objective
    slo = Tune::SLO.parse("p95=200ms,p99=500ms", success: 99.9)
    assert_nil slo.miss(success_percent: 100.0, latency_ms: { "p95" => 150.0, "p99" => 499.0 })
    assert_equal "p95 250 ms > 200 ms", slo.miss(success_percent: 100.0, latency_ms: { "p95" => 250.0, "p99" => 300.0 })
    assert_equal "p99 600 ms > 500 ms", slo.miss(success_percent: 100.0, latency_ms: { "p95" => 10.0, "p99" => 600.0 })
    assert_equal "success 99.5% < 99.9%", slo.miss(success_percent: 99.5, latency_ms: { "p95" => 1.0, "p99" => 1.0 })
    assert_equal "no response", slo.miss(success_percent: 100.0, latency_ms: nil)
  end

  def test_durations_and_lists
    parse = ->(text) { Tune::TuneOptions.parse_duration(text, "--budget") }
    assert_in_delta 600.0, parse.call("10m")
    assert_in_delta 90.0, parse.call("1m30s")
    assert_in_delta 0.5, parse.call("500ms")
    assert_in_delta 3.0, parse.call("3")
    assert_in_delta 7200.0, parse.call("2h")
    %w[10x 0s 1m30 m -3s].each do |bad|
      error = assert_raises(Tune::UsageError, bad) { parse.call(bad) }
      assert_match(/invalid --budget/, error.message)
    end
    assert_equal [1, 2, 4], Tune::TuneOptions.parse_list("4,1,2,2", "--workers")
    %w[0 a 1,,2 2000].each do |bad|
      assert_raises(Tune::UsageError, bad) { Tune::TuneOptions.parse_list(bad, "--threads") }
    end
  end

  def test_options_check_the_app_file_and_requests
    in_tmpdir do |dir|
      app = write_file(dir, "config.ru", "run ->(_) { [200, {}, []] }\n")
      options = Tune::TuneOptions.new(["--workers", "1,2", "--threads", "2", "--slo", "p99=1s", "--step-duration", "2s",
                                       "--budget", "1m", "--path", "/a", "--path", "/b?x=1", app])
      assert_equal [1, 2], options.workers
      assert_equal [2], options.threads
      assert_equal %w[/a /b?x=1], options.paths
      assert_in_delta 60.0, options.budget
      assert_equal "production", options.environment
      assert_equal ["/"], Tune::TuneOptions.new([app]).paths
      refute Tune::TuneOptions.new([app]).fibers
      assert Tune::TuneOptions.new(["--fibers", app]).fibers
      {
        [] => /missing the rackup file/,
        [File.join(dir, "nope.ru")] => /rackup file not found/,
        ["--path", "x", app] => /invalid --path "x"/,
        ["--targets", File.join(dir, "none.txt"), app] => /targets file not found/,
        ["--targets", app, "--path", "/", app] => /cannot be combined/,
        ["--bogus", app] => /invalid option: --bogus/,
        [app, app] => /too many arguments/,
        ["--html", File.join(dir, "no", "such", "dir.html"), app] => /cannot write --html .*: no directory/
      }.each do |argv, message|
        error = assert_raises(Tune::UsageError, argv.inspect) { Tune::TuneOptions.new(argv) }
        assert_match message, error.message
      end
    end
  end

  def test_default_grid_from_cores_and_memory
    assert_equal [1], Tune::Grid.default_workers(1)
    assert_equal [1, 2], Tune::Grid.default_workers(2)
    assert_equal [1, 2, 4, 6], Tune::Grid.default_workers(6)
    assert_equal [1, 2, 4, 8, 16], Tune::Grid.default_workers(16)

    grid = Tune::Grid.size(cores: 2, memory_mb: 16_000)
    assert_equal [[1, 1], [1, 3], [1, 5], [1, 10], [2, 1], [2, 3], [2, 5], [2, 10]],
                 grid.settings.map { |s| [s.workers, s.threads] }

    # 1000 MiB * 0.8 at 150 MiB per process: 5 processes; 8 workers are 9.
    small = Tune::Grid.size(cores: 8, memory_mb: 1000, threads: [5])
    assert_equal [1, 2, 4], small.settings.map(&:workers)
    # Too little memory for anything: the smallest setting is still tried.
    assert_equal [[1, 5]], Tune::Grid.size(cores: 8, memory_mb: 10, threads: [5]).settings.map { |s| [s.workers, s.threads] }
    # Explicit lists override the defaults; no memory figure trims nothing.
    explicit = Tune::Grid.size(cores: 2, memory_mb: nil, workers: [3], threads: [7, 1])
    assert_equal [[3, 1], [3, 7]], explicit.settings.map { |s| [s.workers, s.threads] }
  end

  def test_grid_fit_with_measured_rss
    grid = Tune::Grid.size(cores: 4, memory_mb: nil, threads: [5])
    kept, dropped = grid.fit(rss_mb: 100, memory_mb: 1000)
    # 800 MiB usable, 150 MiB per process with growth: 5 processes.
    assert_equal [1, 2, 4], kept.settings.map(&:workers)
    assert_empty dropped.settings
    kept, dropped = grid.fit(rss_mb: 200, memory_mb: 1000)
    assert_equal [1], kept.settings.map(&:workers)
    assert_equal [2, 4], dropped.settings.map(&:workers)
  end

  def test_setting_args_config_and_label
    single = Tune::Setting.new(workers: 1, threads: 5)
    assert_equal ["-w", "0", "-t", "5:5"], single.server_args
    assert_equal ["workers 0 # single mode: one process, no fork", "threads 5, 5"], single.config_lines
    assert_equal "single mode, 5 threads", single.label
    assert_equal 1, single.processes
    cluster = Tune::Setting.new(workers: 4, threads: 1)
    assert_equal ["-w", "4", "-t", "1:1"], cluster.server_args
    assert_equal ["workers 4", "threads 1, 1"], cluster.config_lines
    assert_equal "4 workers, 1 thread", cluster.label
    assert_equal 5, cluster.processes
    assert_equal 4, cluster.concurrency
    refute cluster.fibers?
  end

  def test_fiber_mode_setting_and_grid
    fibers = Tune::Setting.new(workers: 2, threads: 1, fibers: true)
    assert_equal ["-w", "2", "-t", "1:1", "--fibers"], fibers.server_args
    assert_equal ["workers 2", "threads 1, 1", "fiber_scheduler true # every request on a fiber"], fibers.config_lines
    assert_equal "2 workers, fiber mode", fibers.label
    assert_equal "2xfibers", fibers.slug
    assert_equal 2 * Tune::FIBER_CONCURRENCY, fibers.concurrency
    assert_equal 3, fibers.processes

    grid = Tune::Grid.size(cores: 2, memory_mb: nil, threads: [5, 3], fibers: true)
    assert_equal [[1, 3, false], [1, 5, false], [2, 3, false], [2, 5, false], [1, 3, true], [2, 3, true]],
                 grid.settings.map { |s| [s.workers, s.threads, s.fibers?] }
    assert_equal "workers 1,2 x threads 3,5, and fiber mode", grid.describe
    refute(Tune::Grid.size(cores: 2, memory_mb: nil).settings.any?(&:fibers?))
  end

  # Runs a search against a server that meets the SLO up to `capacity`.
  def search_until_done(start:, capacity:, limit: 30)
    search = Tune::Search.new(start: start)
    tried = []
    while (rate = search.next_rate)
      tried << rate
      flunk "the search did not converge: #{tried.inspect}" if tried.size > limit
      search.record(rate, rate <= capacity)
    end
    [search, tried]
  end

  def test_search_ramps_up_then_bisects
    search, tried = search_until_done(start: 30, capacity: 100)
    assert_equal [30, 60, 120], tried.first(3)
    assert_operator search.best, :<=, 100
    assert_operator search.best, :>=, 95, tried.inspect
    assert_operator search.lowest_failure, :<=, search.best * 1.05
    assert_operator tried.size, :<=, 8
  end

  def test_search_comes_down_when_the_start_is_too_high
    search, tried = search_until_done(start: 5000, capacity: 700)
    assert_equal [5000, 2500, 1250, 625], tried.first(4)
    assert_operator search.best, :<=, 700
    assert_operator search.best, :>=, 700 / 1.05
  end

  def test_search_gives_up_below_the_floor
    search, tried = search_until_done(start: 10, capacity: 0)
    assert_nil search.best
    assert_equal [10, 5, 2.5, 1.3], tried
  end

  def test_search_stops_on_a_pass_above_a_failure
    search = Tune::Search.new(start: 100)
    search.record(100, true)
    search.record(200, false)
    search.record(141, true)
    search.record(170, true)
    # Noise: 205 passes although 200 failed; bisecting an empty range
    # would chase it, so the search ends at the highest pass.
    search.record(205, true)
    assert_nil search.next_rate
    assert_equal 205, search.best
  end

  def test_search_rounds_rates
    search = Tune::Search.new(start: 12_345.6)
    assert_equal 12_300, search.next_rate
    assert_in_delta 3.7, Tune::Search.new(start: 3.66).next_rate
  end

  def test_connections_and_timeout_for_the_load
    assert_equal 8, Tune::Load.connections_for(10, 200, 1)
    assert_equal 40, Tune::Load.connections_for(100, 200, 1)
    assert_equal 20, Tune::Load.connections_for(1, 200, 10)
    assert_equal 256, Tune::Load.connections_for(100_000, 200, 1)
    # More app threads than the cap: each still gets two connections.
    assert_equal 320, Tune::Load.connections_for(100_000, 200, 160)
    assert_in_delta 1.0, Tune::Load.timeout_for(50)
    assert_in_delta 1.6, Tune::Load.timeout_for(800)
    assert_in_delta 10.0, Tune::Load.timeout_for(60_000)
  end

  def test_budget_minimum_grows_with_settings_and_steps
    one = Tune::Runner.minimum_budget(1, 1.0)
    assert_in_delta 2.0 + 1.0 + (3 * 1.5), one
    assert_in_delta one * 4, Tune::Runner.minimum_budget(4, 1.0)
    assert_operator Tune::Runner.minimum_budget(1, 3.0), :>, one
  end

  def measurement(rate, p95, ok: 1000, requests: 1000, statuses: { "200" => 1000 })
    Tune::Measurement.new({ "requests" => requests, "success" => ok, "unsent" => 0, "throughput" => rate,
                            "status_codes" => statuses, "errors" => {},
                            "latency_ms" => { "p50" => p95 / 3.0, "p90" => p95 / 1.5, "p95" => p95, "p99" => p95 * 2 } },
                          offered: rate)
  end

  def setting_result(workers, threads, steps)
    slo = Tune::SLO.parse("p95=200ms")
    Tune::SettingResult.new(Tune::Setting.new(workers: workers, threads: threads)).tap do |r|
      steps.each do |rate, p95|
        m = measurement(rate, p95)
        r.steps << Tune::Step.new(measurement: m, cpu_percent: 50.0, rss_mb: 40.0,
                                  miss: slo.miss(success_percent: m.success_percent, latency_ms: m.latency_ms))
      end
    end
  end

  def report_for(results, load: [0.2, 0.3, 0.4])
    context = { app: "app.ru", requests: "GET /", step: 1.0, budget: 60.0, cores: 2, memory_mb: 1000, elapsed: 12.0,
                load_before: load, load_after: [2.5, 1.0, 0.5], confirm: 60.0, headroom: 80.0 }
    Tune::Report.new(results, Tune::SLO.parse("p95=200ms"), context)
  end

  def test_report_warns_about_a_busy_machine
    results = Tune::Results.new
    results << setting_result(1, 1, [[100, 10], [200, 300]])
    refute_includes report_for(results).text, "The machine was busy"
    text = report_for(results, load: [3.5, 2.0, 1.0]).text
    assert_includes text, "The machine was busy: load average 3.50 on 2 cores before the run (2.50 after); " \
                          "the rates are lower and noisier than on an idle machine."
    assert_equal [3.5, 2.0, 1.0], report_for(results, load: [3.5, 2.0, 1.0]).to_h.dig("machine", "load_average_before")
  end

  def test_recommendation_prefers_fewer_processes_within_five_percent
    results = Tune::Results.new
    results << setting_result(1, 5, [[1000, 20], [2000, 150], [4000, 900]])
    results << setting_result(2, 5, [[1000, 10], [2050, 120], [4100, 800]])
    results << setting_result(2, 10, [[500, 10], [1000, 300]])
    assert_equal [1, 5], results.recommended.setting.to_h.values_at(:workers, :threads)

    text = report_for(results).text
    header = text.lines.find { |l| l.start_with?("setting") }
    assert_match(/setting\s+max rate\s+p50\s+p95\s+p99\s+trend\s+CPU %\s+RSS\/worker\s+steps/, header)
    assert_match(/^single mode, 5 threads\s+2,000 req\/s\s+50.0 ms\s+150 ms\s+300 ms\s+-\s+50\s+40.0 MiB\s+3$/, text)
    assert_match(/^2 workers, 5 threads\s+2,050 req\/s/, text)
    assert_match(/^2 workers, 10 threads\s+500 req\/s/, text)
    # Not confirmed yet: no recommendation, and the report says why.
    assert_includes text, "No recommendation: the best setting, single mode, 5 threads (max 2,000 req/s), was not " \
                          "confirmed by a 60 s replay"
    refute_includes text, "Paste into"
    assert_nil report_for(results).to_h["recommended"]

    results.confirmation = confirmation(results.recommended.setting, [[2000, 150]])
    text = report_for(results).text
    assert_match(/^Recommended: single mode, 5 threads \(the fewest processes/, text)
    assert_includes text, "    workers 0 # single mode: one process, no fork\n    threads 5, 5\n"

    # A clearly better setting wins over the cheaper one.
    results << setting_result(4, 5, [[3000, 100], [6000, 400]])
    assert_equal 4, results.recommended.setting.workers
  end

  def test_report_marks_lower_bounds_and_no_setting_met
    results = Tune::Results.new
    results << setting_result(1, 1, [[100, 10], [200, 20]])
    assert_match(/^single mode, 1 thread\s+200\+ req\/s/, report_for(results).text)
    assert_includes report_for(results).text, "+: the SLO still held at the highest rate tried"
    assert_equal true, report_for(results).to_h["settings"][0]["max_rate_is_lower_bound"]

    none = Tune::Results.new
    none << setting_result(1, 1, [[100, 300], [50, 250]])
    failed = Tune::SettingResult.new(Tune::Setting.new(workers: 2, threads: 1))
    failed.note = "the server did not boot: exit status 1: boom"
    none << failed
    none.skip(Tune::Setting.new(workers: 2, threads: 5), "budget used up")
    text = report_for(none).text
    assert_match(/^single mode, 1 thread\s+no rate met the SLO \(lowest tried 50.0 req\/s: p95 250 ms > 200 ms\)$/, text)
    assert_match(/^2 workers, 1 thread\s+the server did not boot: exit status 1: boom$/, text)
    assert_includes text, "not measured: 2 workers, 5 threads: budget used up"
    assert_includes text, "No setting met the SLO (p95 <= 200 ms, success >= 99.9%) at any rate tried"
    assert_nil none.recommended
    assert_nil report_for(none).to_h["recommended"]
  end

  def test_html_has_a_series_per_setting_and_escapes_labels
    results = Tune::Results.new
    results << setting_result(1, 2, [[400, 30], [100, 5], [800, 400]])
    results << setting_result(2, 2, [[300, 10]])
    html = Tune::HTML.new(report_for(results)).page
    series = JSON.parse(html[%r{<script type="application/json" id="tune-series">(.*?)</script>}m, 1])
    assert_equal ["single mode, 2 threads", "2 workers, 2 threads"], series.map { |s| s["label"] }
    assert_equal [[100, 5.0, true], [400, 30.0, true], [800, 400.0, false]], series[0]["points"]
    assert_equal 2, html.scan("<polyline").size
    assert_equal 4, html.scan("<circle").size
    assert_includes html, "SLO p95 200 ms"
    data = JSON.parse(html[%r{<script type="application/json" id="tune-data">(.*?)</script>}m, 1])
    assert_equal 800, data["settings"][0]["steps"].last["rate"]
  end

  def test_progress_is_held_until_released
    io = StringIO.new
    progress = Tune::Progress.new(io)
    progress.line("one")
    progress.line("two")
    assert_equal "", io.string
    progress.release
    progress.line("three")
    assert_equal "one\ntwo\nthree\n", io.string
    quiet = StringIO.new
    Tune::Progress.new(quiet, quiet: true).tap { |p| p.line("x") }.release
    assert_equal "", quiet.string
  end

  # A report whose windows of 0.1 s each answered `per_window` requests
  # with the given p90s.
  def timeline_report(p90s, window: 0.1, per_window: 5)
    timeline = p90s.each_with_index.map do |p90, i|
      { "t" => (i * window).round(3), "responses" => per_window, "p50_ms" => p90 / 2, "p90_ms" => p90 }
    end
    { "requests" => 100, "success" => 100, "throughput" => 50, "window_s" => window, "timeline" => timeline }
  end

  def steady(p90s, rate: 50, span: 2.0, limit: 200, per_window: 5)
    Tune::Steady.new(timeline_report(p90s, per_window: per_window), rate: rate, span: span, limit_ms: limit)
  end

  def test_steady_state_needs_the_offered_rate_and_flat_latency
    flat = steady([30.0, 20.0, 60.0, 35.0, 80.0] * 4)
    assert flat.steady?, flat.problem
    assert_in_delta 1.0, flat.throughput_ratio
    assert_nil flat.problem
    assert_equal({ "throughput_ratio" => 1.0, "trend_ms_per_s" => 0.0, "steady" => true }, flat.to_h.merge("trend_ms_per_s" => 0.0))

    # 2 s offered: 20 windows; a queue growing 40 ms per second is a
    # trend (80 ms over the step > a tenth of 200 ms); the drain after
    # the offered period (t >= 2) is ignored.
    growing = steady((0...20).map { |i| 5.0 + (i * 4) } + ([900.0] * 5))
    refute growing.steady?
    assert growing.rising?
    assert_in_delta 40.0, growing.trend_ms_per_s, 0.5
    assert_match(/\Alatency still rising \(\+40\.\d ms\/s, a queue building up\)\z/, growing.problem)
    # The same growth under a tenth of a looser limit is not a concern.
    assert steady((0...20).map { |i| 5.0 + (i * 4) }, limit: 1000).steady?
    # One stalled window (a GC, a busy core) is not a trend, at the end
    # either; nor is the slow first window (connections opening).
    assert steady([300.0] + ([20.0] * 18) + [400.0]).steady?
    # Spikes only after the offered period do not count.
    assert steady(([10.0] * 20) + ([500.0] * 10)).steady?

    # 5 answers a window of 0.1 s is 50 req/s: at 60 offered the server
    # answered 83% and fell behind, even with flat latency.
    behind = steady([20.0] * 20, rate: 60)
    refute behind.keeping_up?
    assert_match(/\Athroughput 83\.3% of the offered rate \(the server fell behind\)\z/, behind.problem)
    # Within 5% (or 3 requests at low rates) is keeping up.
    assert steady([20.0] * 20, rate: 52).keeping_up?
    # Too few windows say nothing about a trend.
    assert_nil steady([10.0, 90.0, 90.0], span: 0.3).trend_ms_per_s
  end

  # What Stepper needs of a server and a load: the measurement is given.
  FakeServer = Struct.new(:setting) do
    def cpu_seconds = 0.0
    def rss_per_worker_mb = 30.0
  end
  FakeLoad = Struct.new(:report) do
    def open(rate:, **) = Tune::Measurement.new(report, offered: rate)
  end

  def judged(p90s, p95:, rate: 50, success: 100)
    report = timeline_report(p90s).merge("requests" => 100, "success" => success, "unsent" => 0,
                                         "latency_ms" => { "p50" => 10.0, "p90" => p95, "p95" => p95, "p99" => p95 })
    server = FakeServer.new(Tune::Setting.new(workers: 1, threads: 2))
    Tune::Stepper.new(Tune::SLO.parse("p95=200ms")).measure(server, FakeLoad.new(report), rate, 2.0)
  end

  def test_a_step_is_doubtful_when_the_slo_and_steady_state_disagree
    clear = judged([20.0] * 20, p95: 30)
    assert clear.met?
    refute clear.doubtful
    # The limits held, but latency was climbing: a miss, to be extended.
    climbing = judged((0...20).map { |i| 5.0 + (i * 4) }, p95: 150)
    refute climbing.met?
    assert climbing.doubtful
    assert_match(/latency still rising/, climbing.miss)
    # p95 broke while the server kept up and latency was flat: a stall.
    stall = judged([20.0] * 20, p95: 250)
    assert_equal "p95 250 ms > 200 ms", stall.miss
    assert stall.doubtful
    # Both say no: overloaded, nothing to extend.
    overloaded = judged((0...20).map { |i| 50.0 + (i * 20) }, p95: 400)
    refute overloaded.doubtful
    # Errors are not a stall.
    refute judged([20.0] * 20, p95: 250, success: 90).doubtful
  end

  def confirmation(setting, tries, client_cpus: [0, 1], server_cpus: [0, 1])
    slo = Tune::SLO.parse("p95=200ms")
    Tune::Confirmation.new(setting, 60.0).tap do |c|
      tries.each do |rate, p95|
        report = timeline_report([p95 / 1.2] * 30, per_window: rate / 10.0).merge(
          "requests" => rate * 60, "success" => rate * 60, "unsent" => 0, "throughput" => rate, "duration_s" => 60.2,
          "latency_ms" => { "p50" => p95 / 3.0, "p90" => p95 / 1.2, "p95" => p95, "p99" => p95 * 1.5 }
        )
        m = Tune::Measurement.new(report, offered: rate)
        m.client_cpu_seconds = 12.0
        m.wall_seconds = 60.0
        steady = Tune::Steady.new(report, rate: rate, span: 3.0, limit_ms: 200)
        miss = slo.miss(success_percent: m.success_percent, latency_ms: m.latency_ms) || steady.problem
        c.tries << Tune::Step.new(measurement: m, cpu_percent: 90.0, rss_mb: 30.0, miss: miss, steady: steady)
      end
      c.client_cpus = client_cpus
      c.server_cpus = server_cpus
    end
  end

  def test_report_gives_the_confirmed_rate_operating_rate_and_client_share
    results = Tune::Results.new
    results << setting_result(2, 4, [[500, 20], [1000, 150], [1100, 300]])
    results.confirmation = confirmation(results.recommended.setting, [[1000, 260], [900, 120]])
    report = report_for(results)
    text = report.text
    assert_includes text, "Recommended: 2 workers, 4 threads.\n"
    assert_match(/^Confirmed: 900 req\/s held the SLO for 60 s when replayed \(p95 120 ms, trend \+0\.0 ms\/s, 100\.0% of the offered rate answered\); missed at 1,000 req\/s \(p95 260 ms > 200 ms\)\.$/, text)
    assert_includes text, "Operating rate: 720 req/s (80% of the confirmed max rate, to leave headroom"
    assert_includes text, "Warning: the load generator shared the cores with the server (CPUs 0,1) and used 20% of one core " \
                          "(10% of the 2 cores) at the confirmed rate"
    json = report.to_h
    assert_equal 900, json.dig("recommended", "confirmed_rate")
    assert_in_delta 720.0, json.dig("recommended", "operating_rate")
    assert_in_delta 60.2, json.dig("recommended", "confirmed_for_s")
    assert_equal [1000, 900], json.dig("confirmation", "tries").map { |t| t["rate"] }
    assert_equal [false, true], json.dig("confirmation", "tries").map { |t| t["met_slo"] }
    assert_in_delta 20.0, json.dig("confirmation", "client_cpu_percent")
    assert json.dig("confirmation", "shares_cores")

    # A load generator pinned to other CPUs than the server's: no warning.
    results.confirmation = confirmation(results.recommended.setting, [[1000, 100]], client_cpus: [2, 3])
    refute_includes report_for(results).text, "Warning: the load generator"
    refute report_for(results).to_h.dig("confirmation", "shares_cores")

    # Every try missed: no recommendation.
    results.confirmation = confirmation(results.recommended.setting, [[1000, 260], [900, 230]])
    results.confirmation.note = "the budget ran out before a rate was confirmed"
    text = report_for(results).text
    assert_includes text, "No recommendation: the best setting, 2 workers, 4 threads (max 1,000 req/s), was not confirmed " \
                          "by a 60 s replay: it missed at 1,000 req/s (p95 260 ms > 200 ms), 900 req/s (p95 230 ms > 200 ms); " \
                          "the budget ran out before a rate was confirmed."
    assert_nil report_for(results).to_h["recommended"]
  end

  # Replays what it is given: the confirmation tries' outcomes in order.
  class ScriptedStepper
    attr_reader :offered

    def initialize(steps)
      @steps = steps
      @offered = []
    end

    def timeout = 1.0

    def measure(_server, _load, rate, duration)
      @offered << [rate, duration]
      @steps.shift.call(rate)
    end
  end

  def test_confirmation_lowers_the_rate_after_a_miss_until_one_holds_or_time_is_up
    in_tmpdir do |dir|
      app = write_file(dir, "config.ru", "run ->(_) { [200, {}, []] }\n")
      options = Tune::TuneOptions.new(["--confirm-duration", "0.1s", app])
      setting = Tune::Setting.new(workers: 2, threads: 4)
      template = confirmation(setting, [[1000, 260], [900, 120], [810, 100]])
      # A step at whatever rate is offered, with this p95.
      outcome = ->(p95) { ->(rate) { confirmation(setting, [[rate, p95]]).tries.first } }
      stepper = ScriptedStepper.new([outcome.call(260), outcome.call(120), outcome.call(230), outcome.call(100)])
      io = StringIO.new
      progress = Tune::Progress.new(io).tap(&:release)
      confirm = Tune::Confirm.new(options, bench: "b", dir: dir, progress: progress, stepper: stepper)
      result = Tune::Confirmation.new(setting, 0.1)
      confirm.replay(result, FakeServer.new(setting), 1000, Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30)
      # 1000 missed; 90% of it, 900, held; halfway back up, 950, missed;
      # nothing more was tried and 900 is the confirmed rate.
      assert_equal [[1000, 0.1], [900, 0.1], [950, 0.1]], stepper.offered
      assert_equal 900, result.rate
      assert_match(/^\[confirm\] 1,000 req\/s for 60 s: .* - misses \(p95 260 ms > 200 ms\)$/, io.string)
      assert_match(/^\[confirm\] 900 req\/s for 60 s: .*load generator CPU 20% - confirmed$/, io.string)
      assert_match(/^\[confirm\] 950 req\/s for 60 s: .* - misses \(p95 230 ms > 200 ms\)$/, io.string)

      # The halfway rate holds: it is the confirmed rate, the higher of two.
      stepper = ScriptedStepper.new([outcome.call(260), outcome.call(120), outcome.call(150), outcome.call(100)])
      higher = Tune::Confirmation.new(setting, 0.1)
      Tune::Confirm.new(options, bench: "b", dir: dir, progress: progress, stepper: stepper)
                   .replay(higher, FakeServer.new(setting), 1000, Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30)
      assert_equal [1000, 900, 950], stepper.offered.map(&:first)
      assert_equal 950, higher.rate
      assert_in_delta 855.0, higher.operating_rate(90)

      # Held at the first try: nothing above it to look for.
      stepper = ScriptedStepper.new([outcome.call(120), outcome.call(100)])
      first = Tune::Confirmation.new(setting, 0.1)
      Tune::Confirm.new(options, bench: "b", dir: dir, progress: progress, stepper: stepper)
                   .replay(first, FakeServer.new(setting), 1000, Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30)
      assert_equal [1000], stepper.offered.map(&:first)
      assert_equal 1000, first.rate

      # A server that answered 80% of 1000 req/s has shown about 800: the
      # next try is 90% of that, not of 1000.
      report = timeline_report([300.0] * 30, per_window: 80)
      behind = Tune::Step.new(measurement: Tune::Measurement.new(report, offered: 1000), miss: "behind",
                              steady: Tune::Steady.new(report, rate: 1000, span: 3.0, limit_ms: 200))
      assert_in_delta 0.8, behind.steady.throughput_ratio
      assert_equal 720, confirm.next_rate(behind)
      assert_equal 900, confirm.next_rate(template.tries.first)

      # Within the SLO all along and keeping up, latency still creeping up
      # (seed 001's shape, 470 req/s: p95 124 ms, +0.7 ms/s over 60 s): just
      # over capacity, so 5% down, not 10%.
      rising = timeline_report((0...30).map { |i| 40.0 + (i * 2) }, per_window: 100)
      creeping = Tune::Step.new(measurement: Tune::Measurement.new(rising, offered: 1000), miss: "rising",
                                steady: Tune::Steady.new(rising, rate: 1000, span: 3.0, limit_ms: 200), doubtful: true)
      assert creeping.steady.keeping_up?
      assert creeping.steady.rising?
      assert_equal 950, confirm.next_rate(creeping)
      # The same rise when the SLO broke (not doubtful): the usual 10%.
      broke = Tune::Step.new(measurement: creeping.measurement, miss: "p95", steady: creeping.steady, doubtful: false)
      assert_equal 900, confirm.next_rate(broke)

      # No time for a try: nothing offered, and the note says why.
      late = Tune::Confirmation.new(setting, 0.1)
      idle = ScriptedStepper.new([])
      Tune::Confirm.new(options, bench: "b", dir: dir, progress: progress, stepper: idle)
                   .replay(late, FakeServer.new(setting), 1000, Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1)
      assert_empty idle.offered
      assert_nil late.rate
      assert_equal "the budget ran out before a rate was confirmed", late.note
    end
  end

  def test_confirmation_options_and_reserve
    in_tmpdir do |dir|
      app = write_file(dir, "config.ru", "run ->(_) { [200, {}, []] }\n")
      defaults = Tune::TuneOptions.new([app])
      assert_in_delta 60.0, defaults.confirm
      assert_in_delta 90.0, defaults.headroom
      options = Tune::TuneOptions.new(["--confirm-duration", "30s", "--headroom", "70%", app])
      assert_in_delta 30.0, options.confirm
      assert_in_delta 70.0, options.headroom
      assert_raises(Tune::UsageError) { Tune::TuneOptions.new(["--confirm-duration", "0s", app]) }
      %w[0 101 x].each do |bad|
        error = assert_raises(Tune::UsageError, bad) { Tune::TuneOptions.new(["--headroom", bad, app]) }
        assert_match(/invalid --headroom/, error.message)
      end
    end
    slo = Tune::SLO.parse("p95=200ms")
    # Boot, pause, the period, the client timeout (1 s) and overhead.
    one = Tune::Confirm.try_seconds(60.0, slo)
    assert_in_delta 2.0 + 2.0 + 60.0 + 1.0 + 0.5, one
    # Room for three tries when the budget has it, else as many as fit (at least one).
    assert_in_delta one * 3, Tune::Confirm.reserve(600.0, 100.0, 60.0, slo)
    assert_in_delta one * 2, Tune::Confirm.reserve(100.0 + (one * 2.5), 100.0, 60.0, slo)
    assert_in_delta one, Tune::Confirm.reserve(200.0, 100.0, 60.0, slo)
  end

  def test_load_arguments_for_paths_targets_and_headers
    in_tmpdir do |dir|
      one = Tune::Load.new(bench: "b", url: "http://127.0.0.1:5", paths: ["/users?page=2"], targets: nil,
                           headers: ["X-A: 1"], dir: dir)
      assert_equal ["-q", "--json", "-t", "1", "-r", "50", "-H", "X-A: 1", "http://127.0.0.1:5/users?page=2"],
                   one.arguments(["-r", "50"])
      two = Tune::Load.new(bench: "b", url: "http://127.0.0.1:5", paths: ["/a", "/b"], targets: nil, headers: [], dir: dir)
      file = File.join(dir, "paths.targets")
      assert_equal ["-q", "--json", "-t", "1", "--targets", file, "http://127.0.0.1:5/"], two.arguments([])
      assert_equal "GET /a\nGET /b\n", File.read(file)
      mine = Tune::Load.new(bench: "b", url: "http://127.0.0.1:5", paths: ["/"], targets: "mix.txt", headers: [], dir: dir)
      assert_equal ["-q", "--json", "-t", "1", "--targets", "mix.txt", "http://127.0.0.1:5/"], mine.arguments([])
    end
  end

  def test_server_arguments
    in_tmpdir do |dir|
      app = write_file(dir, "config.ru", "run ->(_) { [200, {}, []] }\n")
      config = write_file(dir, "puma.rb", "before_fork { }\n")
      plain = Tune::ServerProcess.new(Tune::Setting.new(workers: 2, threads: 3), Tune::TuneOptions.new([app]), dir: dir)
      assert_equal ["-b", "tcp://127.0.0.1:0", "-C", "-", "-e", "production", "--drain-timeout", "2",
                    "-w", "2", "-t", "3:3", app], plain.args
      options = Tune::TuneOptions.new(["-C", config, "-e", "staging", app])
      configured = Tune::ServerProcess.new(Tune::Setting.new(workers: 1, threads: 5), options, dir: dir)
      assert_equal ["-b", "tcp://127.0.0.1:0", "-C", config, "-e", "staging", "--drain-timeout", "2",
                    "-w", "0", "-t", "5:5", app], configured.args
    end
  end
end
