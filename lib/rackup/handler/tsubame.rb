# frozen_string_literal: true

require "rackup/handler"
require "tsubame/rack_handler"

module Rackup
  module Handler
    # Rack 3's name for Tsubame (the rackup 2 gem): `rackup -s tsubame`.
    module Tsubame
      extend ::Tsubame::RackHandler
    end

    register "tsubame", "Rackup::Handler::Tsubame"
  end
end
