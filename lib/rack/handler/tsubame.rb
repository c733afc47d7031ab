# frozen_string_literal: true

require "rack/handler"
require "tsubame/rack_handler"

module Rack
  module Handler
    # Rack 2's name for Tsubame: `rackup -s tsubame`.
    module Tsubame
      extend ::Tsubame::RackHandler
    end

    register "tsubame", "Rack::Handler::Tsubame"
  end
end
