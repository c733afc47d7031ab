# frozen_string_literal: true

# make soak: a million mixed requests against a 2-worker cluster, then
# checks that the workers did not leak. Figures printed at the end:
#
# - RSS of each worker after warm-up and at the end (must grow < 5%);
# - open descriptors (/proc/PID/fd) and threads (/proc/PID/task) of each
#   worker, idle, before and after (must be equal);
# - requests, status codes and errors of each load phase (no error, all 200).
#
# The load is tsubame-bench with a targets file mixing the body shapes of
# benchmarks/apps (String, Array, chunked `each`, file), sizes from 0 to
# 64 KiB, and uploads in memory (2 KiB) and spooled to disk (300 KiB);
# most of it over keep-alive, SOAK_CLOSE_SHARE of it one connection per
# request. SOAK_REQUESTS (default 1,000,000) sets the total.

require "json"
require "open3"
require "rbconfig"
require "socket"
require "tmpdir"

module Soak
  ROOT = File.expand_path("../..", __dir__)
  EXE = File.join(ROOT, "exe", "tsubame")
  BENCH = File.join(ROOT, "lib", "tsubame", "tsubame-bench")
  TOTAL = Integer(ENV.fetch("SOAK_REQUESTS", "1000000"))
  WARMUP = Integer(ENV.fetch("SOAK_WARMUP", "100000"))
  WARMUP_ROUNDS = 8
  WARMUP_STABLE = 0.02
  CLOSE_SHARE = Float(ENV.fetch("SOAK_CLOSE_SHARE", "0.1"))
  WORKERS = 2
  # Left unset, the server caps glibc's malloc arenas at 2 itself (with
  # glibc's default of 8 per core, each of a worker's threads grows an
  # arena that keeps its high-water mark, and RSS creeps for reasons that
  # are not leaks). SOAK_MALLOC_ARENA_MAX=N runs the workers with that
  # value instead, e.g. 16 for glibc's default on 2 cores.
  MALLOC_ARENA_MAX = ENV.fetch("SOAK_MALLOC_ARENA_MAX", "")
  RSS_GROWTH_LIMIT = 0.05

  TARGETS = <<~TARGETS
    GET /string weight=4
    GET /string weight=2
        X-Body-KiB: 16
    GET /array weight=3
        X-Body-KiB: 4
    GET /chunked weight=3
        X-Body-KiB: 8
    GET /file weight=2
        X-Body-KiB: 64
    GET /string weight=1
        X-Body-KiB: 0
    POST /upload @small.bin weight=2
        Content-Type: application/octet-stream
    POST /upload @large.bin weight=1
        Content-Type: application/octet-stream
  TARGETS

  module_function

  def run
    abort "soak: #{BENCH} is missing; run make build" unless File.executable?(BENCH)
    Dir.mktmpdir("tsubame-soak") do |dir|
      File.write(File.join(dir, "targets.txt"), TARGETS)
      File.binwrite(File.join(dir, "small.bin"), "s" * 2048)
      File.binwrite(File.join(dir, "large.bin"), "L" * (300 * 1024))
      server = start_server(dir)
      begin
        soak(server, dir)
      ensure
        stop_server(server)
      end
    end
  end

  ROUNDS = 5

  # Warm-up rounds of the same mix (see warm_up); then ROUNDS rounds of
  # TOTAL / ROUNDS requests, each mostly keep-alive with its share of
  # one-request connections. Workers are measured idle after each round,
  # so the series shows a trend rather than one noisy pair of numbers.
  def soak(server, dir)
    url = "http://127.0.0.1:#{server[:port]}/"
    targets = File.join(dir, "targets.txt")
    puts "soak: #{TOTAL} requests in #{ROUNDS} rounds after warm-up rounds of #{WARMUP}, #{WORKERS} workers, " \
         "MALLOC_ARENA_MAX=#{MALLOC_ARENA_MAX.empty? ? "(unset: Tsubame's default cap, 2)" : MALLOC_ARENA_MAX}, machine load #{loadavg}"
    warmup, before = warm_up(server, url, targets)
    series = [before]
    peak = Hash.new(0)
    sampler = Thread.new do
      loop do
        sample(server).each { |pid, s| peak[pid] = [peak[pid], s[:rss_kb]].max }
        sleep 1
      end
    end
    started = monotonic
    phases = Array.new(ROUNDS) do |i|
      phase = round("round #{i + 1}", url, targets, TOTAL / ROUNDS)
      sampler.wakeup
      series << settle_and_sample(server)
      phase
    end
    elapsed = monotonic - started
    sampler.kill
    report([warmup] + phases, series, peak, elapsed)
  end

  # Rounds of WARMUP requests until every worker's idle RSS moved less
  # than WARMUP_STABLE since the previous round (at most WARMUP_ROUNDS):
  # the allocator's high-water mark differs between processes and takes a
  # while to settle, and a baseline taken before it has is not a baseline.
  def warm_up(server, url, targets)
    rounds = []
    previous = nil
    WARMUP_ROUNDS.times do |i|
      rounds << round("warm-up #{i + 1}", url, targets, WARMUP)
      current = settle_and_sample(server)
      puts "  warm-up #{i + 1}: RSS KiB #{current.map { |pid, s| "#{pid}=#{s[:rss_kb]}" }.join(" ")}"
      stable = previous && current.all? do |pid, s|
        (s[:rss_kb] - previous.dig(pid, :rss_kb).to_i).abs <= previous.dig(pid, :rss_kb).to_i * WARMUP_STABLE
      end
      return [combine("warm-up", rounds), current] if stable

      previous = current
    end
    abort "soak: RSS did not settle within #{WARMUP_ROUNDS} warm-up rounds"
  end

  def combine(name, rounds)
    { name: name, requests: rounds.sum { |r| r[:requests] },
      codes: rounds.map { |r| r[:codes] }.reduce { |a, b| a.merge(b) { |_, x, y| x + y } },
      errors: rounds.map { |r| r[:errors] }.reduce { |a, b| a.merge(b) { |_, x, y| x + y } } }
  end

  # One round: the keep-alive share, then the one-request-per-connection
  # share; returns the two combined.
  def round(name, url, targets, count)
    closed = (count * CLOSE_SHARE).round
    kept = bench(url, targets, count - closed, keepalive: true)
    fresh = bench(url, targets, closed, keepalive: false)
    { name: name, requests: kept[:requests] + fresh[:requests],
      codes: kept[:codes].merge(fresh[:codes]) { |_, a, b| a + b }, errors: kept[:errors].merge(fresh[:errors]) }
  end

  def bench(url, targets, count, keepalive:)
    args = [BENCH, "--json", "-q", "-n", count.to_s, "-c", keepalive ? "32" : "8", "--timeout", "30s",
            "--targets", targets]
    args << "--no-keepalive" unless keepalive
    out, err, status = Open3.capture3(*args, url)
    abort "soak: tsubame-bench failed: #{err}" unless status.success?
    result = JSON.parse(out)
    { requests: result["requests"], codes: result["status_codes"], errors: result["errors"] }
  end

  # Lets the load's connections close and the workers go idle, so
  # descriptors and threads are counted at rest.
  def settle_and_sample(server)
    sleep 3
    sample(server)
  end

  def sample(server)
    server[:workers].to_h do |pid|
      [pid, { rss_kb: proc_status(pid, "VmRSS").to_i, fds: Dir.children("/proc/#{pid}/fd").size,
              threads: Dir.children("/proc/#{pid}/task").size }]
    end
  end

  def proc_status(pid, key)
    File.read("/proc/#{pid}/status")[/^#{key}:\s+(\d+)/, 1]
  end

  def report(phases, series, peak, elapsed)
    failures = []
    puts
    puts format("%-10s %10s  %-24s %s", "phase", "requests", "status codes", "errors")
    phases.each do |p|
      puts format("%-10s %10d  %-24s %s", p[:name], p[:requests], p[:codes].to_json, p[:errors].to_json)
      failures << "#{p[:name]}: errors #{p[:errors]}" unless p[:errors].empty?
      failures << "#{p[:name]}: non-200 answers #{p[:codes]}" unless p[:codes].keys == ["200"]
    end
    measured = phases.drop(1).sum { |p| p[:requests] }
    failures << "only #{measured} requests ran" if measured < TOTAL
    puts format("%d requests in %.0f s (%.0f req/s), machine load %s", measured, elapsed, measured / elapsed, loadavg)
    puts
    puts "idle figures per worker: after warm-up, then after each round"
    before = series.first
    after = series.last
    before.each do |pid, b|
      a = after[pid]
      next failures << "worker #{pid} is gone" unless a

      growth = (a[:rss_kb] - b[:rss_kb]).to_f / b[:rss_kb]
      puts format("worker %d  RSS KiB %s  (peak under load %d, growth %+.1f%%)", pid,
                  series.map { |s| s.dig(pid, :rss_kb) }.join(" "), peak[pid], growth * 100)
      puts format("%14s  fds %s  threads %s", "", series.map { |s| s.dig(pid, :fds) }.join(" "),
                  series.map { |s| s.dig(pid, :threads) }.join(" "))
      failures << "worker #{pid}: RSS grew #{(growth * 100).round(1)}%" if growth >= RSS_GROWTH_LIMIT
      failures << "worker #{pid}: descriptors #{b[:fds]} -> #{a[:fds]}" if a[:fds] != b[:fds]
      failures << "worker #{pid}: threads #{b[:threads]} -> #{a[:threads]}" if a[:threads] != b[:threads]
    end
    puts
    if failures.empty?
      puts "soak: OK"
    else
      puts "soak: FAILED\n  #{failures.join("\n  ")}"
      exit 1
    end
  end

  def start_server(dir)
    log = File.join(dir, "server.log")
    ctl = File.join(dir, "ctl.sock")
    arena = MALLOC_ARENA_MAX.empty? ? nil : MALLOC_ARENA_MAX
    # Idle figures are taken 3 s after a round: a 1 s idle_memory_trim has
    # given the round's freed memory back by then, so what RSS still holds
    # is live memory (or a leak), not glibc's high-water mark.
    args = ["-e", "production", "-w", WORKERS.to_s, "-t", "4:4", "-b", "tcp://127.0.0.1:0", "--idle-memory-trim", "1",
            "--control-url", "unix://#{ctl}", "--control-token", "soak", File.join(__dir__, "soak.ru")]
    pid = Process.spawn({ "MALLOC_ARENA_MAX" => arena }, RbConfig.ruby, EXE, *args,
                        out: log, err: [log, "a"], in: File::NULL)
    deadline = monotonic + 30
    loop do
      text = File.read(log)
      workers = text.scan(/Worker \d+ \(PID: (\d+)\) booted/).flatten.map(&:to_i)
      port = text[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1]
      return { pid: pid, port: port.to_i, workers: workers, log: log } if port && workers.size == WORKERS
      abort "soak: the server did not boot:\n#{text}" if monotonic > deadline || Process.waitpid(pid, Process::WNOHANG)

      sleep 0.1
    end
  end

  def stop_server(server)
    Process.kill("TERM", server[:pid])
    Process.wait(server[:pid])
    deaths = File.read(server[:log]).scan(/died|killing it/)
    abort "soak: workers died or were killed during the run" unless deaths.empty?
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  def loadavg
    File.read("/proc/loadavg").split.first(3).join(" ")
  end

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end

Soak.run if $PROGRAM_NAME == __FILE__
