# frozen_string_literal: true

module Tsubame
  # Runs the config file's hooks (before_fork, before_worker_boot, ...).
  module Hooks
    # Puma's hook data: `before_worker_boot(:name) { |index, data| ... }`.
    # The hooks given the same key share one Hash per process, so what a
    # worker's boot hook stores its shutdown hook can read.
    Keyed = Struct.new(:key, :block) do
      # Alone (no shared data at hand) it still gets a Hash to write to.
      def call(*args)
        block.call(*args, {})
      end
    end

    module_function

    # Puma passes worker hooks the worker's index; a lambda that takes no
    # argument is called without it (a block ignores what it does not take).
    # data: the process's hook data (a Hash of Hashes, one per key).
    # An exception propagates: in a worker's boot it fails the boot.
    def run(hooks, *args, data: {})
      Array(hooks).each do |hook|
        next hook.block.call(*args, data[hook.key] ||= {}) if hook.is_a?(Keyed)

        arity = hook.respond_to?(:arity) ? hook.arity : -1
        arity.zero? ? hook.call : hook.call(*args)
      end
    end

    # For hooks whose failure must not take anything down with it (the
    # master's after_worker_fork, a worker's before_worker_shutdown): logged.
    def run_logged(hooks, name, log, *args, data: {})
      run(hooks, *args, data: data)
    rescue Exception => e # rubocop:disable Lint/RescueException
      raise if e.is_a?(SystemExit) || e.is_a?(SignalException)

      log.error("! #{name} hook raised #{e.class}: #{e.message}\n#{Array(e.backtrace).first(10).join("\n")}")
    end
  end
end
