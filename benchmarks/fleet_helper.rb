# frozen_string_literal: true

# HAProxy and measuring helpers for benchmarks/fleet.sh; test/dispatch/fleet_test.rb
# requires this file for the HAProxy part (Fleet::HAProxy).
#
#   ruby fleet_helper.rb config LISTEN_PORT CHECK_PATH INTER_MS DIR PORT...
#                                     HAProxy config on stdout: loopback only,
#                                     one server per PORT (s1, s2, ...)
#   ruby fleet_helper.rb stat SOCKET  `show stat` as JSON (per server and the
#                                     frontend)
#   ruby fleet_helper.rb wait-up SOCKET SERVER SECONDS
#                                     until SERVER is "UP" in HAProxy (exit 1,
#                                     naming its state, after SECONDS)
#   ruby fleet_helper.rb overload LOAD_URL RATE SECONDS PROBE_URL CONNECTIONS OUT
#                                     open-loop load at RATE for SECONDS while
#                                     PROBE_URL is polled every 50 ms; writes
#                                     when it first failed and when it recovered
#   ruby fleet_helper.rb report DIR   the table, from the files fleet.sh wrote
#   ruby fleet_helper.rb check DIR SERVER MAX_P99_RATIO
#                                     no failed request, and the rolling
#                                     restarts' p99 within MAX_P99_RATIO x the
#                                     steady p99; exit 1 otherwise
require "json"
require "net/http"
require "socket"

