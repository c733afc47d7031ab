# frozen_string_literal: true

module Tsubame
  # state_path: Puma's state file (YAML with the pid and control app
  # address), read by `tsubame ctl -S` as pumactl reads Puma's.
  module StateFile
    module_function

    # The file's YAML; RunFiles writes it. YAML is loaded only here and in
    # `read`: a server without a state file never needs it.
    def dump(control_url: nil, control_token: nil)
      require "yaml"
      state = { "pid" => Process.pid, "running_from" => Dir.pwd, "version" => VERSION }
      state["control_url"] = control_url if control_url
      state["control_auth_token"] = control_token if control_token
      YAML.dump(state)
    end

    def read(path)
      require "yaml"
      YAML.safe_load(File.read(path)) || {}
    rescue SystemCallError => e
      raise ConfigError, "cannot read state file #{path}: #{e.message}"
    end
  end
end
