#!/usr/bin/env ruby
# frozen_string_literal: true

# WebSockets side by side: Tsubame's rack.upgrade, Iodine's rack.upgrade
# (when PEERS_DIR/iodine exists, see docs/BENCHMARKS.md) and faye-websocket
# over rack.hijack on Debian's Puma. For each server, one after the other:
#
#   - idle: CLIENTS connections opened and left idle; the server's RSS and
#     OS threads before and after (the whole process tree);
#   - broadcast: one publish to all of them, timed until the last client
#     has read it (Tsubame and Iodine; faye has no publish). With
#     BROADCAST_CLIENT=rust the idle connections and the broadcast are
#     those of crates/tsubame-bench/examples/ws_broadcast.rs, which reads
#     every socket at once on epoll (the Ruby client reads them one after
#     the other, and its reading is then most of the figure);
#   - echo: ECHOES round trips of a 32-byte text message on one connection.
#     With ECHO_CLIENT=rust they are those of
#     crates/tsubame-bench/examples/ws_echo.rs (blocking sockets, no Ruby in
#     the loop: the Ruby client's own ~20 µs per round trip otherwise sits
#     in every server's figure alike).
#
#   benchmarks/websocket.rb
#   CLIENTS=10000 ECHOES=5000 ROUNDS=3 PEERS_DIR=/work/peers benchmarks/websocket.rb
#
# BASELINE_ROOT=/path/to/another/checkout (built; several separated by
# commas) adds that checkout's Tsubame as "tsubame@DIRNAME" to every
# round, so a change is measured against the build before it in the same
# minutes.

require "net/http"
require "rbconfig"
require "timeout"
require_relative "../test/upgrade/support"

ROOT = File.expand_path("..", __dir__)
CLIENTS = Integer(ENV.fetch("CLIENTS", "10000"))
ECHOES = Integer(ENV.fetch("ECHOES", "5000"))
ROUNDS = Integer(ENV.fetch("ROUNDS", "3"))
PORT = Integer(ENV.fetch("PORT", "19700"))
# The path of a tsubame-bench example client, built first when `wanted`.
def rust_client(name, wanted)
  if wanted
    system("cargo", "build", "--release", "-q", "-p", "tsubame-bench", "--example", name, chdir: ROOT, exception: true)
  end
  File.join(ROOT, "target/release/examples", name)
end
RUST_CLIENT = ENV["BROADCAST_CLIENT"] == "rust"
WS_BROADCAST = rust_client("ws_broadcast", RUST_CLIENT)
RUST_ECHO = ENV["ECHO_CLIENT"] == "rust"
WS_ECHO = rust_client("ws_echo", RUST_ECHO)
Client = Tsubame::UpgradeSupport::Client

SERVERS = {
  "tsubame" => lambda { |port|
    [RbConfig.ruby, File.join(ROOT, "exe/tsubame"), "-b", "tcp://127.0.0.1:#{port}", "-t", "1:1", "-q",
     # The echo loop sends far more than the default 1,000 messages a
     # second a client may send; Iodine has no such limit.
     "--websocket-max-rate", "0", File.join(ROOT, "benchmarks/apps/upgrade_echo.ru")]
  },
  "puma+faye" => lambda { |port|
    ["puma", "-b", "tcp://127.0.0.1:#{port}", "-t", "1:1", "-q", File.join(ROOT, "benchmarks/apps/faye_echo.ru")]
  }
}
ENV.fetch("BASELINE_ROOT", "").split(",").each do |baseline|
  SERVERS["tsubame@#{File.basename(baseline)}"] = lambda { |port|
    SERVERS["tsubame"].call(port).map { |arg| arg.start_with?(ROOT) ? arg.sub(ROOT, File.expand_path(baseline)) : arg }
  }
end
peers = ENV.fetch("PEERS_DIR", nil)
if peers && File.executable?(File.join(peers, "iodine"))
  SERVERS["iodine"] = ->(port) { [File.join(peers, "iodine"), port.to_s, File.join(ROOT, "benchmarks/apps/upgrade_echo.ru")] }
end

def tree(pid)
  children = Dir["/proc/[0-9]*/stat"].filter_map do |stat|
    fields = File.read(stat).split(") ").last.split
    File.basename(File.dirname(stat)).to_i if fields[1].to_i == pid
  rescue SystemCallError
    nil
  end
  [pid] + children.flat_map { |child| tree(child) }
end

