# frozen_string_literal: true

require "files/support"
require "json"
require "zlib"

# --compress costs the app's thread nothing measurable: gzip runs on the
# engine's blocking pool after the thread has handed the body over. The
# same ~100 KiB JSON answer is asked for 200 times with Accept-Encoding:
# gzip and 200 times without, in turn, from one server (--compress, one
# app thread, gzip level 6); the server process's CPU rises by the
# compression work, the app thread's (its schedstat, found by the native
# thread id the app reports) does not.
class CompressAppThreadCostTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport
  include Tsubame::FilesMeasureSupport

  REQUESTS = 200 # of each kind, alternating

  # Built once at boot, so each request does the same work in Ruby. /tid
  # says which native thread runs the app.
  APP = <<~'RUBY'
    require "json"
    rows = Array.new(900) do |i|
      { "id" => i, "name" => "user #{i}", "email" => "user#{i}@example.com", "active" => i.odd?,
        "score" => (i * 7919) % 1000 / 10.0, "tags" => %w[alpha beta gamma].rotate(i % 3) }
    end
    json = JSON.generate(rows).freeze
    run lambda { |env|
      case env["PATH_INFO"]
      when "/json" then [200, { "content-type" => "application/json" }, [json]]
      when "/tid" then [200, { "content-type" => "text/plain" }, [Thread.current.native_thread_id.to_s]]
      else [404, { "content-type" => "text/plain" }, ["?"]]
      end
    }
  RUBY

  def fetch(client, gzip)
    client.write(get_request("/json", gzip ? { "Accept-Encoding" => "gzip" } : {}))
    response = client.read_response
    assert_equal 200, response.status
    response
  end

  # One request; returns [app thread CPU, process CPU] it took, in
  # seconds, and checks its coding.
  def measured(client, pid, tid, gzip)
    thread_before = thread_cpu(pid, tid)
    process_before = process_cpu(pid)
    response = fetch(client, gzip)
    cost = [thread_cpu(pid, tid) - thread_before, process_cpu(pid) - process_before]
    assert_equal gzip ? "gzip" : "none", response["content-encoding"] || "none"
    cost
  end

  def test_gzip_costs_the_app_thread_nothing_measurable
    # Rack 2's Lint hides the Array body, whose known length decides compression.
    # No hand-off spin: a thread that stays awake for the next request burns
    # CPU that depends on when that request comes (later after a gzip
    # answer), which is the spin's cost, not compression's.
    with_server(APP, args: ["-t", "1:1", "--compress", "--handoff-spin", "0"], lint: LINT_FORWARDS_BODY) do |server|
      client = conn(server)
      plain = fetch(client, false)
      json = plain.body
      assert_operator json.bytesize, :>, 95 * 1024
      assert_operator json.bytesize, :<, 110 * 1024
      assert JSON.parse(json).is_a?(Array)
      gzipped = fetch(client, true)
      assert_equal ["gzip", gzipped.body.bytesize.to_s], [gzipped["content-encoding"], gzipped["content-length"]]
      assert_equal json, Zlib.gunzip(gzipped.body), "the gzip body inflates to the same JSON"
      assert_operator gzipped.body.bytesize, :<, json.bytesize / 4

      client.write(get_request("/tid"))
      tid = Integer(client.read_response.body, 10)
      assert_equal "tsubame-0", File.read("/proc/#{server.pid}/task/#{tid}/comm").strip,
                   "the app runs on the pool's thread"

      10.times { fetch(client, false) && fetch(client, true) } # warm
      # One of each in turn, so whatever the machine does meanwhile (other
      # builds, a GC in the app) falls on both kinds alike.
      costs = { false => [], true => [] }
      (2 * REQUESTS).times do |i|
        gzip = i.odd?
        costs[gzip] << measured(client, server.pid, tid, gzip)
      end
      plain_thread, plain_process = costs[false].transpose.map(&:sum)
      gzip_thread, gzip_process = costs[true].transpose.map(&:sum)
      if ENV["TSUBAME_MEASURES"]
        median = ->(list) { list.map(&:first).sort[list.size / 2] * 1e6 }
        warn format("\n%d requests each: app thread %.1f ms plain (median %.0f µs), %.1f ms gzip (median %.0f µs); " \
                    "process %.0f ms plain, %.0f ms gzip", REQUESTS, plain_thread * 1e3, median.call(costs[false]),
                    gzip_thread * 1e3, median.call(costs[true]), plain_process * 1e3, gzip_process * 1e3)
      end

      # The compression happened in this process: it costs 0.45-1 ms per
      # 100 KiB answer at gzip level 6 (this JSON repeats itself, and
      # compresses fast: 90 ms for the 200 in one CI run), where a plain
      # answer costs well under that.
      assert_operator gzip_process - plain_process, :>, 0.05,
                      "process CPU: #{plain_process} s plain, #{gzip_process} s gzip"
      assert_operator gzip_process, :>, plain_process * 1.5
      # None of it on the app thread. Compared with what compression cost
      # the process, not with the plain batch alone: on a loaded 2-core
      # machine (both test suites at once) the app thread's few
      # milliseconds grow with the compressing threads beside it (it ran
      # 12 ms plain, 22 ms gzip there, against about 200 ms of
      # compression), while compressing on the app thread would add all
      # of that 200 ms to it.
      compression = gzip_process - plain_process
      assert_operator gzip_thread - plain_thread, :<, compression * 0.1,
                      "app thread CPU: #{plain_thread} s plain, #{gzip_thread} s gzip; compression #{compression} s"
    ensure
      client&.close
    end
  end
end
