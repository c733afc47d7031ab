# frozen_string_literal: true

module Tsubame
  # Rescuing this catches every failure Tsubame reports on purpose, as
  # opposed to bugs and errors raised by the application.
  class Error < StandardError; end

  # Raised for anything wrong in flags, config files or environment
  # variables; the message is meant to be shown to the user as is.
  class ConfigError < Error; end

  # Raised when a listener cannot be opened (address in use, permission...).
  class BindError < Error; end

  # Raised inside the thread running a request whose deadline passed (see
  # docs/OVERLOAD.md). It descends from Exception, not StandardError, so an
  # app's `rescue => e` does not swallow it; `ensure` blocks still run.
  class RequestTimeout < Exception; end # rubocop:disable Lint/InheritException
end
