# frozen_string_literal: true

module Tsubame
  # stdout_redirect: sends $stdout/$stderr to files, and reopens them on HUP
  # so a log rotator can move the old files away (as with Puma).
  module LogRedirect
    module_function

    def configured?(options)
      !options[:redirect_stdout].nil? || !options[:redirect_stderr].nil?
    end

    # At boot, after the banner; append: false truncates, as Puma does.
    def apply(options)
      mode = options[:redirect_append] ? "a" : "w"
      redirect($stdout, options[:redirect_stdout], mode)
      redirect($stderr, options[:redirect_stderr], mode)
    end

    # On HUP. Always appends: another process may share the file.
    def reopen(options)
      redirect($stdout, options[:redirect_stdout], "a")
      redirect($stderr, options[:redirect_stderr], "a")
    end

    def redirect(io, path, mode)
      return unless path

      io.reopen(path, mode)
      io.sync = true
    end
  end
end
