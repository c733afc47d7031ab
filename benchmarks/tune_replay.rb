# frozen_string_literal: true

# Does `tsubame tune`'s recommendation hold when replayed? (issue 21)
#
# For each endpoint shape (benchmarks/apps/shaped.ru):
#   seed001  36 ms of sleep + 4 ms of Ruby CPU per request
#   cpu      8 ms of Ruby CPU, no waiting
#   mixed    95%: 10 ms of sleep + 2 ms of CPU; 5%: 150 ms of sleep (under
#            the 200 ms limit: a tail of exactly 5% over it would put p95
#            on the edge between the two, met or missed by chance)
# it runs `tsubame tune` (SLO p95 <= 200 ms), then starts the recommended
# setting and replays its recommended operating rate (REPLAY=confirmed:
# the confirmed max rate) RUNS times for DURATION seconds with `tsubame
# bench` and, if found, an independent open-loop client: vegeta
# (VEGETA=path, ~/go/bin/vegeta or PATH; constant rate), or k6 with CLIENT=k6
# (constant-arrival-rate, K6=path, ~/go/bin/k6 or PATH; its JavaScript VUs take
# a good part of a core at a few hundred requests a second, which a
# CPU-bound server on 2 shared cores then lacks), counting the runs that
# meet the SLO (p95 <= 200 ms, >= 99.9% of the requests due answered 2xx:
# requests a client could not send count as failed). Then a slow manual
# sweep: rates from SWEEP_FROM x the confirmed rate upward in SWEEP_STEP
# steps, each offered for DURATION seconds by `tsubame bench`, until one
# misses twice in a row (once may be a stall of the shared machine); the
# highest that held (or the confirmed rate, which held for the tune's
# confirmation) is the best rate, and the replayed rate should be >= 85%
# of it.
#
#   ruby benchmarks/tune_replay.rb                        # everything: 30-35 min per shape
#   RUNS=3 DURATION=60 SHAPES=seed001 ruby benchmarks/tune_replay.rb
#
# Other settings: BUDGET=10m (tune's default; 6m left no time for a third confirmation try), CONFIRM=60s, WORKERS=1,2
# THREADS=1,4,8,16, SWEEP_FROM=1.05, SWEEP_STEP=0.05, SWEEP_MAX=4 (steps),
# PORT=19521, OUT=/tmp/tune-replay. Writes OUT/summary.md and, per shape,
# tune.json, tune.err and every run's report. Records the load average
# before and after each phase, since the machine may be shared.
require "json"
require "fileutils"
require "open3"
require "rbconfig"

ROOT = File.expand_path("..", __dir__)
EXE = File.join(ROOT, "exe", "tsubame")
APP = File.join(ROOT, "benchmarks", "apps", "shaped.ru")
SLO_MS = 200.0
SUCCESS = 99.9

SHAPES = {
  "seed001" => { "SHAPE_SLEEP_MS" => "36", "SHAPE_CPU_MS" => "4" },
  "cpu" => { "SHAPE_SLEEP_MS" => "0", "SHAPE_CPU_MS" => "8" },
  "mixed" => { "SHAPE_SLEEP_MS" => "10", "SHAPE_CPU_MS" => "2", "SHAPE_TAIL_PERCENT" => "5", "SHAPE_TAIL_MS" => "150" }
}.freeze

RUNS = Integer(ENV.fetch("RUNS", "10"))
DURATION = Integer(ENV.fetch("DURATION", "60"))
BUDGET = ENV.fetch("BUDGET", "10m")
CONFIRM = ENV.fetch("CONFIRM", "60s")
WORKERS = ENV.fetch("WORKERS", "1,2")
THREADS = ENV.fetch("THREADS", "1,4,8,16")
SWEEP_FROM = Float(ENV.fetch("SWEEP_FROM", "1.05"))
SWEEP_STEP = Float(ENV.fetch("SWEEP_STEP", "0.05"))
SWEEP_MAX = Integer(ENV.fetch("SWEEP_MAX", "4"))
PORT = Integer(ENV.fetch("PORT", "19521"))
OUT = ENV.fetch("OUT", "/tmp/tune-replay")
# The independent open-loop client: vegeta, or k6 with CLIENT=k6.
CLIENT = ENV.fetch("CLIENT", "vegeta")
REPLAY = ENV.fetch("REPLAY", "operating")
abort "REPLAY is operating or confirmed, not #{REPLAY}" unless %w[operating confirmed].include?(REPLAY)
abort "CLIENT is vegeta or k6, not #{CLIENT}" unless %w[vegeta k6].include?(CLIENT)