def status_sum(pid, field)
  tree(pid).sum do |p|
    File.read("/proc/#{p}/status")[/^#{field}:\s+(\d+)/, 1].to_i
  rescue SystemCallError
    0
  end
end

def wait_up(port)
  Timeout.timeout(20) do
    loop do
      return if Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/")).code == "200"
    rescue SystemCallError, EOFError
      sleep 0.1
    end
  end
end

def median(values)
  sorted = values.sort
  sorted[sorted.size / 2]
end

def run(name, command)
  pid = Process.spawn(*command, out: File::NULL, err: File::NULL, pgroup: true)
  wait_up(PORT)
  sleep 0.5
  result = { name: name }
  if RUST_ECHO
    report = IO.popen([WS_ECHO, PORT.to_s, ECHOES.to_s], &:read)
    figures = report.match(/median_us ([\d.]+) p99_us ([\d.]+)/) or raise "#{name}: ws_echo: #{report}"
    result[:echo_us] = Float(figures[1])
    result[:echo_p99_us] = Float(figures[2])
  else
    echo = Client.new(PORT)
    raise "#{name}: handshake refused: #{echo.response_head}" unless echo.accepted?

    times = Array.new(ECHOES) do
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      echo.text("x" * 32)
      echo.read_message
      Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    end
    result[:echo_us] = median(times) * 1e6
    result[:echo_p99_us] = times.sort[(times.size * 0.99).floor] * 1e6
  end
  return result if name == "puma+faye"

  rss0 = status_sum(pid, "VmRSS")
  threads0 = status_sum(pid, "Threads")
  return result.merge(rust_broadcast(pid, rss0, threads0)) if RUST_CLIENT

  clients = Array.new(CLIENTS) { Client.new(PORT) }
  sleep 1
  result[:rss_mb] = (status_sum(pid, "VmRSS") - rss0) / 1024.0
  result[:threads_added] = status_sum(pid, "Threads") - threads0
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  Net::HTTP.get(URI("http://127.0.0.1:#{PORT}/publish"))
  received = clients.count { |c| c.read_message(timeout: 10) == "broadcast" }
  result[:broadcast_ms] = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) * 1000
  result[:received] = received
  clients.each(&:close)
  result
ensure
  echo&.close
  Process.kill("-KILL", pid) if pid
  Process.wait(pid) if pid
end

# Idle connections and the broadcast by ws_broadcast: it says when its
# connections are open, the memory is read, then it publishes and reports.
def rust_broadcast(pid, rss0, threads0)
  IO.popen([WS_BROADCAST, PORT.to_s, CLIENTS.to_s], "r+") do |io|
    line = io.gets or raise "ws_broadcast ended before connecting"
    raise "ws_broadcast: #{line}" unless line.start_with?("connected")

    sleep 1
    result = { rss_mb: (status_sum(pid, "VmRSS") - rss0) / 1024.0,
               threads_added: status_sum(pid, "Threads") - threads0 }
    io.puts("go")
    report = io.gets.to_s
    received, last = report.match(/received (\d+) of \d+, last ([\d.]+) ms/)&.captures
    raise "ws_broadcast: #{report}" unless last

    result.merge(broadcast_ms: Float(last), received: Integer(received))
  end
end

rows = Hash.new { |h, k| h[k] = [] }
ROUNDS.times do
  SERVERS.each do |name, command|
    row = run(name, command.call(PORT))
    rows[name] << row
    warn "  #{row.map { |k, v| "#{k}=#{v.is_a?(Float) ? v.round(1) : v}" }.join(" ")}"
  end
end

fields = %i[echo_us echo_p99_us rss_mb threads_added broadcast_ms received]
puts format("%-22s %10s %12s %9s %14s %13s %9s", "server", "echo µs", "echo p99 µs", "RSS MB", "threads added",
            "broadcast ms", "received")
medians = rows.to_h do |name, list|
  [name, fields.to_h { |f| [f, (values = list.filter_map { |r| r[f] }).empty? ? nil : median(values)] }]
end
medians.each do |name, m|
  puts format("%-22s %10s %12s %9s %14s %13s %9s", name, *fields.map { |f| m[f].nil? ? "-" : m[f].round(1) })
end
base = medians.dig("tsubame", :echo_us)
medians.each do |name, m|
  next if name == "tsubame" || m[:echo_us].nil?

  puts format("echo round trip: tsubame is %.2fx %s", m[:echo_us] / base, name)
end
# The same comparison round by round (each round runs every server once,
# one after the other, so a round's ratio shares that moment's load): the
# median of the per-round ratios, and each.
rows.each do |name, list|
  next if name == "tsubame"

  ratios = list.zip(rows["tsubame"]).filter_map { |peer, own| peer[:echo_us] / own[:echo_us] if peer && own }
  next if ratios.empty?

  puts format("echo round trip per round: tsubame is %.2fx %s (median of %s)", median(ratios), name,
              ratios.map { |r| r.round(2) }.join(", "))
end
# The broadcast the same way: each round's time for Tsubame and the peer.
rows.each do |name, list|
  next if name == "tsubame"

  pairs = list.zip(rows["tsubame"]).filter_map do |peer, own|
    [own[:broadcast_ms], peer[:broadcast_ms]] if peer && own && peer[:broadcast_ms] && own[:broadcast_ms]
  end
  next if pairs.empty?

  puts format("broadcast per round, ms: tsubame %s; %s %s", pairs.map { |own, _| own.round }.join(", "), name,
              pairs.map { |_, peer| peer.round }.join(", "))
end
