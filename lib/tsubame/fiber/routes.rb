# frozen_string_literal: true

module Tsubame
  # Routes an app declares for fibers itself, from its rackup file:
  #
  #   Tsubame.fiber_route "/api/proxy", %r{\A/reports/\d+/export\z}
  #
  # The engine picks a request's pool before the app sees it, so the flag
  # is per path, declared while the app loads (before the server binds);
  # it adds to `fiber_paths` and turns fiber mode on for those paths.
  # Declared after boot, it changes nothing. See docs/FIBERS.md.
  module FiberRoutes
    @paths = []

    class << self
      def add(paths)
        paths.each do |path|
          unless path.is_a?(String) || path.is_a?(Regexp)
            raise ArgumentError, "Tsubame.fiber_route takes path prefixes and Regexps, got #{path.inspect}"
          end

          @paths << path
        end
        nil
      end

      def paths
        @paths.dup
      end

      # Merges the declared routes into the engine's options: fiber mode
      # for them alone, or added to the configured fiber_paths; a server
      # already running every request on fibers keeps doing so.
      def apply(native)
        return native if @paths.empty?

        if !native[:fiber_scheduler]
          native[:fiber_scheduler] = true
          native[:fiber_paths] = paths
        elsif !native[:fiber_paths].empty?
          native[:fiber_paths] = native[:fiber_paths] + paths
        end
        native
      end
    end
  end
end
