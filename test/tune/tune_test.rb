# frozen_string_literal: true

require "test_helper"
require "json"

# `tsubame tune` run as a command against real servers it starts: the
# table and recommendation, the HTML chart data, a max rate that matches
# a known capacity, Ctrl-C, and the one-line errors. Budgets are short
# (1-2 s steps); the file takes about 35 s on a quiet machine. The SLOs
# are looser than the default where the test is not about where the
# limit falls: on a machine shared with other builds, a 2-core box can
# stall a server for hundreds of milliseconds.
class TuneTest < Minitest::Test
  include Tsubame::TestHelpers

  HELLO = "run ->(_env) { [200, { 'content-type' => 'text/plain' }, ['hello']] }\n"
  # 2 ms of waiting per request: about 500 req/s per thread, so a second
  # thread doubles the capacity, and the rates stay low enough that the
  # load generator and the server need little CPU on a busy machine.
  WAITING = "run ->(_env) { sleep 0.002; [200, { 'content-type' => 'text/plain' }, ['waited']] }\n"
  # One thread that sleeps 50 ms per request: about 20 requests per second.
  SLOW = "run ->(_env) { sleep 0.05; [200, { 'content-type' => 'text/plain' }, ['slow']] }\n"

  def tune(*args, chdir: ROOT)
    run_tsubame("tune", *args, chdir: chdir)
  end

  # Processes whose command line mentions `text` (a unique temp path).
  def processes_mentioning(text)
    Dir.glob("/proc/[0-9]*/cmdline").filter_map do |path|
      cmdline = File.read(path).tr("\0", " ")
      path[%r{/proc/(\d+)/}, 1].to_i if cmdline.include?(text)
    rescue SystemCallError
      nil
    end
  end

  def test_table_recommendation_config_lines_and_html_chart
    in_tmpdir do |dir|
      app = write_file(dir, "waiting.ru", WAITING)
      html = File.join(dir, "tune.html")
      out, err, status = tune("--workers", "1", "--threads", "1,2", "--step-duration", "1s", "--budget", "33s",
                              "--confirm-duration", "2s", "--slo", "p95=1s", "--success", "99", "--html", html, app)
      assert_equal 0, status.exitstatus, err
      header = out.lines.find { |l| l.start_with?("setting") }
      assert_match(%r{\Asetting\s+max rate\s+p50\s+p95\s+p99\s+trend\s+CPU %\s+RSS/worker\s+steps$}, header, out)
      rows = out.lines.grep(/\Asingle mode, [12] threads?\s/)
      assert_equal 2, rows.size, out
      rows.each do |row|
        rate = row[/\s([\d,]+(?:\.\d)?)\+? req\/s/, 1]
        assert rate, row
        assert_operator rate.delete(",").to_f, :>, 0, row
        assert_match(%r{req/s\s+[\d.]+ m?s\s+[\d.]+ m?s\s+[\d.]+ m?s\s+[+-][\d.]+ ms/s\s+\d+\s+[\d.]+ MiB\s+\d+$}, row)
      end
      assert_match(/^Recommended: single mode, [12] threads?[ .]/, out)
      assert_match(%r{^Confirmed: [\d,.]+ req/s held the SLO for \d+ s when replayed \(p95 [\d.]+ m?s, trend [+-][\d.]+ ms/s, }, out)
      assert_match(%r{^Operating rate: [\d,.]+ req/s \(90% of the confirmed max rate}, out)
      threads = out[/^    threads (\d), \1$/, 1]
      assert_includes %w[1 2], threads, out
      assert_includes out, "    workers 0 # single mode"
      # Progress went to stderr, step by step.
      assert_match(/\[1\/2\] single mode, 1 thread: starting/, err)
      assert_match(%r{req/s: p50 .*, trend [+-][\d.]+ ms/s, CPU \d+% - meets the SLO}, err)
      assert_match(%r{^\[confirm\] confirming single mode, [12] threads? at [\d,.]+ req/s for 2 s$}, err)

      page = File.read(html)
      series = JSON.parse(page[%r{<script type="application/json" id="tune-series">(.*?)</script>}m, 1])
      assert_equal ["single mode, 1 thread", "single mode, 2 threads"], series.map { |s| s["label"] }
      # A setting whose share a busy machine ate may have only one step;
      # the chart still has a line per setting and several points in all.
      assert_operator series.sum { |s| s["points"].size }, :>=, 3, series.inspect
      series.each do |s|
        assert_operator s["points"].size, :>=, 1, s.inspect
        s["points"].each do |rate, p95, met|
          assert_operator rate, :>, 0
          assert_operator p95, :>, 0
          assert_includes [true, false], met
        end
        assert_equal s["points"].map(&:first).sort, s["points"].map(&:first)
      end
      assert_equal 2, page.scan("<polyline").size
      assert_includes page, "SLO p95 1 s"
      data = JSON.parse(page[%r{<script type="application/json" id="tune-data">(.*?)</script>}m, 1])
      assert_equal threads.to_i, data.dig("recommended", "config", 1)[/threads (\d)/, 1].to_i
    end
  end

  def test_max_rate_matches_a_slow_apps_capacity
    in_tmpdir do |dir|
      app = write_file(dir, "slow.ru", SLOW)
      out, err, status = tune("--workers", "1", "--threads", "1", "--step-duration", "2s", "--budget", "31s",
                              "--confirm-duration", "2s", "--slo", "p95=1s", "--success", "99", "--json", app)
      assert_equal 0, status.exitstatus, err
      report = JSON.parse(out)
      setting = report.fetch("settings").first
      # Capacity is 20 req/s (one thread, 50 ms each). Above it the queue
      # grows through the step, which the search must see even though a
      # 1 s p95 would take a few seconds to break; below it a noisy
      # machine can cost some headroom.
      assert_operator setting["max_rate"], :>=, 7, err
      assert_operator setting["max_rate"], :<=, 24, err
      best = setting["at_max_rate"]
      assert_operator best["p50_ms"], :>=, 50, best.inspect
      assert_operator best["p95_ms"], :<=, 1000, best.inspect
      assert_operator best["success_percent"], :>=, 99
      # Above capacity the SLO must have failed.
      setting["steps"].select { |s| s["rate"] > 26 }.each { |s| refute s["met_slo"], s.inspect }
      assert_equal ["workers 0 # single mode: one process, no fork", "threads 1, 1"], report.dig("recommended", "config")
    end
  end

  # An app that waits 50 ms per request: 2 threads serve about 40 req/s,
  # fiber mode as many as the CPU allows, and tune must say so.
  def test_fibers_adds_fiber_mode_and_recommends_it_for_a_waiting_app
    in_tmpdir do |dir|
      app = write_file(dir, "slow.ru", SLOW)
      out, err, status = tune("--workers", "1", "--threads", "2", "--fibers", "--step-duration", "1s", "--budget", "52s",
                              "--confirm-duration", "2s", "--slo", "p95=1s", "--success", "99", "--json", app)
      assert_equal 0, status.exitstatus, err
      report = JSON.parse(out)
      by_label = report.fetch("settings").to_h { |s| [s["label"], s] }
      assert_equal ["single mode, 2 threads", "single mode, fiber mode"], by_label.keys
      threaded = by_label["single mode, 2 threads"]["max_rate"]
      fibers = by_label["single mode, fiber mode"]["max_rate"]
      assert_operator threaded, :<=, 60, err
      assert_operator fibers, :>=, threaded * 5, err
      assert_equal "single mode, fiber mode", report.dig("recommended", "label")
      assert_includes report.dig("recommended", "config"), "fiber_scheduler true # every request on a fiber"
    end
  end

  def test_ctrl_c_stops_the_servers_and_reports_what_was_measured
    in_tmpdir do |dir|
      app = write_file(dir, "interrupted-app.ru", HELLO)
      out_path = File.join(dir, "out")
      err_path = File.join(dir, "err")
      pid = Process.spawn(RbConfig.ruby, "-w", EXE, "tune", "--workers", "2", "--threads", "1,2", "--step-duration", "1s",
                          "--budget", "60s", "--confirm-duration", "2s", app, out: out_path, err: err_path, in: File::NULL, chdir: ROOT)
      begin
        # A finished step's line ends with its verdict; the load
        # generator's own progress lines (also "req/s: p50") come while
        # the step still runs.
        Timeout.timeout(30) { sleep 0.05 until File.read(err_path).match?(/req\/s: p50 .* - (meets the SLO|misses)/) }
      rescue Timeout::Error
        flunk "no step measured: #{File.read(err_path)}"
      end
      server_pids = File.read(err_path)[/pid (\d+), workers (\d+) (\d+)/].scan(/\d+/).map(&:to_i)
      assert_equal 3, server_pids.size
      Process.kill("INT", pid)
      status = Timeout.timeout(20) { Process.wait2(pid).last }
      out = File.read(out_path)
      err = File.read(err_path)
      assert_equal 130, status.exitstatus, err
      assert_includes err, "tsubame tune: interrupted: stopping the server and reporting what was measured"
      # The step measured before Ctrl-C is in the table, whether it met
      # the SLO or (a loaded machine, the default 200 ms SLO) missed it.
      assert_match(/^2 workers, 1 thread\s+([\d,.]+\+? req\/s|no rate met the SLO \(lowest tried [\d,.]+ req\/s)/, out)
      assert_includes out, "Interrupted: partial results"
      assert_includes out, "not measured: 2 workers, 2 threads: interrupted"
      assert_empty processes_mentioning(app), "server processes left behind"
      server_pids.each do |server_pid|
        assert_raises(Errno::ESRCH, "pid #{server_pid} still exists") { Process.kill(0, server_pid) }
      end
    ensure
      Process.kill("KILL", pid) if pid && !status
    end
  end

  def test_no_setting_meets_the_slo
    in_tmpdir do |dir|
      app = write_file(dir, "missing.ru", "run ->(_env) { [404, {}, ['no']] }\n")
      out, err, status = tune("--workers", "1", "--threads", "1", "--step-duration", "1s", "--budget", "18s",
                              "--confirm-duration", "2s", app)
      assert_equal 2, status.exitstatus, err
      assert_match(/^single mode, 1 thread\s+no 2xx\/3xx response to the requests \(status 404: \d+\)$/, out)
      assert_includes out, "No setting met the SLO (p95 <= 200 ms, success >= 99.9%) at any rate tried"
      refute_includes out, "Recommended"
    end
  end

  def assert_one_line_error(args, message, chdir: ROOT)
    out, err, status = tune(*args, chdir: chdir)
    assert_equal 1, status.exitstatus, "#{args.inspect}: #{err}"
    assert_equal "", out
    assert_equal 1, err.lines.size, err
    assert_match(/\Atsubame tune: /, err)
    assert_match message, err
  end

  def test_bad_arguments_give_one_error_line
    in_tmpdir do |dir|
      app = write_file(dir, "hello.ru", HELLO)
      assert_one_line_error([File.join(dir, "missing.ru")], /rackup file not found: .*missing\.ru/)
      assert_one_line_error(["--slo", "p95=fast", app], /invalid --slo "p95=fast"/)
      assert_one_line_error(["--slo", "p95=0ms", app], /impossible --slo "p95=0ms"/)
      assert_one_line_error(["--success", "120", app], /invalid --success "120"/)
      assert_one_line_error(["--budget", "5s", "--workers", "1,2", "--threads", "1", app],
                            /--budget 5s is too short for 2 settings .* with 3 s steps and a 60 s confirmation: it needs at least 93 s/)
      assert_one_line_error(["--workers", "0", app], /invalid --workers "0"/)
    end
  end

  def test_a_bad_targets_file_or_an_app_that_cannot_boot_is_one_error_line
    in_tmpdir do |dir|
      app = write_file(dir, "hello.ru", HELLO)
      targets = write_file(dir, "requests.txt", "GET /\nFETCH\n")
      args = ["--workers", "1", "--threads", "1", "--step-duration", "1s", "--budget", "15s", "--confirm-duration", "1s"]
      assert_one_line_error(args + ["--targets", targets, app], /requests\.txt:2: /)
      broken = write_file(dir, "broken.ru", "raise 'this app cannot boot'\n")
      assert_one_line_error(args + [broken], /the server did not boot: exit status 1: .*this app cannot boot/)
      assert_empty processes_mentioning(broken)
    end
  end
end
