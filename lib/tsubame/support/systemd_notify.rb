# frozen_string_literal: true

require "socket"
require "tsubame/support/named_thread"

module Tsubame
  # systemd's service notification protocol (sd_notify(3), for units with
  # `Type=notify`), spoken directly: each notification is one datagram of
  # `KEY=VALUE` lines sent to the socket named by $NOTIFY_SOCKET, so no
  # libsystemd or gem is needed. See docs/SYSTEMD.md for what is sent when.
  #
  # The variables are taken out of ENV when the server boots (as
  # sd_notify(unset_environment=1) does): workers, the app and any program
  # it runs must not report to systemd as if they were the service. The
  # hot restart's exec puts them back (#exec_env), because the re-executed
  # process keeps the pid and so stays the service's main process.
  #
  # Sending never raises: a service manager that went away must not take
  # the server with it (libsystemd's callers ignore the error too).
  class SystemdNotify
    ENV_KEYS = %w[NOTIFY_SOCKET WATCHDOG_USEC WATCHDOG_PID].freeze

    # STATUS= is resent this often (systemctl status shows the last one),
    # besides on every change of state.
    STATUS_INTERVAL = 5.0

    class << self
      # The notifier for this process, built once: the first call takes the
      # variables out of ENV, so later calls must see the same object.
      def take
        @take ||= from_env(ENV)
      end

      # Reads and deletes the variables from env. Returns a notifier that
      # does nothing when $NOTIFY_SOCKET is not set.
      def from_env(env)
        values = ENV_KEYS.to_h { |key| [key, env.delete(key)] }
        socket = values["NOTIFY_SOCKET"]
        return new(nil) if socket.nil? || socket.empty?

        new(socket, watchdog_usec: watchdog_usec(values["WATCHDOG_USEC"], values["WATCHDOG_PID"]))
      end

      private

      # sd_watchdog_enabled(3): the watchdog is ours only when WATCHDOG_PID
      # is unset or names this process (the variable may have been passed
      # down from a parent that is the one being watched).
      def watchdog_usec(usec, pid)
        return nil if usec.nil? || (pid && Integer(pid, 10) != Process.pid)

        value = Integer(usec, 10)
        value.positive? ? value : nil
      rescue ArgumentError
        nil
      end
    end

    attr_reader :socket_path, :watchdog_usec

    def initialize(socket_path, watchdog_usec: nil)
      @socket_path = socket_path
      @watchdog_usec = socket_path && watchdog_usec
      @stopping = false
      @next_status = 0.0
      @next_watchdog = 0.0
    end

    def enabled?
      !@socket_path.nil?
    end

    # Seconds between WATCHDOG=1 pings: half of WATCHDOG_USEC, as
    # sd_watchdog_enabled(3) recommends. Nil without a watchdog.
    def watchdog_interval
      @watchdog_usec && @watchdog_usec / 2_000_000.0
    end

    # The service serves (again). MAINPID is our own pid: the same as the
    # one systemd started, also after a hot restart (exec keeps it), but it
    # lets systemd follow this process when it was started through a
    # wrapper that forked (with NotifyAccess=all).
    def ready(status)
      notify("READY=1", "STATUS=#{status}", "MAINPID=#{Process.pid}")
    end

    # A hot or phased restart began; #ready follows when it is over (or
    # failed, the old code serving on). MONOTONIC_USEC is what systemd 253+
    # asks to go with RELOADING=1.
    def reloading(status)
      usec = (Process.clock_gettime(Process::CLOCK_MONOTONIC) * 1_000_000).to_i
      notify("RELOADING=1", "MONOTONIC_USEC=#{usec}", "STATUS=#{status}")
    end

    # Once per process, however many signals ask for the stop. Safe in a
    # trap handler: it only opens a socket of its own and writes to it.
    def stopping(status = "Stopping")
      return if @stopping || !enabled?

      @stopping = true
      notify("STOPPING=1", "STATUS=#{status}")
    end

    def stopping?
      @stopping
    end

    def status(text)
      notify("STATUS=#{text}")
    end

    def watchdog
      notify("WATCHDOG=1")
    end

    # Sends what is due: a watchdog ping (only when healthy: a process
    # that stopped making progress must let systemd's timer run out) and
    # the periodic STATUS= (the block gives it, called only then). Called
    # from the cluster master's loop, or from #start_ticker's thread.
    def tick(healthy: true)
      return unless enabled?

      now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      if watchdog_interval && now >= @next_watchdog
        @next_watchdog = now + watchdog_interval
        watchdog if healthy
      end
      return if now < @next_status

      @next_status = now + STATUS_INTERVAL
      status(yield) if block_given?
    end

    # Seconds until #tick has something to do.
    def next_tick_in
      now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      due = [@next_status, (@next_watchdog if watchdog_interval)].compact.min
      [due - now, 0.0].max
    end

    # For single mode, which has no loop of its own: a thread calling
    # #tick. healthy is asked before each ping. Returns the thread, or nil
    # when there is nothing to send.
    def start_ticker(healthy:, &status)
      return unless enabled?

      # The first STATUS= went out with READY=1.
      @next_status = Process.clock_gettime(Process::CLOCK_MONOTONIC) + STATUS_INTERVAL
      NamedThread.start("tsubame-systemd") do
        loop do
          sleep next_tick_in
          tick(healthy: healthy.call, &status)
        end
      end
    end

    # The variables for a hot restart's exec (the same pid, so the same
    # service and watchdog); empty when not under systemd.
    def exec_env
      return {} unless enabled?

      env = { "NOTIFY_SOCKET" => @socket_path }
      env.update("WATCHDOG_USEC" => @watchdog_usec.to_s, "WATCHDOG_PID" => Process.pid.to_s) if @watchdog_usec
      env
    end

    # Sends one datagram of lines. Returns whether it was sent.
    def notify(*lines)
      return false unless enabled?

      # One line per field: a newline inside STATUS= would start a field.
      message = lines.map { |line| line.tr("\n", " ") }.join("\n")
      # A socket per message, as libsystemd does: nothing is shared with
      # another thread or a trap handler, and nothing is left open in a
      # forked worker.
      Socket.open(:UNIX, :DGRAM) do |socket|
        socket.send(message, 0, Socket.sockaddr_un(address))
      end
      true
    rescue SystemCallError, IOError, ArgumentError
      false
    end

    private

    # "@name" is an abstract socket: its address begins with a NUL byte.
    def address
      @socket_path.start_with?("@") ? "\0#{@socket_path[1..]}" : @socket_path
    end
  end
end
