# frozen_string_literal: true

module Tsubame
  # Loads the rackup file: in the launcher (single mode, or the master with
  # preload_app!) or in each cluster worker.
  module AppLoader
    module_function

    # The config's inline `app`, or else the rackup file.
    def load_app(options)
      options[:app] || load(options[:rackup])
    end

    def load(path)
      require "rack"
      require "rack/builder"
      result = Rack::Builder.parse_file(path)
      # Rack 2 returns [app, options from a "#\" line]; Rack 3 returns the app.
      result.is_a?(Array) && !result.respond_to?(:call) ? result.first : result
    end
  end
end