def independent_client
  CLIENT == "k6" ? k6_path : vegeta_path
end

# A Go client: $ENV_NAME, else GOPATH's bin (~/go/bin), else PATH, as
# `make bench-tune-replay` installs it. Looked up before each run: a `go
# install` still building when the script starts is used once it is done.
def go_program(name, env_name)
  ENV.fetch(env_name) do
    dirs = [File.expand_path("~/go/bin"), *ENV.fetch("PATH", "").split(File::PATH_SEPARATOR)]
    dirs.map { |dir| File.join(dir, name) }.find { |path| File.executable?(path) }
  end
end

def k6_path
  go_program("k6", "K6")
end

def load_average
  File.read("/proc/loadavg").split.first(3).join(" ")
end

def log(line)
  warn "#{Time.now.utc.strftime("%H:%M:%S")} #{line}"
end

def tune(shape, env, dir)
  args = ["tune", "--workers", WORKERS, "--threads", THREADS, "--slo", "p95=#{SLO_MS.round}ms", "--budget", BUDGET,
          "--confirm-duration", CONFIRM, "--json", APP]
  out, err, status = Open3.capture3(env, RbConfig.ruby, EXE, *args)
  File.write(File.join(dir, "tune.json"), out)
  File.write(File.join(dir, "tune.err"), err)
  raise "#{shape}: tsubame tune exited #{status.exitstatus}: #{err.lines.last(3).join}" unless status.success? || status.exitstatus == 2

  JSON.parse(out)
end

# The recommended setting, started as a user would from its config lines.
def start_server(env, setting, dir)
  workers = setting["workers"] == 1 ? 0 : setting["workers"]
  log = File.join(dir, "server.log")
  pid = Process.spawn(env, RbConfig.ruby, EXE, "-b", "tcp://127.0.0.1:#{PORT}", "-w", workers.to_s,
                      "-t", "#{setting["threads"]}:#{setting["threads"]}", "-e", "production", APP,
                      out: log, err: File.join(dir, "server.err"), pgroup: true)
  deadline = Time.now + 60
  sleep 0.2 until File.read(log).include?("Use Ctrl-C") || Time.now > deadline
  sleep 1
  pid
end

def stop_server(pid)
  Process.kill("TERM", pid)
  Process.wait(pid)
rescue Errno::ESRCH, Errno::ECHILD
  nil
end

def bench(rate, file)
  connections = [(rate * SLO_MS / 1000.0 * 2).ceil, 16].max.clamp(16, 512)
  out, err, status = Open3.capture3(RbConfig.ruby, EXE, "bench", "-r", rate.to_s, "-d", "#{DURATION}s", "-c", connections.to_s,
                                    "--timeout", "2s", "--json", "http://127.0.0.1:#{PORT}/")
  File.write(file, out)
  return { ok: false, why: "bench failed: #{err.lines.last}" } unless status.success?

  r = JSON.parse(out)
  due = r["requests"] + r.fetch("unsent", 0)
  success = due.zero? ? 0 : r["success"] * 100.0 / due
  p95 = r.dig("latency_ms", "p95")
  { ok: p95 && p95 <= SLO_MS && success >= SUCCESS, p95: p95, success: success, throughput: r["throughput"] }
end

