# frozen_string_literal: true

module Tsubame
  VERSION = "0.1.0"
end
