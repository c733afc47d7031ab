#!/usr/bin/env ruby
# frozen_string_literal: true

# ActionCable across a cluster (docs/REALTIME.md): the Rails app of the
# real-time tests (test/realtime/cable_app.ru) with CLIENTS WebSocket
# clients (test/realtime/cable_clients.py, Debian's python3-websockets),
# on each of these servers, one after the other in every round:
#
#   tsubame-w2      -w 2, adapter: tsubame
#   tsubame-w2-ws   -w 2 --websocket-workers 1, adapter: tsubame (a third
#                   worker holds every WebSocket connection)
#   tsubame-w2-ws2  -w 2 --websocket-workers 2, adapter: tsubame
#   tsubame-async   single process, adapter: async
#   tsubame-w2-redis  -w 2, adapter: redis, on a redis-server this script
#                   starts on loopback (Debian's redis-server, ruby-redis)
#   puma-async      Debian's Puma 5.6.5, single process, adapter: async
#   puma-w2-redis   Puma -w 2, adapter: redis
#
# For each: /ping with wrk and no WebSocket open (requests/s, p99); then
# the clients connect and subscribe; BROADCASTS broadcasts are made one
# after the other (GET /broadcast, each on a new connection, so in a
# cluster both workers make some) and the deliveries counted until every
# client has all of them (time from the first GET to the last delivery);
# then /ping with wrk again while one client broadcasts 5 times a second.
# wrk keeps the server saturated (10 connections, each sending its next
# request on each answer), so its p99 measures throughput as much as
# latency: any CPU the broadcasts take shows up as queueing. /ping is
# therefore also offered at a fixed PING_RATE (default 200 req/s, open
# loop, `tsubame bench -r`: latency counted from when each request was
# due) without clients and again while the broadcasts flow: the p99 a
# plain route keeps at a given traffic.
#
#   benchmarks/cable.rb
#   ROUNDS=3 CLIENTS=1000 BROADCASTS=20 SERVERS=tsubame-w2,tsubame-async benchmarks/cable.rb
#   TSUBAME_ARGS="--handoff-spin 0" SERVERS=tsubame-async,puma-async benchmarks/cable.rb

require "json"
require "net/http"
require "open3"
require "rbconfig"
require "socket"
require "timeout"

ROOT = File.expand_path("..", __dir__)
APP = File.join(ROOT, "test/realtime/cable_app.ru")
CLIENTS_PY = File.join(ROOT, "test/realtime/cable_clients.py")
CLIENTS = Integer(ENV.fetch("CLIENTS", "1000"))
BROADCASTS = Integer(ENV.fetch("BROADCASTS", "20"))
ROUNDS = Integer(ENV.fetch("ROUNDS", "3"))
WRK_SECONDS = Integer(ENV.fetch("WRK_SECONDS", "8"))
PING_RATE = Integer(ENV.fetch("PING_RATE", "200"))
PORT = Integer(ENV.fetch("PORT", "19800"))
REDIS_PORT = Integer(ENV.fetch("REDIS_PORT", "19879"))
REDIS_URL = "redis://127.0.0.1:#{REDIS_PORT}/0"

def tsubame(workers, adapter, *extra)
  lambda do |port|
    cmd = [RbConfig.ruby, File.join(ROOT, "exe/tsubame"), "-e", "production", "-t", "5:5", "-q",
           "-b", "tcp://127.0.0.1:#{port}", *extra, *ENV.fetch("TSUBAME_ARGS", "").split]
    cmd += ["-w", workers.to_s] if workers.positive?
    [cmd + [APP], adapter]
  end
end

def puma(workers, adapter)
  lambda do |port|
    cmd = ["puma", "-e", "production", "-t", "5:5", "-q", "-b", "tcp://127.0.0.1:#{port}"]
    cmd += ["-w", workers.to_s] if workers.positive?
    [cmd + [APP], adapter]
  end
end

ALL = {
  "tsubame-w2" => tsubame(2, "tsubame"),
  "tsubame-w2-ws" => tsubame(2, "tsubame", "--websocket-workers", "1"),
  "tsubame-w2-ws2" => tsubame(2, "tsubame", "--websocket-workers", "2"),
  "tsubame-async" => tsubame(0, "async"),
  "tsubame-w2-redis" => tsubame(2, "redis"),
  "puma-async" => puma(0, "async"),
  "puma-w2-redis" => puma(2, "redis")
}.freeze
NAMES = ENV.fetch("SERVERS", ALL.keys.join(",")).split(",")

