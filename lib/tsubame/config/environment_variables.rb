# frozen_string_literal: true

require "tsubame/errors"
require "tsubame/config/bind_uri"
require "tsubame/config/options"

module Tsubame
  # The environment variables a Puma deployment relies on, read into the
  # :env layer of Options (PORT only moves the default address, see below).
  #
  # Puma itself reads APP_ENV/RACK_ENV/RAILS_ENV and PUMA_/MIN_/MAX_THREADS.
  # PORT and RAILS_MAX_THREADS are read by the config/puma.rb that Rails
  # generates, which is how nearly every Puma deployment is configured, so
  # Tsubame honours them the way that file does: RAILS_MAX_THREADS=N means
  # N:N unless RAILS_MIN_THREADS says otherwise.
  module EnvironmentVariables
    ENVIRONMENT = %w[APP_ENV RACK_ENV RAILS_ENV].freeze
    MAX_THREADS = %w[PUMA_MAX_THREADS MAX_THREADS RAILS_MAX_THREADS].freeze
    MIN_THREADS = %w[PUMA_MIN_THREADS MIN_THREADS RAILS_MIN_THREADS].freeze

    module_function

    # Returns the variables that were set but are not implemented, as
    # "NAME (environment)" entries for the launcher's warning (none now).
    def apply(options, env = ENV)
      environment = first_set(env, ENVIRONMENT)
      from(environment) { options.set(:environment, env[environment], layer: :env) } if environment
      apply_threads(options, env)
      apply_port(options, env)
      apply_timeouts(options, env)
      apply_workers(options, env)
      []
    end

    # Puma reads WEB_CONCURRENCY as the default worker count, so a
    # `workers` directive or -w still wins over it (unlike the thread
    # variables, which Puma applies over the config file).
    def apply_workers(options, env)
      return unless set?(env["WEB_CONCURRENCY"])

      from("WEB_CONCURRENCY") { options.set(:workers, env["WEB_CONCURRENCY"].strip, layer: :default) }
    end

    def apply_threads(options, env)
      max_name = first_set(env, MAX_THREADS)
      min_name = first_set(env, MIN_THREADS)
      # Only the Rails convention ties min to max; Puma's own variables
      # leave the other bound alone.
      min_name ||= max_name if max_name == "RAILS_MAX_THREADS"
      from(max_name) { options.set(:threads_max, env[max_name], layer: :env) } if max_name
      from(min_name) { options.set(:threads_min, env[min_name], layer: :env) } if min_name
    end

    # `rails server` and the generated config treat PORT as the port to use
    # when nothing else says where to listen, so any bind in a config file
    # or on the command line still wins over it.
    def apply_port(options, env)
      return unless set?(env["PORT"])

      from("PORT") do
        options.set(:binds, [BindURI.tcp(Options::DEFAULT_HOST, env["PORT"])], layer: :default)
      end
    end

    def apply_timeouts(options, env)
      return unless set?(env["PUMA_PERSISTENT_TIMEOUT"])

      from("PUMA_PERSISTENT_TIMEOUT") do
        options.set(:persistent_timeout, env["PUMA_PERSISTENT_TIMEOUT"], layer: :env)
      end
    end

    def first_set(env, names)
      names.find { |name| set?(env[name]) }
    end

    def set?(value)
      !value.nil? && !value.strip.empty?
    end

    def from(name)
      yield
    rescue ConfigError => e
      raise ConfigError, "#{name}: #{e.message}"
    end
  end
end
