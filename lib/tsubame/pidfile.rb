# frozen_string_literal: true

require "tsubame/errors"

module Tsubame
  # --pidfile / `pidfile`: written at boot by whichever process supervises
  # (the single-mode server or the cluster master), removed on exit.
  module Pidfile
    module_function

    def write(path)
      File.write(path, "#{Process.pid}\n") if path
    rescue SystemCallError => e
      raise ConfigError, "cannot write pidfile #{path}: #{e.message}"
    end

    def remove(path)
      File.delete(path) if path && File.exist?(path)
    rescue SystemCallError
      # Already gone or not ours to remove; either way nothing to clean up.
      nil
    end
  end
end