K6_SCRIPT = <<~JS
  import http from "k6/http";
  export const options = {
    discardResponseBodies: true,
    scenarios: { replay: { executor: "constant-arrival-rate", rate: Number(__ENV.RATE), timeUnit: "1s",
                           duration: __ENV.DURATION + "s", preAllocatedVUs: Number(__ENV.VUS), maxVUs: Number(__ENV.VUS) * 4 } },
    summaryTrendStats: ["med", "p(95)", "p(99)", "max"],
  };
  export default function () { http.get(__ENV.URL, { timeout: "2s" }); }
  export function handleSummary(data) { return { [__ENV.OUT]: JSON.stringify(data) }; }
JS

def vegeta_path
  go_program("vegeta", "VEGETA")
end

# vegeta (`go install github.com/tsenart/vegeta/v12@v12.13.0`): requests
# sent at a constant rate whatever the answers (it adds workers rather than
# wait), in Go, so it takes far less of the shared cores than k6's
# JavaScript VUs. A run that could not keep the rate counts the requests it
# never sent as failures, like k6's dropped iterations.
def vegeta(rate, file)
  attack = [vegeta_path, "attack", "-rate=#{rate}/s", "-duration=#{DURATION}s", "-timeout=2s"]
  targets = "GET http://127.0.0.1:#{PORT}/\n"
  results, err, status = Open3.capture3(*attack, stdin_data: targets, binmode: true)
  return { ok: false, why: "vegeta attack failed: #{err.lines.last}" } unless status.success?

  out, err, status = Open3.capture3(vegeta_path, "report", "-type=json", stdin_data: results, binmode: true)
  File.write(file, out)
  return { ok: false, why: "vegeta report failed: #{err.lines.last}" } unless status.success?

  r = JSON.parse(out)
  due = (rate * DURATION).round
  ok = (r["requests"] * r["success"]).round
  unsent = [due - r["requests"], 0].max
  p95 = r.dig("latencies", "95th") / 1e6
  success = ok * 100.0 / [due, r["requests"]].max
  { ok: p95 <= SLO_MS && success >= SUCCESS, p95: p95, success: success, dropped: unsent }
end

def k6(rate, file, dir)
  script = File.join(dir, "replay.js")
  File.write(script, K6_SCRIPT)
  env = { "RATE" => rate.to_s, "DURATION" => DURATION.to_s, "VUS" => [(rate * 0.4).ceil, 20].max.to_s,
          "URL" => "http://127.0.0.1:#{PORT}/", "OUT" => file }
  _, err, status = Open3.capture3(env, k6_path, "run", "--quiet", "--no-usage-report", script)
  return { ok: false, why: "k6 failed: #{err.lines.last}" } unless status.success? && File.exist?(file)

  m = JSON.parse(File.read(file))["metrics"]
  p95 = m.dig("http_req_duration", "values", "p(95)")
  failed = m.dig("http_req_failed", "values", "rate").to_f * 100
  dropped = m.dig("dropped_iterations", "values", "count").to_i
  reqs = m.dig("http_reqs", "values", "count").to_i
  success = reqs.zero? ? 0 : (100 - failed) * reqs / (reqs + dropped)
  { ok: p95 && p95 <= SLO_MS && success >= SUCCESS, p95: p95, success: success, dropped: dropped }
end

def describe(result)
  return result[:why] if result[:why]

  format("p95 %.1f ms, %.2f%% ok%s %s", result[:p95] || -1, result[:success], result[:dropped] ? ", #{result[:dropped]} dropped" : "",
         result[:ok] ? "PASS" : "FAIL")
end

FileUtils.mkdir_p(OUT)
summary = ["# tune replay #{Time.now.utc}", "", "RUNS=#{RUNS} DURATION=#{DURATION} BUDGET=#{BUDGET} CONFIRM=#{CONFIRM} " \
           "WORKERS=#{WORKERS} THREADS=#{THREADS} REPLAY=#{REPLAY}; #{CLIENT} at the start: #{independent_client || "not found"}", ""]
