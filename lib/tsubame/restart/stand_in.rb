# frozen_string_literal: true

require "tsubame/restart/hot_restart"
require "tsubame/support/clock"

module Tsubame
  # A single-mode hot restart's stand-in, seen from the process restarting.
  #
  # A single-mode server has no workers to serve while it re-executes, and
  # the new program takes a whole app boot before it accepts; clients
  # would wait in the listen backlog all that time. So the new code is
  # first booted as a child (the same command, see
  # HotRestart.spawn_stand_in) that serves the same listening sockets. Only
  # once it writes "ready" does this process stop accepting, drain and
  # exec; the re-executed process (same pid, so still the stand-in's
  # parent) stops the stand-in once it serves itself. The cost: the new
  # code boots twice.
  class StandIn
    include Clock

    # Raises SystemCallError if the child cannot be started.
    def self.start(listeners)
      reader, writer = IO.pipe
      new(HotRestart.spawn_stand_in(listeners, writer), reader)
    rescue SystemCallError
      reader&.close
      raise
    ensure
      # The child has its own copy; with ours open, its death would never
      # read as end-of-file.
      writer&.close
    end

    attr_reader :pid

    def initialize(pid, reader)
      @pid = pid
      @reader = reader
    end

    # Waits up to `timeout` seconds for the stand-in to serve. Returns nil
    # once it does; otherwise why not, and the stand-in is gone.
    def wait_ready(timeout)
      deadline = monotonic + timeout
      received = +""
      loop do
        left = deadline - monotonic
        unless left.positive? && @reader.wait_readable(left)
          kill
          return "the new code (stand-in PID #{@pid}) did not boot within #{timeout}s; killed it"
        end
        chunk = @reader.read_nonblock(64, exception: false)
        return "the new code (stand-in PID #{@pid}) #{describe(reap)} before it served" if chunk.nil?

        received << chunk if chunk.is_a?(String)
        return nil if received.include?("ready")
      end
    ensure
      @reader.close
    end

    # No longer wanted (this server stops while the stand-in boots, or the
    # exec failed): TERM lets a serving stand-in drain; one that lingers
    # past `grace` is killed.
    def stop(grace: 5.0)
      Process.kill("TERM", @pid)
      deadline = monotonic + grace
      until Process.wait(@pid, Process::WNOHANG)
        return kill if monotonic > deadline

        sleep 0.05
      end
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end

    private

    def kill
      Process.kill("KILL", @pid)
      reap
    rescue Errno::ESRCH
      reap
    end

    def reap
      Process.wait2(@pid).last
    rescue Errno::ECHILD
      nil
    end

    def describe(status)
      if status.nil? then "exited"
      elsif status.signaled? then "was killed by SIG#{Signal.signame(status.termsig)}"
      else "exited with status #{status.exitstatus}"
      end
    end
  end
end
