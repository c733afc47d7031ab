# frozen_string_literal: true

require "tsubame/errors"
require "tsubame/config/options"

module Tsubame
  # What `Puma` means inside a config file (DSL::Puma): the parts of
  # Puma's module that Puma's docs use in config/puma.rb, mapped onto
  # Tsubame's. It is a constant of Tsubame::DSL, found only by code written
  # in a config file (blocks included); ::Puma stays undefined for the app
  # unless the app loads Puma itself.
  module PumaConstant
    # Puma::Const values that configs use (supported_http_methods' docs).
    module Const
      # The Puma release whose DSL Tsubame follows (docs/PUMA.md).
      PUMA_VERSION = VERSION = "8.0.2"
      SUPPORTED_HTTP_METHODS = %w[HEAD GET POST PUT DELETE OPTIONS TRACE PATCH QUERY].freeze
      # The IANA HTTP Method Registry, with QUERY (RFC 10008).
      IANA_HTTP_METHODS = %w[
        ACL BASELINE-CONTROL BIND CHECKIN CHECKOUT CONNECT COPY DELETE GET HEAD LABEL LINK LOCK MERGE
        MKACTIVITY MKCALENDAR MKCOL MKREDIRECTREF MKWORKSPACE MOVE OPTIONS ORDERPATCH PATCH POST PRI
        PROPFIND PROPPATCH PUT QUERY REBIND REPORT SEARCH TRACE UNBIND UNCHECKOUT UNLINK UNLOCK UPDATE
        UPDATEREDIRECTREF VERSION-CONTROL
      ].freeze
    end

    # Puma's option names where Tsubame's differ.
    NAMES = {
      min_threads: :threads_min, max_threads: :threads_max, binds: :binds, state: :state_path,
      control_auth_token: :control_token, restart_cmd: nil, stdout_redirect: :redirect_stdout,
      http_content_length_limit: :max_body_size
    }.freeze

    # Puma.cli_config._options (and .options): reads see the resolved
    # value, writes win over every source, as they do in Puma (the config
    # file runs after the command line was read).
    class OptionsView
      def initialize(options)
        @options = options
      end

      def [](key)
        name = PumaConstant.tsubame_name(key)
        name ? @options[name] : nil
      end

      def []=(key, value)
        name = PumaConstant.tsubame_name(key)
        raise ConfigError, "Puma.cli_config: Tsubame has no setting #{key.inspect}" unless name

        @options.set(name, value, layer: :cli)
      end

      def fetch(key, default = nil)
        value = self[key]
        value.nil? ? default : value
      end

      def key?(key)
        !PumaConstant.tsubame_name(key).nil?
      end
    end

    # Puma.cli_config: Puma's Configuration, as far as configs use it.
    class CliConfig
      attr_reader :_options

      def initialize(options)
        @_options = OptionsView.new(options)
      end

      alias options _options
    end

    class << self
      # Set by DSL.load for the file being read, and kept for the hooks it
      # defines, which may run later.
      attr_writer :options
      # The running launcher or cluster master (anything with #stats), for
      # Puma.stats; set once it serves.
      attr_writer :stats_source

      def cli_config
        raise ConfigError, "Puma.cli_config is only available while a config file is loaded" unless @options

        CliConfig.new(@options)
      end

      # Puma's stats: a JSON String (Puma.stats) or a Hash with Symbol keys
      # (Puma.stats_hash), from the same numbers as `tsubame ctl stats`.
      def stats
        require "json" # loaded only here, so a server that never asks pays nothing for it
        JSON.generate(stats_hash)
      end

      def stats_hash
        raise ConfigError, "Puma.stats is only available once the server is running" unless @stats_source

        symbolize(@stats_source.stats)
      end

      def tsubame_name(key)
        key = key.to_sym
        return NAMES[key] if NAMES.key?(key)

        Options::KINDS.key?(key) ? key : nil
      end

      private

      def symbolize(value)
        case value
        when Hash then value.to_h { |k, v| [k.to_sym, symbolize(v)] }
        when Array then value.map { |v| symbolize(v) }
        else value
        end
      end
    end
  end
end