module Fleet
  BENCH = File.expand_path("../lib/tsubame/tsubame-bench", __dir__)

  def self.now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # The HAProxy side: its config, its stats socket and its log.
  module HAProxy
    module_function

    # The setup of the issue: `option httpchk GET <path>`, `inter 500ms
    # fall 2 rise 2`, keep-alive to the servers (`http-reuse always`), and
    # HAProxy's defaults otherwise (no redispatch, retries 3 on a refused
    # connection). Only abnormal requests are logged (5xx, or a session that
    # did not end normally), in a format `abnormal` reads back, with the
    # health checks' state changes.
    def config(listen_port:, server_ports:, dir:, check_path: "/ready", inter_ms: 500, fall: 2, rise: 2)
      servers = server_ports.each_with_index.map do |port, i|
        "  server s#{i + 1} 127.0.0.1:#{port} check inter #{inter_ms}ms fall #{fall} rise #{rise}"
      end
      <<~CFG
        global
          log stdout format raw local0 info
          stats socket #{dir}/haproxy.sock mode 600 level admin
          maxconn 3000

        defaults
          mode http
          log global
          option dontlog-normal
          option dontlognull
          option log-health-checks
          log-format "request status=%ST term=%ts server=%s retries=%rc time_ms=%Tt"
          timeout connect 1s
          timeout client 60s
          timeout server 60s
          timeout http-keep-alive 60s

        frontend fleet
          bind 127.0.0.1:#{listen_port}
          default_backend servers

        backend servers
          balance roundrobin
          option httpchk GET #{check_path}
          http-reuse always
        #{servers.join("\n")}
      CFG
    end

    # `show stat` over the stats socket: { "frontend" => {...},
    # "backend" => {...}, "s1" => {...}, ... }, each a column => value Hash
    # (numbers as Integers).
    def stat(socket_path)
      text = UNIXSocket.open(socket_path) do |sock|
        sock.write("show stat\n")
        sock.read
      end
      header, *rows = text.lines.map(&:chomp).reject(&:empty?)
      columns = header.delete_prefix("# ").split(",")
      rows.to_h do |line|
        row = columns.zip(line.split(",", -1)).to_h
        row.transform_values! { |v| v.match?(/\A\d+\z/) ? v.to_i : v }
        [row["svname"].downcase.then { |n| %w[frontend backend].include?(n) ? n : row["svname"] }, row]
      end
    end

    # The counters a phase is judged by, summed over the servers.
    # `chkfail` counts only the checks that failed while a server was UP;
    # `chkdown` counts UP -> DOWN transitions.
    def counters(stat)
      servers = stat.reject { |name, _| %w[frontend backend].include?(name) }.values
      sum = ->(key) { servers.sum { |s| s[key].to_i } }
      {
        "chkfail" => sum.("chkfail"), "chkdown" => sum.("chkdown"),
        "server_5xx" => sum.("hrsp_5xx"), "frontend_5xx" => stat.dig("frontend", "hrsp_5xx").to_i,
        "retries" => sum.("wretr"), "connect_errors" => sum.("econ"), "response_errors" => sum.("eresp"),
      }
    end

    def wait_up(socket_path, server, seconds)
      deadline = Fleet.now + seconds
      loop do
        row = stat(socket_path)[server] or raise "HAProxy has no server #{server}"
        return row if row["status"] == "UP"
        raise "#{server} is still #{row["status"].inspect} in HAProxy after #{seconds} s" if Fleet.now > deadline

        sleep 0.05
      end
    end

    # The requests HAProxy logged as abnormal (see #config), as Hashes:
    # status, term (termination state), server. Health-check lines are
    # skipped.
    def abnormal(log_text)
      log_text.each_line.filter_map do |line|
        next unless line.start_with?("request ")

        line.scan(/(\w+)=(\S+)/).to_h.then do |h|
          h.merge("status" => h["status"].to_i)
        end
      end
    end

    # 5xx that HAProxy made itself (no server, refused, a server that
    # closed or reset), as opposed to a 5xx a server sent: the termination
    # state of a relayed response starts with "-".
    def proxy_5xx(log_text)
      abnormal(log_text).count { |r| r["status"] >= 500 && !r["term"].start_with?("-") }
    end
  end

  # GET url on a fresh connection, as a health check does; true on a 2xx
  # within timeout seconds.
  def self.probe(url, timeout)
    uri = URI(url)
    http = Net::HTTP.new(uri.host, uri.port)
    http.open_timeout = http.read_timeout = timeout
    http.max_retries = 0
    (200..299).cover?(http.request(Net::HTTP::Get.new(uri.request_uri)).code.to_i)
  rescue StandardError
    false
  end

  # Open-loop load on load_url for `seconds` while probe_url is polled every
  # 50 ms (a poll fails on a non-2xx or no answer within 0.5 s, HAProxy's
  # check timeout at inter 500ms). From 1 s before the load to 2 s of
  # unbroken success after it (at most 30 s after it). Returns a Hash.
  def self.overload(load_url, rate, seconds, probe_url, connections)
    polls = []
    stop = false
    poller = Thread.new do
      until stop
        started = now
        ok = probe(probe_url, 0.5)
        polls << [started, now, ok]
        sleep [0.05 - (now - started), 0].max
      end
    end
    sleep 1
    t0 = now + 0.02 # tsubame-bench starts its clock 20 ms after it starts
    out = IO.popen([BENCH, "-q", "--json", "-r", rate.to_s, "-d", "#{(seconds * 1000).round}ms", "-c", connections.to_s,
                    load_url], &:read)
    t_end = t0 + seconds
    deadline = t_end + 30
    sleep 0.05 until now > deadline || (now > t_end + 2 && recovered_for?(polls, 2))
    stop = true
    poller.join
    summarize_polls(polls, t0, t_end).merge("rate" => rate, "seconds" => seconds, "bench" => JSON.parse(out))
  end

  def self.recovered_for?(polls, seconds)
    last_fail = polls.reverse.find { |_, _, ok| !ok }
    polls.any? && (last_fail.nil? || now - last_fail[1] >= seconds)
  end

  # fail_after_s: from the load's start to the end of the first failed
  # poll (when a checker knows); recover_after_s: from the load's end to
  # the end of the first successful poll after the last failed one (0 when
  # it had recovered before the load ended). flaps: failed -> ok turns while
  # the load ran.
  def self.summarize_polls(polls, t0, t_end)
    during = polls.select { |s, _, _| s >= t0 && s < t_end }
    first_fail = polls.find { |s, _, ok| s >= t0 && !ok }
    last_fail_index = polls.rindex { |_, _, ok| !ok }
    recovery = last_fail_index && polls[(last_fail_index + 1)..].find { |_, _, ok| ok }
    {
      "fails_before_load" => polls.count { |s, _, ok| s < t0 && !ok },
      "fail_after_s" => first_fail && (first_fail[1] - t0).round(3),
      "recover_after_s" => (if first_fail.nil? then nil
                            elsif recovery.nil? then "never"
                            else [(recovery[1] - t_end), 0].max.round(3)
                            end),
      "failed_polls_during_load" => during.count { |_, _, ok| !ok },
      "polls_during_load" => during.size,
      "flaps" => during.each_cons(2).count { |(_, _, a), (_, _, b)| !a && b },
    }
  end

  # The table fleet.sh prints, from DIR/roundN/SERVER/: for each phase
  # PHASE.bench.json (tsubame-bench's report), PHASE.stat0.json and
  # PHASE.stat1.json (HAProxy's counters before and after) and
  # PHASE.haproxy.log (its log over the phase); overload-direct.json,
  # overload-haproxy.json and overload-haproxy.stat{0,1}.json.
  module Report
    PHASES = %w[steady usr2 term].freeze
    COLUMNS = "%-8s %-6s %-7s %6s %8s %7s %8s %8s %7s %8s %11s %7s %5s %7s"

    module_function

    def phase(dir, name)
      bench = JSON.parse(File.read(File.join(dir, "#{name}.bench.json")))
      before = JSON.parse(File.read(File.join(dir, "#{name}.stat0.json")))
      after = JSON.parse(File.read(File.join(dir, "#{name}.stat1.json")))
      log = File.read(File.join(dir, "#{name}.haproxy.log"))
      failed = bench["status_codes"].reject { |code, _| code.start_with?("2") }
      {
        "seconds" => bench["duration_s"], "requests" => bench["requests"],
        "non2xx" => failed.values.sum, "conn_errors" => bench["errors"].values.sum,
        "failures" => failed.merge(bench["errors"]),
        "p50" => bench.dig("latency_ms", "p50"), "p99" => bench.dig("latency_ms", "p99"),
        "proxy_5xx" => HAProxy.proxy_5xx(log),
      }.merge(after.to_h { |k, v| [k, v - before.fetch(k, 0)] })
    end

    OVERLOADS = %w[direct haproxy].freeze

    # overload-VIA.json, with HAProxy's DOWN transitions over it when the
    # load went through HAProxy.
    def overload(dir, via)
      result = JSON.parse(File.read(File.join(dir, "overload-#{via}.json")))
      stat0 = File.join(dir, "overload-#{via}.stat0.json")
      return result unless File.exist?(stat0)

      before = JSON.parse(File.read(stat0))
      after = JSON.parse(File.read(File.join(dir, "overload-#{via}.stat1.json")))
      result.merge("down" => after["chkdown"] - before["chkdown"])
    end

    def load(root)
      results = Hash.new { |h, k| h[k] = [] }
      rounds = Dir.children(root).grep(/\Around\d+\z/).sort_by { |r| r[/\d+/].to_i }
      rounds.each do |round|
        Dir.children(File.join(root, round)).sort_by { |s| s == "tsubame" ? "" : s }.each do |server|
          dir = File.join(root, round, server)
          next unless File.exist?(File.join(dir, "term.stat1.json"))

          # The overload phases are left out with OVERLOAD_S=0.
          overloads = File.exist?(File.join(dir, "overload-haproxy.stat1.json")) &&
                      OVERLOADS.to_h { |via| [via, overload(dir, via)] }
          results[server] << { "round" => round.delete_prefix("round"),
                               "phases" => PHASES.to_h { |p| [p, phase(dir, p)] },
                               "overload" => overloads || nil }
        end
      end
      results
    end

    # The middle value (the upper one of an even count); nil (never) sorts
    # last.
    def median(values)
      sorted = values.sort_by { |v| v.is_a?(Numeric) ? v : Float::INFINITY }
      sorted[sorted.size / 2]
    end

    def fmt(value, digits = 1)
      value.is_a?(Float) ? format("%.#{digits}f", value) : (value || "-").to_s
    end

    def seconds(value)
      value.is_a?(Numeric) ? "#{fmt(value.to_f, 2)} s" : value.to_s
    end

    def print_table(root, out = $stdout)
      results = load(root)
      out.puts format(COLUMNS, "server", "round", "phase", "secs", "requests", "non-2xx", "proxy5xx", "conn-err",
                      "p50 ms", "p99 ms", "p99/steady", "chkfail", "DOWN", "retries")
      results.each do |server, runs|
        rows = runs.map { |run| [run["round"], run["phases"]] }
        if runs.size > 1
          rows << ["median", PHASES.to_h do |p|
            [p, runs.first["phases"][p].keys.to_h { |k| [k, median(runs.map { |r| r["phases"][p][k] })] }]
          end]
        end
        rows.each do |label, phases|
          PHASES.each do |p|
            v = phases[p]
            ratio = p == "steady" ? "-" : fmt(v["p99"] / phases["steady"]["p99"], 2)
            out.puts format(COLUMNS, server, label, p, fmt(v["seconds"]), v["requests"], v["non2xx"],
                            v["proxy_5xx"], v["conn_errors"], fmt(v["p50"]), fmt(v["p99"]), ratio,
                            v["chkfail"], v["chkdown"], v["retries"])
          end
          next if label == "median"

          failures = PHASES.filter_map { |p| "#{p} #{phases[p]["failures"]}" unless phases[p]["failures"].to_h.empty? }
          out.puts "#{" " * 16}failures: #{failures.join("; ")}" unless failures.empty?
        end
      end
      print_overloads(results.transform_values { |runs| runs.select { |run| run["overload"] } }
                             .reject { |_, runs| runs.empty? }, out)
    end

    def print_overloads(results, out)
      return if results.empty?

      out.puts
      out.puts "readiness of instance 1 under #{OVERLOADS.map { |via| overload_label(results, via) }.join(" and ")} " \
               "(polled every 50 ms, 0.5 s timeout):"
      columns = "%-8s %-6s %-8s %12s %15s %13s %6s %5s %11s %s"
      out.puts format(columns, "server", "round", "load", "fails after", "recovers after", "failed polls", "flaps",
                      "DOWN", "answered", "load results")
      results.each do |server, runs|
        OVERLOADS.each do |via|
          runs.each do |run|
            o = run["overload"][via]
            b = o["bench"]
            out.puts format(columns, server, run["round"], via, seconds(o["fail_after_s"] || "never"),
                            seconds(o["recover_after_s"] || "-"),
                            "#{o["failed_polls_during_load"]}/#{o["polls_during_load"]}", o["flaps"], o["down"] || "-",
                            "#{b["success"]}/#{b["requests"]}", b["status_codes"].merge(b["errors"]).inspect)
          end
          next if runs.size < 2

          med = ->(key) { median(runs.map { |r| r["overload"][via][key] }) }
          out.puts format(columns, server, "median", via, seconds(med.("fail_after_s") || "never"),
                          seconds(med.("recover_after_s") || "-"), "", "", "", "", "")
        end
      end
    end

    # The target of the issue "Production deployment" for `server`'s
    # rounds: no failed request (non-2xx or connection error) in any phase
    # of any round, and the p99 of each rolling restart (usr2, term) at
    # most max_ratio x the steady phase's p99 (the p99 before it). With
    # several rounds the ratio checked is the median of the rounds' ratios
    # (each is printed), so one round slowed by another process on a
    # shared machine does not decide it; a lost request always does.
    # Returns the lines to print, each "ok" or "FAIL" with its figures, and
    # whether all passed.
    def check(root, server, max_ratio)
      runs = load(root)[server]
      return [["FAIL #{server}: no finished round under #{root}"], false] if runs.nil? || runs.empty?

      lines = []
      ratios = Hash.new { |h, k| h[k] = [] }
      runs.each do |run|
        phases = run["phases"]
        steady = phases["steady"]
        PHASES.each do |p|
          v = phases[p]
          failed = v["non2xx"] + v["conn_errors"]
          detail = "#{v["requests"]} requests, #{failed} failed#{" #{v["failures"]}" if failed.positive?}, " \
                   "p99 #{fmt(v["p99"])} ms"
          ok = failed.zero?
          if p != "steady"
            ratio = v["p99"] / steady["p99"]
            ratios[p] << ratio
            ok &&= ratio <= max_ratio || runs.size > 1
            detail += " = #{fmt(ratio, 2)} x steady's #{fmt(steady["p99"])} ms"
            detail += " (at most #{max_ratio})" if runs.size == 1
          end
          lines << format("%-4s %s round %s %-6s %s", ok ? "ok" : "FAIL", server, run["round"], p, detail)
        end
      end
      if runs.size > 1
        ratios.each do |p, values|
          med = median(values)
          lines << format("%-4s %s median of %d rounds: %s p99 %s x steady (at most %s)",
                          med <= max_ratio ? "ok" : "FAIL", server, values.size, p, fmt(med, 2), max_ratio)
        end
      end
      [lines, lines.none? { |l| l.start_with?("FAIL") }]
    end

    def overload_label(results, via)
      sample = results.values.flatten.first&.dig("overload", via) || {}
      where = via == "direct" ? "sent straight to it" : "through HAProxy to the fleet"
      "#{sample["rate"]&.round} req/s for #{sample["seconds"]} s #{where} (#{via})"
    end
  end
