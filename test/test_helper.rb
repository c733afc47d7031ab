# frozen_string_literal: true

require "minitest/autorun"
require "fileutils"
require "open3"
require "rbconfig"
require "tmpdir"
require "tsubame"

module Tsubame
  # Helpers shared by the test files; each test file includes this module.
  module TestHelpers
    ROOT = File.expand_path("..", __dir__)
    EXE = File.join(ROOT, "exe", "tsubame")

    # Runs exe/tsubame under `ruby -w` so warnings show up on stderr.
    # Returns [stdout, stderr, Process::Status].
    def run_tsubame(*args, env: {}, chdir: ROOT)
      Open3.capture3(env, RbConfig.ruby, "-w", EXE, *args, chdir: chdir, stdin_data: "")
    end

    # Yields a fresh directory that is removed afterwards.
    def in_tmpdir(&block)
      Dir.mktmpdir("tsubame-test", &block)
    end

    # Writes content to dir/relative_path, creating directories; returns the path.
    def write_file(dir, relative_path, content)
      path = File.join(dir, relative_path)
      FileUtils.mkdir_p(File.dirname(path))
      File.write(path, content)
      path
    end
  end
end
