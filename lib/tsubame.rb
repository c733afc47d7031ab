# frozen_string_literal: true

require "tsubame/version"
require "tsubame/errors"
require "tsubame/config/options"

# A Rack server whose HTTP engine is written in Rust.
module Tsubame
  # Autoloaded so that requiring "tsubame" (for Options, say) never loads the
  # native extension; only serving needs it.
  autoload :CLI, "tsubame/cli"
  autoload :ConfigLoader, "tsubame/config/loader"
  autoload :DSL, "tsubame/config/dsl"
  autoload :EnvironmentVariables, "tsubame/config/environment_variables"
  autoload :Launcher, "tsubame/launcher"
  autoload :RackHandler, "tsubame/rack_handler"
  autoload :Server, "tsubame/serve/server"
  autoload :FiberRoutes, "tsubame/fiber/routes"

  # Declares paths (prefixes or Regexps) the app wants run on fibers; call
  # it from config.ru. See Tsubame::FiberRoutes and docs/FIBERS.md.
  def self.fiber_route(*paths)
    FiberRoutes.add(paths.flatten)
  end
end