end

if $PROGRAM_NAME == __FILE__
  command, *args = ARGV
  case command
  when "config"
    listen, path, inter, dir, *ports = args
    print Fleet::HAProxy.config(listen_port: Integer(listen), server_ports: ports.map { |p| Integer(p) },
                                dir: dir, check_path: path, inter_ms: Integer(inter))
  when "stat"
    puts JSON.generate(Fleet::HAProxy.counters(Fleet::HAProxy.stat(args.fetch(0))))
  when "wait-up"
    begin
      Fleet::HAProxy.wait_up(args.fetch(0), args.fetch(1), Float(args.fetch(2)))
    rescue RuntimeError => e
      warn e.message
      exit 1
    end
  when "overload"
    load_url, rate, seconds, probe_url, connections, out = args
    result = Fleet.overload(load_url, Float(rate), Float(seconds), probe_url, Integer(connections))
    File.write(out, JSON.generate(result))
  when "report"
    Fleet::Report.print_table(args.fetch(0))
  when "check"
    lines, passed = Fleet::Report.check(args.fetch(0), args.fetch(1), Float(args.fetch(2)))
    puts lines
    puts passed ? "fleet: target met" : "fleet: target missed"
    exit(passed ? 0 : 1)
  else
    abort "usage: ruby #{$PROGRAM_NAME} config|stat|wait-up|overload|report|check ... (see the comment at the top)"
  end
end
