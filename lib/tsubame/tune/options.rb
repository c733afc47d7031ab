# frozen_string_literal: true

require "optparse"
require "tsubame/tune/slo"

module Tsubame
  module Tune
    # The flags of `tsubame tune`, checked before anything is started.
    # README.md ("tsubame tune") documents them.
    class TuneOptions
      DEFAULT_STEP = 3.0
      DEFAULT_BUDGET = 600.0
      # Seed 001's teams ran each rate for a minute before trusting it.
      DEFAULT_CONFIRM = 60.0
      # The operating rate recommended, in percent of the confirmed max. The
      # confirmed rate already held a whole confirmation period in steady
      # state; the 10% left is for what the tune did not see: a heavier
      # client on shared cores, bursts, a slower dependency (issue 21's
      # replays, docs/BENCHMARKS.md).
      DEFAULT_HEADROOM = 90.0
      MAX_GRID_VALUE = 1024
      DURATION_UNITS = { "ms" => 0.001, "s" => 1.0, "m" => 60.0, "h" => 3600.0 }.freeze

      attr_reader :app, :slo, :targets, :paths, :headers, :workers, :threads, :fibers, :step, :budget,
                  :html, :json, :environment, :config, :quiet, :confirm, :headroom

      # A number with a unit, several such parts (1m30s) or bare seconds;
      # the grammar of tsubame bench's -d. Returns seconds.
      def self.parse_duration(text, flag)
        bad = "invalid #{flag} #{text.inspect}: expected a time like 10m, 30s, 1m30s or 500ms"
        return positive(Float(text), bad) if text.match?(/\A\d+(\.\d+)?\z/)

        parts = text.scan(/(\d+(?:\.\d+)?)(ms|s|m|h)/)
        raise UsageError, bad if parts.empty? || parts.map(&:join).join != text

        positive(parts.sum { |number, unit| Float(number) * DURATION_UNITS.fetch(unit) }, bad)
      end

      def self.parse_headroom(text)
        percent = Float(text.to_s.delete_suffix("%"), exception: false)
        return percent if percent && percent.positive? && percent <= 100

        raise UsageError, "invalid --headroom #{text.inspect}: expected a percentage above 0 and at most 100, e.g. 80"
      end

      def self.positive(seconds, message)
        raise UsageError, message unless seconds.positive?

        seconds
      end

      # "1,2,4" -> [1, 2, 4]
      def self.parse_list(text, flag)
        values = text.split(",").map { |v| Integer(v.strip, 10, exception: false) }
        if values.empty? || values.any? { |v| v.nil? || !v.between?(1, MAX_GRID_VALUE) }
          raise UsageError, "invalid #{flag} #{text.inspect}: expected whole numbers from 1 to #{MAX_GRID_VALUE}, " \
                            "separated by commas, e.g. 1,2,4"
        end
        values.uniq.sort
      end

      def initialize(argv)
        @slo_spec = SLO::DEFAULT_SPEC
        @success = SLO::DEFAULT_SUCCESS
        @paths = []
        @headers = []
        @step = DEFAULT_STEP
        @budget = DEFAULT_BUDGET
        @confirm = DEFAULT_CONFIRM
        @headroom = DEFAULT_HEADROOM
        @environment = "production"
        @json = false
        @quiet = false
        @fibers = false
        @help = nil
        parse(argv)
      end

      # The help text when -h was given, else nil.
      attr_reader :help

      def help?
        !@help.nil?
      end

      private

      def parse(argv)
        rest = parser.parse(argv)
        return if help?

        raise UsageError, "missing the rackup file: tsubame tune [options] APP.ru" if rest.empty?
        raise UsageError, "too many arguments: #{rest.join(" ")} (expected one rackup file)" if rest.size > 1

        @app = rest.first
        raise UsageError, "rackup file not found: #{@app}" unless File.file?(@app)

        @slo = SLO.parse(@slo_spec, success: @success)
        check_requests
        check_html
      rescue OptionParser::ParseError => e
        raise UsageError, e.message
      end

      def check_requests
        raise UsageError, "--targets and --path cannot be combined: list the paths in the targets file" if @targets && !@paths.empty?
        raise UsageError, "targets file not found: #{@targets}" if @targets && !File.file?(@targets)

        @paths << "/" if @paths.empty?
        bad = @paths.find { |path| !path.start_with?("/") || path.match?(/\s/) }
        raise UsageError, "invalid --path #{bad.inspect}: expected an absolute path such as /users?page=2" if bad
      end

      # Found now rather than after the whole measurement.
      def check_html
        return unless @html

        dir = File.dirname(File.expand_path(@html))
        raise UsageError, "cannot write --html #{@html}: no directory #{dir}" unless File.directory?(dir)
        raise UsageError, "cannot write --html #{@html}: #{dir} is not writable" unless File.writable?(dir)
      end

      def parser
        OptionParser.new do |o|
          o.program_name = "tsubame tune"
          o.banner = "Usage: tsubame tune [options] APP.ru\n\n" \
                     "Finds the workers and threads that serve the most requests per second within an SLO."
          o.separator ""
          o.separator "Objective:"
          o.on("--slo SPEC", "Latency limits, e.g. p95=200ms or p95=200ms,p99=1s (default #{SLO::DEFAULT_SPEC})") { |v| @slo_spec = v }
          o.on("--success PERCENT", "Least share of 2xx/3xx responses (default #{SLO::DEFAULT_SUCCESS})") { |v| @success = v }
          o.separator "Requests:"
          o.on("--path PATH", "Request GET PATH (repeatable: mixed in equal shares; default /)") { |v| @paths << v }
          o.on("--targets FILE", "Mix the requests listed in FILE (tsubame bench's targets format)") { |v| @targets = v }
          o.on("-H", "--header 'Name: value'", "Add a header to every request (repeatable)") { |v| @headers << v }
          o.separator "Grid and time:"
          o.on("--workers LIST", "Worker counts to try, e.g. 1,2,4 (1 = single mode; default from the cores)") do |v|
            @workers = TuneOptions.parse_list(v, "--workers")
          end
          o.on("--threads LIST", "Threads per process to try (default 1,3,5,10)") do |v|
            @threads = TuneOptions.parse_list(v, "--threads")
          end
          o.on("--fibers", "Also try fiber mode (every request on a fiber) at each worker count") { @fibers = true }
          o.on("--step-duration TIME", "How long each rate is offered (default 3s)") do |v|
            @step = TuneOptions.parse_duration(v, "--step-duration")
          end
          o.on("--budget TIME", "Total time, grid and confirmation (default 10m)") do |v|
            @budget = TuneOptions.parse_duration(v, "--budget")
          end
          o.on("--confirm-duration TIME", "How long the recommended rate is replayed to confirm it (default 60s)") do |v|
            @confirm = TuneOptions.parse_duration(v, "--confirm-duration")
          end
          o.on("--headroom PERCENT", "Recommend operating at this percent of the confirmed max rate (default 90)") do |v|
            @headroom = TuneOptions.parse_headroom(v)
          end
          o.separator "Server:"
          o.on("-e", "--environment NAME", "Rack environment of the server (default production)") { |v| @environment = v }
          o.on("-C", "--config FILE", "Load this config file (default: none; its binds are opened too)") do |v|
            raise UsageError, "config file not found: #{v}" unless File.file?(v)

            @config = v
          end
          o.separator "Output:"
          o.on("--html FILE", "Also write the report with a chart of p95 against rate to FILE") { |v| @html = v }
          o.on("--json", "Print the report as JSON instead of a table") { @json = true }
          o.on("-q", "--quiet", "No progress lines on stderr") { @quiet = true }
          o.on("-h", "--help", "Print this help") { @help = o.to_s }
        end
      end
    end
  end
end
