# frozen_string_literal: true

require "tsubame/errors"
require "tsubame/config/options"
require "tsubame/config/dsl"
require "tsubame/config/environment_variables"

module Tsubame
  # Fills the :env and :file layers of an Options whose :cli layer is
  # already set, so the CLI and the Rack handler resolve settings the same
  # way. Nothing here touches the network or the native extension.
  class ConfigLoader
    # Tried in order when no config file was named, first one wins; the
    # puma names let an app switch servers without moving its config.
    DEFAULT_FILES = %w[
      config/tsubame/<env>.rb config/tsubame.rb config/puma/<env>.rb config/puma.rb
    ].freeze

    # Puma's spelling for "do not load any config file".
    NO_CONFIG = "-"

    # Settings that were used but are not implemented, for one warning.
    attr_reader :ignored
    attr_reader :loaded_files

    def initialize(options, env: ENV, dir: nil)
      @options = options
      @env = env
      @dir = dir
      @ignored = []
      @loaded_files = []
    end

    def load
      @ignored.concat(EnvironmentVariables.apply(@options, @env))
      config_files.each do |path|
        DSL.load(path, @options, @ignored)
        @loaded_files << path
      end
      DSL.run_mode_blocks(@options, @ignored)
      @options.validate!
      self
    end

    private

    def config_files
      named = @options[:config_files]
      return [] if named == [NO_CONFIG]
      return named.each { |path| check_exists(path) } unless named.empty?

      # The environment must be known before any file is read, so -e and
      # RACK_ENV pick the file but an `environment` directive cannot.
      environment = @options[:environment]
      candidates = DEFAULT_FILES.map { |pattern| in_dir(pattern.sub("<env>", environment)) }
      candidates.select { |path| File.file?(path) }.first(1)
    end

    def in_dir(path)
      @dir ? File.join(@dir, path) : path
    end

    def check_exists(path)
      raise ConfigError, "config file not found: #{path}" unless File.file?(path)
    end
  end
end
