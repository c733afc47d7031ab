# frozen_string_literal: true

require "json"
require "optparse"
require "socket"
require "time"
require "uri"
require "tsubame/version"
require "tsubame/errors"
require "tsubame/config/options"
require "tsubame/control/state_file"

module Tsubame
  # `tsubame ctl COMMAND`: pumactl for Tsubame. Talks to the control app
  # (--control-url/--control-token, or what a state file or config file
  # says) and prints readable output, or the raw JSON with --json.
  class ControlCLI
    COMMANDS = %w[
      stats restart phased-restart refork stop halt gc gc-stats thread-backtraces worker-count-up worker-count-down
      metrics
    ].freeze

    TIMEOUT = 10

    def initialize(argv, stdout: $stdout, stderr: $stderr, env: ENV)
      @argv = argv.dup
      @stdout = stdout
      @stderr = stderr
      @env = env
      @url = nil
      @token = nil
      @state = nil
      @config = nil
      @json = false
    end

    # Returns the exit status.
    def run
      catch(:exit) do
        command = parse
        locate
        status, body = request(command)
        report(command, status, body)
      end
    rescue OptionParser::ParseError, Error => e
      @stderr.puts "tsubame ctl: #{e.message}"
      1
    end

    private

    def parse
      rest = parser.parse(@argv)
      raise ConfigError, "give one command: #{COMMANDS.join(", ")}" unless rest.size == 1
      unless COMMANDS.include?(rest.first)
        raise ConfigError, "unknown command #{rest.first.inspect}; one of: #{COMMANDS.join(", ")}"
      end

      rest.first
    end

    def parser
      OptionParser.new do |o|
        o.program_name = "tsubame ctl"
        o.banner = "Usage: tsubame ctl [options] #{COMMANDS.join("|")}"
        o.separator ""
        o.on("-C", "--control-url URL", "The control app: tcp://HOST:PORT or unix://PATH") { |url| @url = url }
        o.on("-T", "--control-token TOKEN", "Its token") { |token| @token = token }
        o.on("-S", "--state PATH", "Read the address and token from this state file") { |path| @state = path }
        o.on("-F", "--config-file PATH", "Read them from this config file (activate_control_app)") do |path|
          @config = path
        end
        o.on("--json", "Print the raw JSON answer") { @json = true }
        o.on("-h", "--help", "Print this help and exit") do
          @stdout.puts o
          throw :exit, 0
        end
      end
    end

    # The flags win; then a state file; then a config file (the one named,
    # or the default ones, as the server looks them up).
    def locate
      if @state
        state = StateFile.read(@state)
        @url ||= state["control_url"]
        @token ||= state["control_auth_token"]
      end
      from_config unless @url
      return if @url

      raise ConfigError, "no control app: give --control-url, --state or a config file with activate_control_app"
    end

    def from_config
      require "tsubame/config/loader"
      options = Options.new
      options.append(:config_files, @config) if @config
      ConfigLoader.new(options, env: @env).load
      @url = options[:control_url]
      @token ||= options[:control_token]
    end

    def request(command)
      socket = connect
      query = @token ? "?token=#{URI.encode_www_form_component(@token)}" : ""
      socket.write("GET /#{command}#{query} HTTP/1.1\r\nHost: tsubame\r\nConnection: close\r\n\r\n")
      raise Error, "no answer from the control app at #{@url} within #{TIMEOUT}s" unless socket.wait_readable(TIMEOUT)

      parse_response(socket.read)
    rescue SystemCallError, IOError => e
      raise Error, "cannot reach the control app at #{@url}: #{e.message}"
    ensure
      socket&.close
    end

    def connect
      if @url.start_with?("unix://")
        UNIXSocket.new(@url.delete_prefix("unix://"))
      else
        uri = URI.parse(@url.sub(%r{\Atcp://}, "http://"))
        Socket.tcp(uri.hostname, uri.port, connect_timeout: TIMEOUT)
      end
    end

    def parse_response(text)
      head, body = text.to_s.split("\r\n\r\n", 2)
      status = head.to_s[%r{\AHTTP/1\.\d (\d{3})}, 1]
      raise Error, "not a control app answer from #{@url}" unless status
      # /metrics is Prometheus text, not JSON.
      return [status.to_i, body.to_s] if head.match?(%r{^content-type:\s*text/plain}i)

      [status.to_i, JSON.parse(body.to_s)]
    rescue JSON::ParserError
      raise Error, "unreadable answer from the control app at #{@url}"
    end

    def report(command, status, body)
      unless status == 200
        message = body.is_a?(Hash) ? body["error"] : body.inspect
        @stderr.puts "tsubame ctl: #{command}: #{message} (HTTP #{status})"
        return 1
      end
      return @stdout.write(body) && 0 if command == "metrics"
      return print_json(body) if @json

      case command
      when "stats" then print_stats(body)
      when "thread-backtraces" then print_backtraces(body)
      when "gc-stats" then print_json(body)
      when "gc" then @stdout.puts "#{body["message"]} in pids #{Array(body["pids"]).join(", ")}"
      else @stdout.puts "Command #{command} sent: #{body["message"]}"
      end
      0
    end

    def print_json(body)
      @stdout.puts JSON.pretty_generate(body)
      0
    end

    def print_stats(stats)
      if stats["mode"] == "single"
        print_single(stats)
      else
        print_cluster(stats)
      end
    end

    def print_single(stats)
      @stdout.puts "Tsubame #{stats.dig("versions", "tsubame") || VERSION} single mode, pid #{stats["pid"]}, " \
                   "up #{uptime(stats["started_at"])}"
      @stdout.puts "threads: #{stats["busy_threads"]} busy of #{stats["max_threads"]}, " \
                   "#{stats["requests_in_flight"]} request(s) in flight, backlog #{stats["backlog"]}"
      @stdout.puts "requests: #{stats["requests_count"]}, connections open: #{stats["connections_active"]}, " \
                   "rss: #{stats["rss_mb"]} MB"
      memory = stats["memory"] or return
      @stdout.puts "memory: rss #{memory["rss_mb"]} MB, pss #{memory["pss_mb"]} MB, uss #{memory["uss_mb"]} MB"
    end

    def print_cluster(stats)
      @stdout.puts "Tsubame #{stats.dig("versions", "tsubame") || VERSION} cluster, " \
                   "master pid #{stats["master_pid"]}, up #{uptime(stats["started_at"])}, phase #{stats["phase"]}"
      @stdout.puts "workers: #{stats["workers"]} (#{stats["booted_workers"]} booted, #{stats["old_workers"]} old), " \
                   "died: #{stats.fetch("worker_deaths", 0)}, killed by the master: #{stats.fetch("worker_kills", 0)}"
      columns = "%5s %8s %5s %6s %13s %9s %7s %9s %8s %8s %8s %s"
      @stdout.puts format(columns, "index", "pid", "phase", "booted", "last check-in", "busy/max", "backlog",
                          "requests", "rss MB", "pss MB", "uss MB", "")
      stats["worker_status"].each { |worker| @stdout.puts format(columns, *worker_row(worker)) }
      print_memory_total(stats)
    end

    def print_memory_total(stats)
      total = stats["workers_memory"] or return
      master = stats["master_memory"] || {}
      @stdout.puts "workers' memory: rss #{total["rss_mb"]} MB, pss #{total["pss_mb"]} MB, " \
                   "uss #{total["uss_mb"]} MB; master: pss #{master.fetch("pss_mb", "-")} MB"
    end

    def worker_row(worker)
      status = worker["last_status"] || {}
      [
        worker["index"], worker["pid"], worker["phase"], worker["booted"] ? "yes" : "no",
        worker["last_checkin"] ? "#{ago(worker["last_checkin"])} ago" : "-",
        status["max_threads"] ? "#{status["busy_threads"]}/#{status["max_threads"]}" : "-",
        status.fetch("backlog", "-"), status.fetch("requests_count", "-"),
        *%w[rss_mb pss_mb uss_mb].map { |key| worker.dig("memory", key) || (key == "rss_mb" && worker["rss_mb"]) || "-" },
        worker["stopping"] ? "stopping" : ""
      ]
    end

    def print_backtraces(threads)
      threads.each do |thread|
        @stdout.puts "== pid #{thread["pid"]} (#{thread["process"]}) #{thread["name"]}"
        thread["backtrace"].each { |line| @stdout.puts "   #{line}" }
      end
    end

    def ago(iso)
      "#{(Time.now - Time.iso8601(iso)).round(1)}s"
    rescue ArgumentError
      iso.to_s
    end

    def uptime(iso)
      seconds = (Time.now - Time.iso8601(iso)).to_i
      format("%<h>dh%<m>02dm%<s>02ds", h: seconds / 3600, m: seconds / 60 % 60, s: seconds % 60)
    rescue ArgumentError, TypeError
      "?"
    end
  end
end