def monotonic
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def wait_for(port, path = "/ping", timeout: 60)
  deadline = monotonic + timeout
  begin
    Net::HTTP.get_response(URI("http://127.0.0.1:#{port}#{path}"))
  rescue SystemCallError, IOError, Net::ReadTimeout
    raise "nothing answered on #{port}" if monotonic > deadline

    sleep 0.1
    retry
  end
end

def start_redis
  pid = Process.spawn("redis-server", "--port", REDIS_PORT.to_s, "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", out: File::NULL, err: File::NULL)
  deadline = monotonic + 10
  begin
    TCPSocket.new("127.0.0.1", REDIS_PORT).close
  rescue SystemCallError
    raise "redis-server did not start" if monotonic > deadline

    sleep 0.05
    retry
  end
  pid
end

# [requests/s, p99 ms] of `wrk --latency` on /ping.
def wrk(port, seconds: WRK_SECONDS)
  out, = Open3.capture2("wrk", "-t1", "-c10", "-d#{seconds}s", "--latency", "http://127.0.0.1:#{port}/ping")
  rps = out[%r{Requests/sec:\s+([\d.]+)}, 1].to_f
  value, unit = out.match(/^\s+99%\s+([\d.]+)(us|ms|s)/)&.captures
  p99 = value.to_f * { "us" => 0.001, "ms" => 1.0, "s" => 1000.0 }.fetch(unit, Float::NAN)
  [rps, p99]
end

# p99 ms of /ping offered at PING_RATE req/s for `seconds` (open loop),
# or Infinity when not every request was answered 2xx (a median then
# shows whether most rounds failed).
def paced_p99(port, seconds: WRK_SECONDS)
  out, _err, status = Open3.capture3(RbConfig.ruby, File.join(ROOT, "exe/tsubame"), "bench", "-r", PING_RATE.to_s,
                                     "-d", "#{seconds}s", "-c", "20", "--preconnect", "--timeout", "5s", "--json",
                                     "http://127.0.0.1:#{port}/ping")
  return Float::INFINITY unless status.success?

  r = JSON.parse(out)
  return Float::INFINITY unless r["success"] == r["requests"] + r.fetch("unsent", 0)

  r.dig("latency_ms", "p99").to_f
end

# The clients process, one JSON line per command.
class Clients
  def initialize(port)
    @stdin, @stdout, @thread = Open3.popen2("/usr/bin/python3", CLIENTS_PY, "--url", "ws://127.0.0.1:#{port}/cable",
                                            "--http", "http://127.0.0.1:#{port}", "--clients", CLIENTS.to_s,
                                            "--timeout", "90", err: File::NULL)
    @subscribed = read(120)
  end

  attr_reader :subscribed

  def send_line(line)
    @stdin.puts(line)
    @stdin.flush
  end

  def read(timeout)
    raise "clients: no answer in #{timeout}s" unless @stdout.wait_readable(timeout)

    JSON.parse(@stdout.gets || raise("clients exited"))
  end

  def close
    send_line("quit")
    read(20)
  rescue StandardError
    nil
  ensure
    begin
      Process.kill("KILL", @thread.pid)
    rescue Errno::ESRCH
      nil
    end
    @thread.join(5)
  end
end

def run(name, port)
  cmd, adapter = ALL.fetch(name).call(port)
  env = { "CABLE_ADAPTER" => adapter }
  env["CABLE_REDIS_URL"] = REDIS_URL if adapter == "redis"
  pid = Process.spawn(env, *cmd, out: File::NULL, err: File::NULL, pgroup: true)
  wait_for(port)
  sleep 2 # cluster workers: both booted and serving
  wrk(port, seconds: 2) # warm-up: Rails' first requests, both workers
  rps_idle, p99_idle = wrk(port)
  paced_idle = paced_p99(port)
  clients = Clients.new(port)
  raise "#{name}: #{clients.subscribed.inspect}" unless clients.subscribed["subscribed"] == CLIENTS

  clients.send_line("burst #{BROADCASTS} 60")
  burst = clients.read(90)
  clients.send_line("pace 5 #{WRK_SECONDS + 2}")
  sleep 1
  rps_busy, p99_busy = wrk(port)
  pace = clients.read(WRK_SECONDS + 30)
  clients.send_line("pace 5 #{WRK_SECONDS + 2}")
  sleep 1
  paced_busy = paced_p99(port)
  clients.read(WRK_SECONDS + 30)
  { "delivered" => burst["delivered"], "expected" => burst["expected"], "seconds" => burst["seconds"],
    "pace_delivered" => pace["delivered"], "pace_expected" => pace["expected"],
    "rps_idle" => rps_idle, "p99_idle" => p99_idle, "rps_busy" => rps_busy, "p99_busy" => p99_busy,
    "paced_p99_idle" => paced_idle, "paced_p99_busy" => paced_busy }
