# frozen_string_literal: true

module Tsubame
  # What the launcher says and sets up at boot from Puma's directives: the
  # warnings Puma gives (and their silence_* switches), the `debug`
  # listing of the configuration, the working directory and stdout sync.
  module BootChecks
    # Hooks that only a cluster runs (Puma's cluster_only hooks).
    CLUSTER_HOOKS = %i[
      before_fork on_worker_boot on_worker_shutdown after_worker_fork before_worker_fork
      before_refork after_refork
    ].freeze

    module_function

    # `directory`: before anything reads a relative path. Returns the
    # directory changed to, or nil.
    def change_directory(options)
      dir = options[:directory] or return nil
      Dir.chdir(dir)
      dir
    rescue SystemCallError => e
      raise ConfigError, "directory #{dir}: #{e.message}"
    end

    # mutate_stdout_and_stderr_to_sync_on_write (Puma's default true):
    # $stdout and $stderr write through. With false they are left as the
    # process had them (#restore_output, once the banner is out: the
    # banner itself is always written through).
    def sync_output(options)
      @original_sync ||= [$stdout.sync, $stderr.sync]
      return unless options[:sync_stdout]

      $stdout.sync = true
      $stderr.sync = true
    end

    def restore_output(options)
      return if options[:sync_stdout] || @original_sync.nil?

      $stdout.flush
      $stdout.sync, $stderr.sync = @original_sync
    end

    def warnings(options)
      if options[:workers].zero?
        fork_callback_warnings(options) + single_mode_websocket_workers(options)
      elsif options[:workers] == 1 && !options[:silence_single_worker_warning]
        ["cluster mode with a single worker: the master costs memory and adds a hop to every signal; " \
         "workers 0 (single mode) with more threads usually serves better " \
         "(silence_single_worker_warning silences this)"]
      else
        []
      end
    end

    def single_mode_websocket_workers(options)
      return [] unless options[:websocket_workers].positive?

      ["websocket_workers needs cluster mode (workers > 0): in single mode WebSocket connections are served " \
       "by the one process, as without it"]
    end

    def fork_callback_warnings(options)
      return [] if options[:silence_fork_callback_warning]

      CLUSTER_HOOKS.reject { |key| options[key].empty? }.map do |key|
        "#{key} hooks are configured, but they only run in cluster mode (workers > 0): they will not run " \
          "(silence_fork_callback_warning silences this)"
      end
    end

    # `debug`: every setting that is not its default, one a line.
    def debug_lines(options)
      options.to_h.filter_map do |key, value|
        next if value == Options::DEFAULTS[key] || (value.respond_to?(:empty?) && value.empty? && Options::DEFAULTS[key].nil?)

        "* Debug: #{key} = #{describe(key, value)}"
      end
    end

    def describe(key, value)
      return "(hidden)" if key == :control_token
      return "#{value.size} hook(s)" if value.is_a?(Array) && value.all? { |item| item.respond_to?(:call) } && !value.empty?
      return value.class.name if value.respond_to?(:call) && !value.is_a?(String)

      value.inspect
    end
  end
end
