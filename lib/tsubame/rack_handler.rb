# frozen_string_literal: true

require "tsubame"
require "tsubame/config/bind_uri"
require "tsubame/config/loader"
require "tsubame/launcher"

module Tsubame
  # What `rackup -s tsubame` (Rack 2's Rack::Handler and rackup 2's
  # Rackup::Handler) and `rails server` call. Both handler constants extend
  # this module, so the two stay the same by construction.
  module RackHandler
    # Launchers pass their own defaults (Port 9292, Host localhost...) mixed
    # with what the user typed. When they say which keys the user typed,
    # the rest only replace Tsubame's defaults and a config file still wins
    # over them, as with Puma.
    USER_SUPPLIED = :user_supplied_options

    def run(app, **options, &block)
      tsubame_options, ignored = configure(options)
      Launcher.new(tsubame_options, app: app, ignored: ignored).run(&block)
    end

    # Returns [Tsubame::Options, settings to warn about].
    def configure(options)
      options = options.dup
      user_keys = options.delete(USER_SUPPLIED)
      defaults = user_keys ? options.reject { |key, _| user_keys.include?(key) } : {}
      tsubame_options = ::Tsubame::Options.new
      apply(tsubame_options, defaults, :default)
      apply(tsubame_options, options.reject { |key, _| defaults.key?(key) }, :cli, defaults)
      loader = ::Tsubame::ConfigLoader.new(tsubame_options).load
      [tsubame_options, loader.ignored]
    end

    def valid_options
      {
        "Host=HOST" => "Hostname or IP to listen on, or a unix socket path starting with / or . (default: localhost)",
        "Port=PORT" => "Port to listen on (default: 9292)",
        "Threads=MIN:MAX" => "Ruby threads running the app (default: 0:5)",
        "Verbose" => "Log every request (default: false)"
      }
    end

    private

    def apply(target, options, layer, fallback = {})
      bind = bind_for(options[:Host] || (fallback[:Host] if options[:Port]),
                      options[:Port] || (fallback[:Port] if options[:Host]))
      target.set(:binds, [bind], layer: layer) if bind
      target.set_threads(*::Tsubame::Options.parse_threads(options[:Threads]), layer: layer) if options[:Threads]
      target.set(:environment, options[:environment], layer: layer) if options[:environment]
      target.set(:log_requests, true, layer: layer) if options[:Verbose]
      target.set(:config_files, Array(options[:config_files]), layer: layer) if options[:config_files]
    end

    def bind_for(host, port)
      return unless host || port

      host = host.to_s
      # Puma's convention: a Host that looks like a path is a unix socket.
      return ::Tsubame::BindURI.validate("unix://#{host}") if host.start_with?("/", ".")

      ::Tsubame::BindURI.tcp(host.empty? ? ::Tsubame::Options::DEFAULT_HOST : host,
                             port || ::Tsubame::Options::DEFAULT_PORT)
    end
  end
end
