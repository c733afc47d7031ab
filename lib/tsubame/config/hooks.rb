# frozen_string_literal: true

module Tsubame
  # Runs the config file's hooks (before_fork, on_worker_boot, ...).
  module Hooks
    module_function

    # Puma passes worker hooks the worker's index; a lambda that takes no
    # argument is called without it (a block ignores what it does not take).
    # An exception propagates: in a worker's boot it fails the boot.
    def run(hooks, *args)
      Array(hooks).each do |hook|
        arity = hook.respond_to?(:arity) ? hook.arity : -1
        arity.zero? ? hook.call : hook.call(*args)
      end
    end

    # For hooks whose failure must not take anything down with it (the
    # master's after_worker_fork, a worker's on_worker_shutdown): logged.
    def run_logged(hooks, name, log, *args)
      run(hooks, *args)
    rescue Exception => e # rubocop:disable Lint/RescueException
      raise if e.is_a?(SystemExit) || e.is_a?(SignalException)

      log.error("! #{name} hook raised #{e.class}: #{e.message}\n#{Array(e.backtrace).first(10).join("\n")}")
    end
  end
end
