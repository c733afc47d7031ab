# frozen_string_literal: true

require "rbconfig"

module Tsubame
  # Re-executing the server in place (USR2, `tsubame ctl restart`,
  # `plugin :tmp_restart`) while its listening sockets stay open, so no
  # client is refused; and some process accepts on them throughout, so no
  # client waits in the kernel's backlog for the new code to boot.
  #
  # The old process clears close-on-exec on the sockets and names them in
  # one environment variable, as { configured bind URI => [fd, ...] }; the
  # new process reads and deletes it (the app never sees it) and adopts the
  # sockets whose URI it still binds (Listeners.bind). In cluster mode the
  # variable also lists the old workers: exec keeps the master's pid, so
  # they are still its children, and they serve until the new workers boot.
  #
  # In single mode there are no workers to serve meanwhile, so the same
  # command is first started as a child, a stand-in (see StandIn), with the
  # same variable plus "stand_in": { "ready_fd" => N }, the pipe it writes
  # "ready" to once it serves. The single-mode process execs only then,
  # naming the stand-in among the "workers" for the new process to stop.
  #
  # In cluster mode the exec'd master is the only process that could load
  # the new config (and a preloaded app): if it fails, the old workers see
  # their master gone and stop. So the master first runs the same command
  # as a check-only child (see HotRestartCheck) with the variable holding
  # just "check": { "parent" => its pid }, and execs only if that exits 0.
  module HotRestart
    ENV_KEY = "TSUBAME_HOT_RESTART"

    class << self
      # The command line and directory to exec. The CLI records them at
      # boot, before anything (a `tag`, say) changes $PROGRAM_NAME.
      attr_accessor :command, :directory

      def record(argv)
        # -w is the one interpreter flag worth carrying over: a server
        # started with warnings on keeps them after a restart.
        flags = $VERBOSE ? ["-w"] : []
        @command = [RbConfig.ruby, *flags, File.expand_path($PROGRAM_NAME), *argv].freeze
        @argv = argv.dup.freeze
        @directory = Dir.pwd.freeze
      end

      # Puma's restart_command (the program, without the arguments, which
      # stay the recorded ones) and directory (where the new process
      # starts, a symlinked release followed again). Both optional.
      def configure(restart_command: nil, directory: nil)
        record(ARGV) unless @command
        if restart_command
          require "shellwords" # only for a restart_command (footprint_test.rb)
          @command = [*Shellwords.split(restart_command), *@argv].freeze
        end
        @directory = File.expand_path(directory, @directory).freeze if directory
      end

      def inherited_fds
        handover.fetch(:fds)
      end

      # Which of the inherited descriptors systemd handed over at first
      # (socket activation): they stay systemd's (see Listeners).
      def activated_fds
        handover.fetch(:activated)
      end

      # Only pids that really are this process's children: the variable
      # must never make the server signal an unrelated process.
      def inherited_workers
        handover.fetch(:workers).select { |pid| child?(pid) }
      end

      def restarted?
        !handover[:fds].empty? || !handover[:workers].empty?
      end

      # Whether this process is a hot restart's stand-in.
      def stand_in?
        !handover[:stand_in].nil?
      end

      # Whether this process is a cluster hot restart's pre-flight check.
      # Only when the parent it names is really its parent: a variable left
      # in some environment by mistake must not turn a real boot into a
      # process that loads the config and exits.
      def check?
        parent = handover[:check]
        !parent.nil? && parent == Process.ppid
      end

      # In a stand-in: the pipe to write "ready" to, kept from any program
      # the app execs. Nil in any other process.
      def stand_in_ready_io
        return unless stand_in?

        io = IO.for_fd(handover[:stand_in].fetch(:ready_fd), "w")
        io.close_on_exec = true
        # Unbuffered: a parent that stopped listening shows as EPIPE on
        # the write itself.
        io.sync = true
        io
      end

      # Starts the command as a stand-in child serving the listeners; ready
      # is the write end of its ready pipe. Returns the pid; raises
      # SystemCallError if it cannot start.
      def spawn_stand_in(listeners, ready)
        record(ARGV) unless @command
        fds = listeners.descriptors
        require "json"
        handover = JSON.generate("fds" => fds, "workers" => [], "stand_in" => { "ready_fd" => ready.fileno })
        # fd => fd hands the child exactly these descriptors (Ruby clears
        # close-on-exec in the child only): nothing else this process holds
        # leaks into it, and the sockets here stay closed on any other exec.
        keep = (fds.values.flatten + [ready.fileno]).to_h { |fd| [fd, fd] }
        Process.spawn({ ENV_KEY => handover }, *@command, keep.merge(chdir: @directory))
      end

      # Starts the command as a pre-flight check child (see HotRestartCheck),
      # from the same directory, with the same environment the exec would
      # get. It is handed no socket: it must not bind or serve. Returns the
      # pid; raises SystemCallError if it cannot start.
      def spawn_check
        record(ARGV) unless @command
        require "json"
        handover = JSON.generate("fds" => {}, "workers" => [], "check" => { "parent" => Process.pid })
        Process.spawn({ ENV_KEY => handover }, *@command, chdir: @directory)
      end

      # Replaces this process. Returns only if exec failed, with the error.
      # env: variables for the new program only (systemd's, which this
      # process took out of ENV so that its children would not see them).
      def exec(listeners, workers: [], env: {})
        record(ARGV) unless @command
        require "json"
        ENV[ENV_KEY] = JSON.generate("fds" => listeners.inheritable, "workers" => workers,
                                     "activated" => listeners.activated_fds)
        Dir.chdir(@directory)
        Process.exec(env, *@command)
      rescue SystemCallError => e
        ENV.delete(ENV_KEY)
        listeners.keep_private
        e
      end

      private

      # Our child, or (fork_worker) a worker forked by worker 0, whose
      # process title names this master (Cluster#child, Mold#child).
      def child?(pid)
        return true if File.read("/proc/#{pid}/stat")[/\) \S+ (\d+)/, 1].to_i == Process.pid

        title = File.read("/proc/#{pid}/cmdline")
        title.start_with?("tsubame: cluster worker ") && title.match?(/: #{Process.pid}(?: \[|\z|\0)/)
      rescue SystemCallError
        false
      end

      def handover
        @handover ||= parse(ENV.delete(ENV_KEY))
      end

      def parse(text)
        return parse_json(text) if text

        { fds: {}, workers: [], stand_in: nil, check: nil, activated: [] }
      end

      # JSON is loaded only when a handover exists: a server that was not
      # restarted never needs it (less memory for every process).
      def parse_json(text)
        require "json"
        data = JSON.parse(text)
        fds = data.fetch("fds", {}).transform_values { |list| list.map { |fd| Integer(fd) } }
        stand_in = data["stand_in"] && { ready_fd: Integer(data["stand_in"].fetch("ready_fd")) }
        check = data["check"] && Integer(data["check"].fetch("parent"))
        { fds: fds, workers: data.fetch("workers", []).map { |pid| Integer(pid) }, stand_in: stand_in, check: check,
          activated: data.fetch("activated", []).map { |fd| Integer(fd) } }
      rescue JSON::ParserError, TypeError, ArgumentError, KeyError, NoMethodError
        { fds: {}, workers: [], stand_in: nil, check: nil, activated: [] }
      end
    end
  end
end
