# frozen_string_literal: true

require "test_helper"
require "json"

module Tsubame
  # exe/tsubame in cluster mode, with the control app on a unix socket so
  # tests can ask the master what its workers are doing.
  class ClusterServer < TestServer
    TOKEN = CONTROL_TOKEN
    BOOTED = /- Worker (\d+) \(PID: (\d+)\) booted/.freeze

    attr_reader :control_dir

    def initialize(rackup, workers: 2, config: nil, args: [], env: {}, unix: false, lint: true)
      @control_dir = Dir.mktmpdir("tsubame-ctl")
      extra = ["-w", workers.to_s]
      if config
        File.write(File.join(@control_dir, "cluster.rb"), config)
        extra += ["-C", File.join(@control_dir, "cluster.rb")]
      end
      super(rackup, args: extra + args, env: env, unix: unix, lint: lint, control: true)
      wait_for_workers(workers) if workers.positive?
    end

    # The rackup file the server was started with (TestServer writes it).
    def rackup_path
      File.join(@dir, "config.ru")
    end

    # { "workers" => ..., "worker_status" => [...] } from the control app.
    def stats
      control("stats")
    end

    # Waits until `count` workers of the current phase have booted; returns
    # their pids by index.
    def wait_for_workers(count, timeout: 15, phase: nil)
      wait_until(timeout, "#{count} booted workers") do
        booted = booted_workers(phase)
        booted.size == count ? booted : nil
      end
    end

    def booted_workers(phase = nil)
      status = stats
      phase ||= status["phase"]
      serving(status["worker_status"]).select { |w| w["phase"] == phase }.to_h { |w| [w["index"], w["pid"]] }
    rescue SystemCallError, JSON::ParserError
      # Between an old master's exec and the new one's control app.
      {}
    end

    # websocket_workers: every booted HTTP worker reports that it hands
    # upgrades to the WebSocket workers (the master's log line comes a
    # moment before each worker has heard it).
    def handing_off?
      workers = serving(stats["worker_status"])
      !workers.empty? && workers.all? { |w| w.dig("last_status", "engine", "handoff_on") == true }
    rescue SystemCallError, JSON::ParserError
      false
    end

    # The entries of /stats' `worker_status` (or `websocket_workers`) that
    # have booted and are not stopping.
    def serving(entries)
      entries.select { |w| w["booted"] && !w["stopping"] }
    end

    def wait_until(timeout, what)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        result = yield
        return result if result
        if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          raise "timed out waiting for #{what}\n#{stdout}\n#{stderr}"
        end

        sleep 0.05
      end
    end

    # Every worker pid the log ever mentioned booting.
    def logged_worker_pids
      stdout.scan(BOOTED).map { |_, pid| pid.to_i }
    end

    def alive?(pid)
      Process.kill(0, pid)
      true
    rescue Errno::ESRCH
      false
    end

    # Also kills the workers: a test that failed half way must not leave
    # them serving (they would stop on their own within a second anyway).
    def kill
      pids = logged_worker_pids
      super
      pids.each do |pid|
        Process.kill("KILL", pid)
      rescue Errno::ESRCH
        nil
      end
      FileUtils.rm_rf(@control_dir)
    end
  end

  # A client that keeps sending requests, each on a new connection, with
  # no retries (Net::HTTP would silently retry a failed GET once), and
  # records every outcome with its start and end times. Each request
  # carries ?id=N, so a test can tell from the app's $REQUEST_LOG which
  # requests reached it.
  class LoadLoop
    Result = Struct.new(:started, :finished, :outcome, :detail, :id)

    attr_reader :results

    def initialize(port, path: "/", clients: 2)
      @port = port
      @path = path
      @stop = false
      @results = Queue.new
      @ids = 0
      @ids_lock = Mutex.new
      @threads = Array.new(clients) { Thread.new { run } }
    end

    def stop
      @stop = true
      @threads.each(&:join)
      @all = []
      @all << @results.pop until @results.empty?
      self
    end

    def all
      @all || raise("stop the loop first")
    end

    def ok
      all.select { |r| r.outcome == :ok }
    end

    # Anything but a full 200, except a refused connection (the server had
    # closed its listeners: that client was never accepted).
    def failures
      all.reject { |r| %i[ok refused].include?(r.outcome) }
    end

    def refused
      all.select { |r| r.outcome == :refused }
    end

    private

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def run
      request until @stop
    end

    def request
      id = @ids_lock.synchronize { @ids += 1 }
      started = now
      http = Net::HTTP.new("127.0.0.1", @port)
      http.open_timeout = 5
      http.read_timeout = 15
      http.max_retries = 0
      response = http.start { |h| h.get("#{@path}?id=#{id}") }
      outcome = response.code == "200" ? :ok : :status
      @results << Result.new(started, now, outcome, "#{response.code} #{response.body}", id)
    rescue Errno::ECONNREFUSED, Errno::ENOENT => e
      @results << Result.new(started, now, :refused, e.class.name, id)
      sleep 0.01
    rescue StandardError => e
      @results << Result.new(started, now, :error, "#{e.class}: #{e.message}", id)
    end
  end

  module ClusterHelpers
    include TestHelpers

    # Answers its pid; /slow?S sleeps S seconds first, after creating the
    # file $SLOW_MARK (when set) so a test knows the request is in flight.
    # With $REQUEST_LOG set, appends each request's query string to it.
    PID_APP = <<~RUBY
      run lambda { |env|
        File.write(ENV["REQUEST_LOG"], "\#{env["QUERY_STRING"]}\n", mode: "a") if ENV["REQUEST_LOG"]
        if env["PATH_INFO"] == "/slow"
          File.write(ENV["SLOW_MARK"], "") if ENV["SLOW_MARK"]
          sleep Float(env["QUERY_STRING"])
        end
        [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
      }
    RUBY

    # Sends GET /slow?seconds in a thread and returns it once the app has
    # started on it (the server must run with SLOW_MARK=mark). The thread's
    # value is [status code or error class, body or message].
    def slow_request(server, seconds, mark)
      File.delete(mark) if File.exist?(mark)
      thread = Thread.new do
        http = Net::HTTP.new("127.0.0.1", server.port)
        http.read_timeout = 30
        http.max_retries = 0
        response = http.start { |h| h.get("/slow?#{seconds}") }
        [response.code, response.body]
      rescue StandardError => e
        [e.class.name, e.message]
      end
      Timeout.timeout(10) { sleep 0.01 until File.exist?(mark) || !thread.alive? }
      thread
    end

    # SIGSTOP to `pid`, returning once every one of its threads has
    # stopped. kill(2) returns as soon as the signal is queued: one thread
    # takes it and then makes the others stop, and until each has, the
    # process runs on; a connection it accepts in that moment then waits
    # on a stopped process (until worker_timeout kills it) instead of
    # going to the other worker.
    def stop_process(pid, timeout: 10)
      Process.kill("STOP", pid)
      stopped = wait_until(timeout: timeout) do
        states = Dir.glob("/proc/#{pid}/task/*/stat").map { |stat| File.read(stat)[/\) (\w)/, 1] }
        !states.empty? && states.all?("T")
      rescue Errno::ENOENT
        false # a thread ended between the listing and the read
      end
      raise "process #{pid} did not stop within #{timeout}s" unless stopped
    end

    def with_cluster(rackup = PID_APP, **opts)
      server = ClusterServer.new(rackup, **opts)
      yield server
    ensure
      server&.kill
    end

    def get_pid(server, path = "/")
      Net::HTTP.get(URI("http://127.0.0.1:#{server.port}#{path}")).to_i
    end

    # The pids that answered requests, each on a new connection, until
    # `pid` answered or `limit` went by. The workers share one listening
    # socket and a connection goes to whichever takes it first, often the
    # one that just served the last (on a loaded machine, 20 in a row), so
    # a fixed number of requests may miss a worker that serves.
    def pids_until(server, pid, limit: 200)
      seen = []
      limit.times do
        seen << get_pid(server)
        break if seen.last == pid
      end
      seen.uniq
    end
  end
end
