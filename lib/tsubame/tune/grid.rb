# frozen_string_literal: true

module Tsubame
  module Tune
    # One server configuration to measure: a value per axis of the grid
    # (workers, threads, and fiber mode, where every request runs on a
    # fiber and the thread count no longer bounds how many are in flight).
    #
    # Each axis knows how to pass its value to exe/tsubame, how to write it
    # in config/puma.rb and how to show it; nothing else iterates over the
    # axes by name.
    Setting = Struct.new(:workers, :threads, :fibers, keyword_init: true) do
      # One worker means single mode: no master process, as Puma runs
      # without `workers`.
      def single?
        workers == 1
      end

      def fibers?
        fibers == true
      end

      def server_args
        args = ["-w", single? ? "0" : workers.to_s, "-t", "#{threads}:#{threads}"]
        fibers? ? args << "--fibers" : args
      end

      # The config/puma.rb lines that reproduce this setting.
      def config_lines
        lines = [single? ? "workers 0 # single mode: one process, no fork" : "workers #{workers}",
                 "threads #{threads}, #{threads}"]
        fibers? ? lines << "fiber_scheduler true # every request on a fiber" : lines
      end

      def label
        processes = single? ? "single mode" : "#{workers} workers"
        return "#{processes}, fiber mode" if fibers?

        "#{processes}, #{threads} thread#{"s" unless threads == 1}"
      end

      # A name for the files of this setting's server.
      def slug
        "#{workers}x#{fibers? ? "fibers" : threads}"
      end

      # Requests the setting runs at once, for sizing the load's
      # connections: its app threads, or in fiber mode FIBER_CONCURRENCY
      # per worker (fibers are not a fixed pool; the load ramps past it).
      def concurrency
        fibers? ? workers * FIBER_CONCURRENCY : workers * threads
      end

      # Processes holding a copy of the app (cluster mode adds the master,
      # which loads the app too unless preloaded).
      def processes
        single? ? 1 : workers + 1
      end
    end
    FIBER_CONCURRENCY = 32

    # The settings `tsubame tune` measures: every combination of the axis
    # values, smallest first. Workers default to 1 (single mode), powers of
    # two and the core count (more processes than cores cannot run the
    # Ruby code of more requests at once); threads to 1, 3 (Rails 7.2's
    # default), 5 (Puma's and older Rails') and 10 (for apps that mostly
    # wait on I/O); with `fibers`, fiber mode at each worker count too (its
    # pool threads, which then serve nothing, are the fewest listed).
    # Memory trims the grid: before the first boot an app is
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
      def self.size(cores:, memory_mb:, workers: nil, threads: nil, fibers: false)
        workers = (workers || default_workers(cores)).uniq.sort
        threads = (threads || DEFAULT_THREADS).uniq.sort
        settings = workers.product(threads).map { |w, t| Setting.new(workers: w, threads: t, fibers: false) }
        settings += workers.map { |w| Setting.new(workers: w, threads: threads.first, fibers: true) } if fibers
        grid = new(settings)
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
        threaded, fibered = @settings.partition { |s| !s.fibers? }
        text = "workers #{@settings.map(&:workers).uniq.join(",")} x threads #{threaded.map(&:threads).uniq.join(",")}"
        fibered.empty? ? text : "#{text}, and fiber mode"
      end
    end
  end
end
