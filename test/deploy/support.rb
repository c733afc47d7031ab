# frozen_string_literal: true

require "test_helper"
require "cluster/support"

module Tsubame
  # Plays systemd's side of sd_notify(3): a datagram socket bound where
  # $NOTIFY_SOCKET says (a path, or "@name" for an abstract socket),
  # recording every notification with when it came.
  class NotifyListener
    Message = Struct.new(:at, :text, :snapshot) do
      def fields
        text.lines.to_h { |line| line.chomp.split("=", 2) }
      end
    end

    attr_reader :env_value

    # abstract: bind an abstract socket (no file) instead of a path.
    # snapshot: called in the listener's thread as each message arrives,
    # its value kept with the message (what was true at that instant).
    def initialize(abstract: false, snapshot: nil)
      @dir = Dir.mktmpdir("tsubame-notify")
      if abstract
        name = "tsubame-test-#{Process.pid}-#{rand(1 << 30)}"
        @env_value = "@#{name}"
        address = "\0#{name}"
      else
        @env_value = address = File.join(@dir, "notify.sock")
      end
      @socket = Socket.new(:UNIX, :DGRAM)
      @socket.bind(Socket.sockaddr_un(address))
      @snapshot = snapshot
      @messages = []
      @lock = Mutex.new
      @thread = Thread.new { receive }
    end

    def env
      { "NOTIFY_SOCKET" => @env_value }
    end

    def messages
      @lock.synchronize { @messages.dup }
    end

    # Waits for a message matching pattern that came after the one at
    # index `after`; returns [index, message] or fails the test.
    def wait_for(pattern, after: -1, timeout: 20)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        found = messages.each_with_index.find { |message, index| index > after && message.text.match?(pattern) }
        return found.reverse if found
        if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          raise Minitest::Assertion, "no notification matching #{pattern.inspect} within #{timeout}s; " \
                                     "got #{messages.map(&:text).inspect}"
        end

        sleep 0.02
      end
    end

    def close
      @thread.kill.join
      @socket.close
      FileUtils.rm_rf(@dir)
    end

    private

    def receive
      loop do
        text = @socket.recv(4096)
        at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        snapshot = @snapshot&.call(text)
        @lock.synchronize { @messages << Message.new(at, text, snapshot) }
      end
    end
  end

  # systemd-socket-activate (Debian's systemd package) listening on real
  # sockets and exec'ing exe/tsubame on the first connection, with
  # LISTEN_FDS set (its default mode, not --accept).
  class ActivatedServer
    attr_reader :pid, :stdout_path

    # listen: ["127.0.0.1:PORT", ...]; names: LISTEN_FDNAMES; args: the
    # server's flags and rackup file. It passes on only the variables
    # given with -E (and TERM, PATH, USER, HOME).
    def initialize(listen, args, names: nil, env: {})
      @dir = Dir.mktmpdir("tsubame-activate")
      @stdout_path = File.join(@dir, "out.log")
      @stderr_path = File.join(@dir, "err.log")
      command = ["systemd-socket-activate", *listen.flat_map { |address| ["-l", address] }]
      command << "--fdname=#{names.join(":")}" if names
      env.each { |key, value| command << "-E" << "#{key}=#{value}" }
      command += [RbConfig.ruby, "-w", TestHelpers::EXE, *args]
      @pid = Process.spawn(*command, out: @stdout_path, err: @stderr_path, in: File::NULL)
      # It says "Listening on ADDRESS as N." for each socket it opened.
      wait_for(:stderr, /as #{listen.size + 2}\./)
    end

    def stdout
      File.read(@stdout_path)
    end

    def stderr
      File.read(@stderr_path)
    end

    def wait_for(stream, pattern, timeout: 15)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      until send(stream).match?(pattern)
        raise "exited before #{pattern.inspect}:\n#{stdout}\n#{stderr}" if Process.waitpid(@pid, Process::WNOHANG)
        raise "timed out waiting for #{pattern.inspect}:\n#{stdout}\n#{stderr}" if
          Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.02
      end
    end

    # Returns the exit status.
    def stop(timeout: 20)
      Process.kill("TERM", @pid)
      Timeout.timeout(timeout) { Process.wait2(@pid).last }
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end

    def kill
      Process.kill("KILL", @pid)
      Process.wait(@pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    ensure
      FileUtils.rm_rf(@dir)
    end
  end

  module DeployHelpers
    include ClusterHelpers

    # Shows which of systemd's variables the app can see (none, it must).
    ENV_APP = <<~RUBY
      run lambda { |_env|
        seen = %w[NOTIFY_SOCKET WATCHDOG_USEC LISTEN_FDS LISTEN_PID LISTEN_FDNAMES].select { |k| ENV.key?(k) }
        [200, { "content-type" => "text/plain" }, ["pid=\#{Process.pid} seen=\#{seen.join(",")}"]]
      }
    RUBY

    def with_listener(**opts)
      listener = NotifyListener.new(**opts)
      yield listener
    ensure
      listener&.close
    end

    # A raw HTTP/1.1 request on a connection opened by the caller;
    # returns the whole response (the server closes: connection: close).
    def request_on(socket)
      socket.write("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
      socket.read
    end
  end
end
