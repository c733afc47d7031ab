# frozen_string_literal: true

require "tsubame/errors"
require "tsubame/control/state_file"

module Tsubame
  # The files a running server leaves for operators: the pidfile (`pidfile`,
  # `--pidfile`) and Puma's state file (`state_path`). Written at boot by
  # whichever process supervises (the single-mode server or the cluster
  # master), removed on exit.
  module RunFiles
    module_function

    # control: the control app, or nil; the state file records its address.
    def write(options, control)
      write_file(options[:pidfile], "pidfile") { "#{Process.pid}\n" }
      write_file(options[:state_path], "state file") do
        StateFile.dump(control_url: control&.url, control_token: control&.token)
      end
      restrict(options[:state_path], options[:state_permission])
    end

    # state_permission: the state file names the control app's token.
    def restrict(path, mode)
      File.chmod(mode, path) if path && mode
    rescue SystemCallError => e
      raise ConfigError, "cannot set state file #{path} to mode #{format("%04o", mode)}: #{e.message}"
    end

    def remove(options)
      [options[:pidfile], options[:state_path]].each do |path|
        File.delete(path) if path && File.exist?(path)
      rescue SystemCallError
        # Already gone or not ours to remove; either way nothing to clean up.
        nil
      end
    end

    def write_file(path, what)
      File.write(path, yield) if path
    rescue SystemCallError => e
      raise ConfigError, "cannot write #{what} #{path}: #{e.message}"
    end
  end
end
