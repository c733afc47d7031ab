# frozen_string_literal: true

require "test_helper"
require "json"
require_relative "../../benchmarks/fleet_helper"

# Three single-mode instances behind HAProxy, the setup of the issue "Stops,
# restarts and readiness that a load balancer can follow": `option httpchk
# GET /ready`, `inter 500ms fall 2 rise 2`, `http-reuse always`. An
# open-loop client (tsubame-bench) sends 150 req/s through HAProxy to a
# 20 ms endpoint (about a fifth of the fleet's capacity) while
#   steady  nothing happens for 3 s: no request fails, no health check fails
#   term    each instance in turn gets TERM (with --shutdown-delay 2: its
#           readiness fails at once, so HAProxy takes it out before it
#           drains; those failed checks are the point and are not counted
#           against it), is started again once it has exited, and is UP in
#           HAProxy again before the next: no request fails, HAProxy makes
#           no 5xx
#   usr2    each instance in turn gets USR2 (hot restart) and is UP in
#           HAProxy again before the next: no request fails, HAProxy makes
#           no 5xx, and no health check fails (the instance never leaves)
# Every measurement is gathered before anything is asserted, so a failure
# names all the figures at once. FLEET_KEEP=1 prints them even on success
# and keeps the files (HAProxy's config and log, the servers' logs, the
# client's reports). p99 is reported, not asserted: benchmarks/fleet.sh
# measures it at a load where it means something.
class FleetTest < Minitest::Test
  include Tsubame::TestHelpers

  INSTANCES = 3
  RATE = 150
  SHUTDOWN_DELAY = 2
  APP = <<~RUBY
    run lambda { |env|
      sleep 0.02 if env["PATH_INFO"] == "/"
      [200, { "content-type" => "text/plain" }, ["ok"]]
    }
  RUBY

  # One exe/tsubame on a fixed port (a restarted instance must come back on
  # the same one), its pid read from its pidfile.
  class Instance
    attr_reader :port, :log_path

    def initialize(dir, index, port)
      @dir = dir
      @port = port
      @log_path = File.join(dir, "s#{index}.log")
      @pid_path = File.join(dir, "s#{index}.pid")
      @spawned = []
    end

    def start
      before = banners
      File.delete(@pid_path) if File.exist?(@pid_path)
      args = ["-b", "tcp://127.0.0.1:#{@port}", "-t", "5:5", "--readiness-check-path", "/ready",
              "--shutdown-delay", SHUTDOWN_DELAY.to_s, "--pidfile", @pid_path, File.join(@dir, "config.ru")]
      @spawned << Process.spawn(RbConfig.ruby, "-w", Tsubame::TestHelpers::EXE, *args,
                                out: [@log_path, "a"], err: [@log_path, "a"], in: File::NULL)
      wait_banner(before)
    end

    def banners
      File.exist?(@log_path) ? File.read(@log_path).scan("Use Ctrl-C").size : 0
    end

    def wait_banner(before, timeout: 30)
      deadline = Fleet.now + timeout
      until banners > before
        raise "the instance on port #{@port} did not boot in #{timeout} s:\n#{File.read(@log_path)}" if Fleet.now > deadline

        reap
        sleep 0.02
      end
    end

    def pid
      Integer(File.read(@pid_path))
    rescue Errno::ENOENT, ArgumentError
      @spawned.last
    end

    def usr2
      before = banners
      Process.kill("USR2", pid)
      wait_banner(before)
    end

    # TERM, then waits for the process to go (at most `timeout` s).
    def term(timeout: 30)
      target = pid
      Process.kill("TERM", target)
      deadline = Fleet.now + timeout
      while alive?(target)
        raise "pid #{target} still running #{timeout} s after TERM" if Fleet.now > deadline

        sleep 0.02
      end
    end

    def alive?(target)
      reap
      Process.kill(0, target)
      !File.read("/proc/#{target}/stat").match?(/\) Z /)
    rescue Errno::ESRCH, Errno::ENOENT
      false
    end

    def reap
      @spawned.reject! { |p| Process.waitpid(p, Process::WNOHANG) }
    rescue Errno::ECHILD
      @spawned.clear
    end

    def kill
      [pid, *@spawned].compact.uniq.each do |p|
        Process.kill("KILL", p)
      rescue Errno::ESRCH
        nil
      end
      @spawned.each do |p|
        Process.wait(p)
      rescue Errno::ECHILD
        nil
      end
    end
  end

  def setup
    @haproxy = find_haproxy
    assert File.executable?(Fleet::BENCH), "#{Fleet::BENCH} is missing: `make build` builds it"
    @dir = Dir.mktmpdir("tsubame-fleet")
    write_file(@dir, "config.ru", Tsubame::TestHelpers.linted(APP))
    @instances = []
    @pids = []
  end

  def teardown
    Array(@pids).each do |pid|
      Process.kill("KILL", pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
    Array(@instances).each(&:kill)
    return unless @dir

    if ENV["FLEET_KEEP"]
      warn "fleet_test: files kept in #{@dir}"
    else
      FileUtils.rm_rf(@dir)
    end
  end

  def find_haproxy
    path = ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |d| File.join(d, "haproxy") }
    found = (path + ["/usr/sbin/haproxy"]).find { |f| File.executable?(f) }
    flunk "haproxy is not installed: `make deps` installs it (Debian package haproxy)" unless found
    found
  end

  def start_fleet
    @instances = Array.new(INSTANCES) { |i| Instance.new(@dir, i + 1, free_port) }
    @instances.map { |s| Thread.new { s.start } }.each(&:join)
    @port = free_port
    @socket = File.join(@dir, "haproxy.sock")
    @haproxy_log = File.join(@dir, "haproxy.log")
    config = Fleet::HAProxy.config(listen_port: @port, server_ports: @instances.map(&:port), dir: @dir)
    cfg = write_file(@dir, "haproxy.cfg", config)
    @pids << Process.spawn(@haproxy, "-db", "-f", cfg, out: @haproxy_log, err: [:child, :out], in: File::NULL)
    deadline = Fleet.now + 10
    sleep 0.05 until File.socket?(@socket) || Fleet.now > deadline
    assert File.socket?(@socket), "HAProxy did not start:\n#{File.read(@haproxy_log)}"
    INSTANCES.times { |i| Fleet::HAProxy.wait_up(@socket, "s#{i + 1}", 15) }
  end

  def counters
    Fleet::HAProxy.counters(Fleet::HAProxy.stat(@socket))
  end

  # Runs the block under open-loop load through HAProxy; returns the
  # phase's figures.
  def phase(name)
    before = counters
    log_start = File.size(@haproxy_log)
    out = File.join(@dir, "#{name}.json")
    bench = Process.spawn(Fleet::BENCH, "-q", "--json", "-r", RATE.to_s, "-d", "120s", "-c", "50",
                          "http://127.0.0.1:#{@port}/", out: out, err: [:child, :out])
    @pids << bench
    sleep 0.5
    yield
    Process.kill("INT", bench)
    Timeout.timeout(20) { Process.wait(bench) }
    @pids.delete(bench)
    after = counters
    report = JSON.parse(File.read(out))
    log = File.binread(@haproxy_log)[log_start..].to_s
    codes = report["status_codes"].reject { |code, _| code.start_with?("2") }
    {
      name: name, requests: report["requests"], failed: codes.values.sum + report["errors"].values.sum,
      failures: codes.merge(report["errors"]), p50: report.dig("latency_ms", "p50"),
      p99: report.dig("latency_ms", "p99"), max: report.dig("latency_ms", "max"),
      haproxy_5xx: after["frontend_5xx"] - before["frontend_5xx"], proxy_made_5xx: Fleet::HAProxy.proxy_5xx(log),
      chkfail: after["chkfail"] - before["chkfail"], down: after["chkdown"] - before["chkdown"],
      retries: after["retries"] - before["retries"],
      abnormal: Fleet::HAProxy.abnormal(log).reject { |r| r["status"] == 400 && r["server"] == "<NOSRV>" }
    }
  end

  def up(index)
    Fleet::HAProxy.wait_up(@socket, "s#{index + 1}", 30)
    sleep 0.3
  end

  def describe(results)
    base = results.first[:p99]
    results.map do |r|
      format("%-6s %5d requests, %d failed %s, HAProxy 5xx %d (made by it %d), p50 %.1f ms, p99 %.1f ms " \
             "(x%.2f of steady), max %.1f ms, failed checks %d, DOWN %d, retries %d%s",
             r[:name], r[:requests], r[:failed], r[:failures], r[:haproxy_5xx], r[:proxy_made_5xx], r[:p50],
             r[:p99], r[:p99] / base, r[:max], r[:chkfail], r[:down], r[:retries],
             r[:abnormal].empty? ? "" : "\n         HAProxy logged: #{r[:abnormal].first(5).inspect}")
    end.join("\n")
  end

  def test_rolling_term_and_usr2_behind_haproxy_lose_no_request
    start_fleet
    steady = phase("steady") { sleep 3 }
    term = phase("term") do
      @instances.each_with_index do |s, i|
        s.term
        s.start
        up(i)
      end
    end
    usr2 = phase("usr2") do
      @instances.each_with_index do |s, i|
        s.usr2
        up(i)
      end
    end
    figures = describe([steady, term, usr2])
    warn "fleet_test figures:\n#{figures}" if ENV["FLEET_KEEP"]
    problems = []
    [steady, term, usr2].each do |r|
      problems << "#{r[:name]}: #{r[:failed]} requests failed at the client #{r[:failures]}" if r[:failed].positive?
      problems << "#{r[:name]}: HAProxy answered #{r[:haproxy_5xx]} 5xx" if r[:haproxy_5xx].positive?
      problems << "#{r[:name]}: the load did not run (#{r[:requests]} requests)" if r[:requests] < RATE
    end
    [steady, usr2].each do |r|
      problems << "#{r[:name]}: #{r[:chkfail]} failed health checks, #{r[:down]} DOWN" if r[:chkfail].positive?
    end
    if problems.any? { |p| p.include?("connection closed early") }
      problems << "(\"connection closed early\" is HAProxy's silent close: a server closed the reused keep-alive " \
                  "connection HAProxy had sent the request on, so HAProxy closed the client's connection " \
                  "without an answer or a log line, for the client to retry)"
    end
    assert_empty problems, "#{problems.join("\n")}\nfigures:\n#{figures}"
  end
end