ensure
  clients&.close
  if pid
    begin
      Process.kill("TERM", -pid)
      Timeout.timeout(20) { Process.wait(pid) }
    rescue Timeout::Error
      Process.kill("KILL", -pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
  end
end

def median(values)
  sorted = values.compact.sort
  return nil if sorted.empty?

  mid = sorted.size / 2
  sorted.size.odd? ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2.0
end

redis = start_redis if NAMES.any? { |n| n.end_with?("redis") }
results = Hash.new { |h, k| h[k] = [] }
begin
  ROUNDS.times do |round|
    NAMES.each_with_index do |name, i|
      result = run(name, PORT + (round * NAMES.size) + i)
      warn "round #{round + 1} #{name}: #{result.to_json}"
      results[name] << result
    end
  end
ensure
  if redis
    Process.kill("TERM", redis)
    Process.wait(redis)
  end
end

puts "CLIENTS=#{CLIENTS} BROADCASTS=#{BROADCASTS} ROUNDS=#{ROUNDS} benchmarks/cable.rb (medians; load #{File.read('/proc/loadavg').split.first})"
puts format("%-17s %11s %10s %12s %9s %12s %9s %13s %10s %10s", "server", "delivered", "last s", "ping idle/s",
            "p99 ms", "ping busy/s", "p99 ms", "paced deliv.", "@#{PING_RATE} idle", "@#{PING_RATE} busy")
medians = NAMES.to_h do |name|
  rows = results[name]
  keys = %w[delivered expected seconds rps_idle p99_idle rps_busy p99_busy pace_delivered pace_expected
            paced_p99_idle paced_p99_busy]
  m = keys.to_h { |k| [k, median(rows.map { |r| r[k] })] }
  # Paced: the broadcasts made in the time vary (a slow GET delays the
  # next), so the medians of delivered and expected may come from
  # different rounds.
  puts format("%-17s %5d/%-5d %10.3f %12.0f %9.2f %12.0f %9.2f %6d/%-6d %10.2f %10.2f", name, m["delivered"],
              m["expected"], m["seconds"], m["rps_idle"], m["p99_idle"], m["rps_busy"], m["p99_busy"],
              m["pace_delivered"], m["pace_expected"], m["paced_p99_idle"] || Float::NAN,
              m["paced_p99_busy"] || Float::NAN)
  [name, m]
end

ratio = lambda do |label, a, b, key|
  next unless medians[a] && medians[b] && medians[a][key] && medians[b][key]&.positive?

  puts format("%-52s %.2f", "#{label}: #{a} / #{b}", medians[a][key] / medians[b][key])
end
ratio.call("time to last delivery", "tsubame-w2", "tsubame-async", "seconds")
ratio.call("time to last delivery", "tsubame-w2-ws", "tsubame-async", "seconds")
ratio.call("time to last delivery", "tsubame-w2-ws", "tsubame-w2-redis", "seconds")
ratio.call("time to last delivery", "tsubame-w2-ws2", "tsubame-async", "seconds")
ratio.call("time to last delivery", "tsubame-w2-ws2", "tsubame-w2-redis", "seconds")
ratio.call("time to last delivery", "tsubame-w2", "tsubame-w2-redis", "seconds")
ratio.call("time to last delivery", "tsubame-async", "puma-async", "seconds")
ratio.call("/ping req/s while broadcasting", "tsubame-async", "puma-async", "rps_busy")
ratio.call("/ping req/s while broadcasting", "tsubame-w2", "puma-w2-redis", "rps_busy")
ratio.call("/ping req/s while broadcasting", "tsubame-w2-ws", "puma-w2-redis", "rps_busy")
ratio.call("/ping req/s while broadcasting", "tsubame-w2-ws2", "puma-w2-redis", "rps_busy")
NAMES.each do |name|
  m = medians[name]
  puts format("%-52s %.2f", "/ping p99 with clients / without: #{name}", m["p99_busy"] / m["p99_idle"]) if m["p99_idle"]&.positive?
  if m["paced_p99_idle"]&.positive? && m["paced_p99_busy"]
    puts format("%-52s %.2f", "/ping p99 at #{PING_RATE}/s with clients / without: #{name}",
                m["paced_p99_busy"] / m["paced_p99_idle"])
  end
end
