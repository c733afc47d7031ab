# frozen_string_literal: true

require "tsubame/restart/hot_restart"
require "tsubame/config/app_loader"
require "tsubame/support/clock"
require "tsubame/support/log"

module Tsubame
  # A cluster-mode hot restart's pre-flight check.
  #
  # A cluster master hot-restarts by exec: same pid, the old workers serve
  # until the new master's workers boot. But if the new master cannot
  # start at all (a config file that raises, a bad directive, an app that
  # raises while preloading), nothing is left to supervise the old workers:
  # they see their master gone and stop, and the whole service is down. So
  # before exec the master starts its own command line again as a child
  # (HotRestart.spawn_check) that boots exactly as far as a new master
  # would before serving: the CLI parses the flags and loads the config
  # files, then Launcher#run hands over to HotRestartCheck.run, which loads
  # the app where the new master would load it itself, and exits 0. The
  # master execs only after that exit 0.
  #
  # The master's loop must go on supervising meanwhile, so nothing here
  # blocks: the loop reaps the child with the workers (#exited) and asks
  # #finished? on every turn.
  class HotRestartCheck
    include Clock

    # When worker_boot_timeout is not set: the check loads at most what a
    # new master loads before forking, which can take a while in a big app.
    DEFAULT_TIMEOUT = 60.0

    # In the master: starts the check. Raises SystemCallError if the child
    # cannot be started.
    def self.start(timeout)
      new(HotRestart.spawn_check, timeout)
    end

    # In the check child, once the CLI has loaded the config exactly as the
    # real boot will. The app is loaded when the new program would load it
    # before it serves: under preload_app!, and in single mode (a config
    # that now has no workers). Otherwise the new workers load it, and a
    # new master keeps the old workers serving while they fail. An error
    # propagates, so it is reported on stderr the way a real boot reports
    # it, with a non-zero exit. Returns the exit status.
    def self.run(options, app:, stdout:, stderr:)
      parent = Process.ppid
      tag = options[:tag] ? " [#{options[:tag]}]" : ""
      Process.setproctitle("tsubame: hot restart check for #{parent}#{tag}")
      load_app = app.nil? && (options[:preload_app] || options[:workers].zero?)
      AppLoader.load_app(options) if load_app
      what = load_app ? "configuration and app load" : "configuration loads (the workers load the app)"
      Log.new(stdout, stderr).info("* Hot restart check (PID #{Process.pid}): the new #{what}")
      0
    end

    attr_reader :pid, :timeout

    def initialize(pid, timeout)
      @pid = pid
      @timeout = timeout
      @deadline = monotonic + timeout
      @status = nil
      @timed_out = false
    end

    # The master reaped the child: its loop waits for any child.
    def exited(status)
      @status = status
    end

    # Whether the check is over: it exited, or ran past the timeout, in
    # which case it is killed here.
    def finished?
      return true if @status || @timed_out
      return false if monotonic < @deadline

      @timed_out = true
      kill
      true
    end

    # Once finished: nil if the new code loaded, otherwise why not, to
    # follow "the new configuration/app ".
    def failure
      if @timed_out
        "did not load within #{@timeout}s (check PID #{@pid} killed)"
      elsif !@status.success?
        "failed to load (#{describe(@status)})"
      end
    end

    # Not wanted any more (the server is stopping): killed, not left to
    # run unsupervised.
    def abandon
      kill unless @status
    end

    private

    def kill
      Process.kill("KILL", @pid)
      # SIGKILL cannot be caught, so this wait is short; reaping here
      # keeps the master's loop from ever seeing the pid again.
      Process.wait(@pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end

    def describe(status)
      if status.signaled?
        "killed by SIG#{Signal.signame(status.termsig)}"
      else
        "exit status #{status.exitstatus}"
      end
    end
  end
end
