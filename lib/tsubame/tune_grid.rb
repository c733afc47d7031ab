# frozen_string_literal: true

module Tsubame
  module Tune
    # One server configuration to measure: a value per axis of the grid.
    #
    # Each axis knows how to pass its value to exe/tsubame, how to write it
    # in config/puma.rb and how to show it. A new axis (fiber mode's
    # `fibers`, say) is one more member with its three methods below, a
    # default in Grid::DEFAULT_AXES and a flag in TuneOptions; nothing else
    # iterates over the axes by name.
    Setting = Struct.new(:workers, :threads, keyword_init: true) do
      # One worker means single mode: no master process, as Puma runs
      # without `workers`.
      def single?
        workers == 1
      end

      def server_args
        ["-w", single? ? "0" : workers.to_s, "-t", "#{threads}:#{threads}"]
      end

      # The config/puma.rb lines that reproduce this setting.
      def config_lines
        [single? ? "workers 0 # single mode: one process, no fork" : "workers #{workers}", "threads #{threads}, #{threads}"]
      end

      def label
        processes = single? ? "single mode" : "#{workers} workers"
        "#{processes}, #{threads} thread#{"s" unless threads == 1}"
      end

      # App threads across all processes.
      def total_threads
        workers * threads
      end

      # Processes holding a copy of the app (cluster mode adds the master,
      # which loads the app too unless preloaded).
      def processes
        single? ? 1 : workers + 1
      end
    end

    # The settings `tsubame tune` measures: every combination of the axis
    # values, smallest first. Workers default to 1 (single mode), powers of
    # two and the core count (more processes than cores cannot run the
    # Ruby code of more requests at once); threads to 1, 3 (Rails 7.2's
    # default), 5 (Puma's and older Rails') and 10 (for apps that mostly
    # wait on I/O). Memory trims the grid: before the first boot an app is
    # assumed to need ASSUMED_RSS_MB per process, after it its measured RSS.
    class Grid
      DEFAULT_THREADS = [1, 3, 5, 10].freeze
      ASSUMED_RSS_MB = 150
      # Leave room for the app to grow and for the load generator.
      MEMORY_SHARE = 0.8
      # Measured RSS times this, for what a busy app allocates later.
      RSS_GROWTH = 1.5

      attr_reader :settings

      def self.default_workers(cores)
        powers = [1]
        powers << (powers.last * 2) while powers.last * 2 <= cores
        (powers + [cores]).uniq.sort
      end

      # workers/threads: the user's lists, or nil for the defaults.
      def self.size(cores:, memory_mb:, workers: nil, threads: nil)
        workers ||= default_workers(cores)
        grid = new(workers.uniq.sort.product((threads || DEFAULT_THREADS).uniq.sort).map { |w, t| Setting.new(workers: w, threads: t) })
        return grid if memory_mb.nil?

        fitting = grid.fit(rss_mb: ASSUMED_RSS_MB, memory_mb: memory_mb, growth: 1.0).first
        # Always measure at least the smallest setting.
        fitting.settings.empty? ? new(grid.settings.first(1)) : fitting
      end

      def initialize(settings)
        @settings = settings.freeze
        freeze
      end

      # [the settings that fit in memory_mb with rss_mb per process, the others]
      def fit(rss_mb:, memory_mb:, growth: RSS_GROWTH)
        limit = memory_mb * MEMORY_SHARE
        keep, drop = @settings.partition { |s| s.processes * rss_mb * growth <= limit }
        [Grid.new(keep), Grid.new(drop)]
      end

      def size
        @settings.size
      end

      def empty?
        @settings.empty?
      end

      def without(settings)
        Grid.new(@settings - settings)
      end

      def describe
        "workers #{@settings.map(&:workers).uniq.join(",")} x threads #{@settings.map(&:threads).uniq.join(",")}"
      end
    end
  end
end