# Written after every run, so an interrupted benchmark keeps what it measured.
flush = -> { File.write(File.join(OUT, "summary.md"), "#{summary.join("\n")}\n") }
ENV.fetch("SHAPES", SHAPES.keys.join(",")).split(",").each do |shape|
  env = SHAPES.fetch(shape)
  dir = File.join(OUT, shape)
  FileUtils.mkdir_p(dir)
  log "#{shape}: tune (load #{load_average})"
  report = tune(shape, env, dir)
  rec = report["recommended"]
  unless rec
    # No confirmed recommendation is a result too: recorded, next shape.
    summary << "## #{shape}: no recommendation (#{report.dig("confirmation", "note")}; tries " \
               "#{(report.dig("confirmation", "tries") || []).map { |t| "#{t["rate"]}: #{t["miss"]}" }.join("; ")})" << ""
    flush.call
    next
  end
  confirmed = rec.fetch("confirmed_rate")
  # The rate the report recommends running at (the operating rate,
  # --headroom of the confirmed max), or with REPLAY=confirmed the
  # confirmed max rate itself.
  rate = REPLAY == "confirmed" ? confirmed : rec.fetch("operating_rate").round
  setting = report["settings"].find { |s| s["label"] == rec["label"] }.fetch("setting")
  summary << "## #{shape} (#{env.map { |k, v| "#{k}=#{v}" }.join(" ")})" << ""
  summary << "tune: #{rec["label"]}, max #{rec["max_rate"]}, confirmed #{confirmed} req/s for #{rec["confirmed_for_s"]} s, " \
             "operating #{rec["operating_rate"]}, replayed at #{rate}; #{report["elapsed_s"]} s; load #{report.dig("machine", "load_average_before")&.first} " \
             "before, #{report.dig("machine", "load_average_after")&.first} after; client CPU " \
             "#{report.dig("confirmation", "client_cpu_percent")}% of a core"
  pid = start_server(env, setting, dir)
  begin
    passes = Hash.new(0)
    RUNS.times do |i|
      log "#{shape}: replay #{i + 1}/#{RUNS} at #{rate} req/s (load #{load_average})"
      b = bench(rate, File.join(dir, "bench-#{i + 1}.json"))
      passes[:bench] += 1 if b[:ok]
      summary << "- run #{i + 1}: tsubame bench #{describe(b)} (load #{load_average})"
      flush.call
      next unless independent_client

      sleep 3
      k = if CLIENT == "k6"
            k6(rate, File.join(dir, "k6-#{i + 1}.json"), dir)
          else
            vegeta(rate, File.join(dir, "vegeta-#{i + 1}.json"))
          end
      passes[:other] += 1 if k[:ok]
      passes[:other_runs] += 1
      summary << "- run #{i + 1}: #{CLIENT} #{describe(k)} (load #{load_average})"
      flush.call
      sleep 3
    end
    summary << "" << "replays meeting the SLO: tsubame bench #{passes[:bench]}/#{RUNS}, " \
                     "#{CLIENT} #{passes[:other]}/#{passes[:other_runs]}" \
                     "#{" (#{CLIENT} not found for the other runs)" if passes[:other_runs] < RUNS}"
    best = nil
    SWEEP_MAX.times do |i|
      r = (confirmed * (SWEEP_FROM + (i * SWEEP_STEP))).round
      log "#{shape}: sweep #{r} req/s (load #{load_average})"
      sleep 3
      s = bench(r, File.join(dir, "sweep-#{r}.json"))
      summary << "- sweep #{r} req/s: #{describe(s)} (load #{load_average})"
      unless s[:ok]
        # Once more: on a shared machine one stall can break a p95.
        sleep 3
        s = bench(r, File.join(dir, "sweep-#{r}-again.json"))
        summary << "- sweep #{r} req/s again: #{describe(s)} (load #{load_average})"
      end
      flush.call
      break unless s[:ok]

      best = r
    end
    # The confirmed rate held for the whole confirmation period: the
    # sweep starts above it, and it is the best if nothing above holds.
    best ||= confirmed
    summary << "" << format("best rate holding %d s: %s req/s%s; replayed %s = %.0f%% of it", DURATION, best,
                            best == confirmed ? " (the confirmed rate; no sweep rate above it held)" : "", rate,
                            rate * 100.0 / best) << ""
  ensure
    stop_server(pid)
  end
  flush.call
end
puts summary
