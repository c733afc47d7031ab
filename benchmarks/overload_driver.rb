# frozen_string_literal: true

# Open-loop load for benchmarks/overload.sh: requests are started on a
# fixed schedule whatever the server does, and each latency is measured
# from its scheduled start, so a stalled server cannot hide its delay.
#
#   ruby overload_driver.rb mixed PORT RATE SECONDS HEALTH_PATH
#   ruby overload_driver.rb scenario1 PORT HEALTH_PATH
require "net/http"
require "json"

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

def get(port, path, timeout)
  http = Net::HTTP.new("127.0.0.1", port)
  http.open_timeout = http.read_timeout = timeout
  http.max_retries = 0
  http.request(Net::HTTP::Get.new(path)).code.to_i
rescue StandardError
  0
end

def pct(values, q)
  return nil if values.empty?

  sorted = values.sort
  sorted[[(sorted.size * q).ceil - 1, 0].max]
end

def ms(value) = value ? (value * 1000).round(1) : nil

def health_loop(port, path, stop)
  samples = []
  until stop[0]
    t = now
    code = get(port, path, 5)
    samples << [code, now - t]
    sleep 0.2
  end
  samples
end

mode, port = ARGV[0], Integer(ARGV[1])
case mode
when "mixed"
  rate, seconds, health = Float(ARGV[2]), Float(ARGV[3]), ARGV[4]
  stop = [false]
  prober = Thread.new { health_loop(port, health, stop) }
  results = Queue.new
  start = now
  total = (rate * seconds).to_i
  threads = Array.new(total) do |i|
    due = start + (i / rate)
    sleep [due - now, 0].max
    path = (i % 10).zero? ? "/io" : "/fast"
    Thread.new { results << [path, get(port, path, 30), now - due] }
  end
  threads.each(&:join)
  stop[0] = true
  probes = prober.value
  all = Array.new(results.size) { results.pop }
  fast = all.select { |p, _, _| p == "/fast" }
  ok = fast.select { |_, c, _| c == 200 }.map(&:last)
  puts JSON.generate(
    requests: all.size, success_ratio: (all.count { |_, c, _| c == 200 }.to_f / all.size).round(4),
    codes: all.map { |_, c, _| c }.tally,
    fast_p50_ms: ms(pct(ok, 0.5)), fast_p95_ms: ms(pct(ok, 0.95)), fast_p99_ms: ms(pct(ok, 0.99)),
    health_ok: probes.count { |c, _| c == 200 }, health_total: probes.size,
    health_p99_ms: ms(pct(probes.map(&:last), 0.99)), health_max_ms: ms(probes.map(&:last).max)
  )
when "scenario1"
  health = ARGV[2]
  stop = [false]
  prober = Thread.new { health_loop(port, health, stop) }
  started = now
  clients = Array.new(10) { Thread.new { t = now; [get(port, "/slow", 3), now - t] } }.map(&:value)
  stop[0] = true
  probes = prober.value
  puts JSON.generate(
    clients: clients.map(&:first).tally, client_max_s: clients.map(&:last).max.round(2),
    wall_s: (now - started).round(2),
    health_ok: probes.count { |c, _| c == 200 }, health_total: probes.size,
    health_max_ms: ms(probes.map(&:last).max)
  )
end
