# frozen_string_literal: true

module Tsubame
  # `tsubame bench [options] URL` runs the load generator, a Rust binary
  # built from crates/tsubame-bench, with the same arguments. The process
  # is replaced (exec), so Ctrl-C, the exit status and the output are the
  # binary's own. Its flags are in README.md ("tsubame bench") and
  # `tsubame bench --help`.
  module Bench
    BINARY = "tsubame-bench"
    # argv[0] for the binary, which uses it to prefix its messages.
    PROGRAM_NAME = "tsubame bench"

    module_function

    # Where the binary may be: TSUBAME_BENCH (an explicit path), next to
    # this file (`make build` copies it there), the cargo target directory
    # of this source tree or unpacked gem, and the installed extension
    # directories on the load path (`gem install` puts it beside the .so).
    def candidates(env: ENV)
      root = File.expand_path("../..", __dir__)
      target_dir = env["CARGO_TARGET_DIR"].to_s
      target = target_dir.empty? ? File.join(root, "target") : File.expand_path(target_dir, root)
      [
        File.join(__dir__, BINARY),
        File.join(target, "release", BINARY),
        *$LOAD_PATH.map { |dir| File.join(File.expand_path(dir.to_s), "tsubame", BINARY) }
      ].uniq
    end

    # TSUBAME_BENCH if set, else the most recently built of the candidates
    # (so a `cargo build` is picked up before `make build` copies it).
    def find(env: ENV)
      explicit = env["TSUBAME_BENCH"]
      return (executable?(explicit) ? explicit : nil) if explicit && !explicit.empty?

      candidates(env: env).select { |path| executable?(path) }.max_by { |path| File.mtime(path) }
    end

    def executable?(path)
      File.file?(path) && File.executable?(path)
    end

    # Replaces the process with the binary; returns an exit status only
    # when that cannot be done.
    def run(argv, stderr: $stderr, env: ENV)
      path = find(env: env)
      unless path
        explicit = env["TSUBAME_BENCH"].to_s
        where = explicit.empty? ? "build it with `make build`" : "TSUBAME_BENCH=#{explicit} is not an executable file"
        stderr.puts "#{PROGRAM_NAME}: the #{BINARY} binary was not found; #{where}"
        return 1
      end
      Kernel.exec([path, PROGRAM_NAME], *argv)
    rescue SystemCallError => e
      stderr.puts "#{PROGRAM_NAME}: cannot run #{path}: #{e.message}"
      1
    end
  end
end
