# frozen_string_literal: true

require "json"
require "rbconfig"

module Tsubame
  # Re-executing the server in place (USR2, `tsubame ctl restart`,
  # `plugin :tmp_restart`) while its listening sockets stay open, so no
  # client is refused: connections that arrive meanwhile wait in the
  # kernel's backlog until the new process accepts them.
  #
  # The old process clears close-on-exec on the sockets and names them in
  # one environment variable, as { configured bind URI => [fd, ...] }; the
  # new process reads and deletes it (the app never sees it) and adopts the
  # sockets whose URI it still binds (Listeners.bind). In cluster mode the
  # variable also lists the old workers: exec keeps the master's pid, so
  # they are still its children, and they serve until the new workers boot.
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
        @directory = Dir.pwd.freeze
      end

      def inherited_fds
        handover.fetch(:fds)
      end

      # Only pids that really are this process's children: the variable
      # must never make the server signal an unrelated process.
      def inherited_workers
        handover.fetch(:workers).select { |pid| child?(pid) }
      end

      def restarted?
        !handover[:fds].empty? || !handover[:workers].empty?
      end

      # Replaces this process. Returns only if exec failed, with the error.
      def exec(listeners, workers: [])
        record(ARGV) unless @command
        ENV[ENV_KEY] = JSON.generate("fds" => listeners.inheritable, "workers" => workers)
        Dir.chdir(@directory)
        Process.exec(*@command)
      rescue SystemCallError => e
        ENV.delete(ENV_KEY)
        listeners.keep_private
        e
      end

      private

      def child?(pid)
        File.read("/proc/#{pid}/stat")[/\) \S+ (\d+)/, 1].to_i == Process.pid
      rescue SystemCallError
        false
      end

      def handover
        @handover ||= parse(ENV.delete(ENV_KEY))
      end

      def parse(text)
        data = text ? JSON.parse(text) : {}
        fds = data.fetch("fds", {}).transform_values { |list| list.map { |fd| Integer(fd) } }
        { fds: fds, workers: data.fetch("workers", []).map { |pid| Integer(pid) } }
      rescue JSON::ParserError, TypeError, ArgumentError
        { fds: {}, workers: [] }
      end
    end
  end
end
