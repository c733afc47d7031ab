# frozen_string_literal: true

module Tsubame
  # The control app's token. Puma's `no_token: true` is spelled as this
  # value, so "no token asked for" and "none given, make one" differ.
  module ControlToken
    NONE = "none"

    module_function

    # nil: the app needs no token. A token that was not configured is made
    # up, so the control app is never open by accident.
    def resolve(configured)
      return nil if configured == NONE

      return configured if configured

      require "securerandom" # only for a control app (footprint_test.rb)
      SecureRandom.hex(16)
    end
  end
end
