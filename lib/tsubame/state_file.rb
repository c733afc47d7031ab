# frozen_string_literal: true

require "yaml"

module Tsubame
  # state_path: Puma's state file (YAML with the pid and control app
  # address), read by `tsubame ctl -S` as pumactl reads Puma's.
  module StateFile
    module_function

    def write(path, control_url: nil, control_token: nil)
      return unless path

      state = { "pid" => Process.pid, "running_from" => Dir.pwd, "version" => VERSION }
      state["control_url"] = control_url if control_url
      state["control_auth_token"] = control_token if control_token
      File.write(path, YAML.dump(state))
    rescue SystemCallError => e
      raise ConfigError, "cannot write state file #{path}: #{e.message}"
    end

    def read(path)
      YAML.safe_load(File.read(path)) || {}
    rescue SystemCallError => e
      raise ConfigError, "cannot read state file #{path}: #{e.message}"
    end

    def remove(path)
      File.delete(path) if path && File.exist?(path)
    rescue SystemCallError
      nil
    end
  end
end
