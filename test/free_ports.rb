# frozen_string_literal: true

require "fileutils"
require "socket"
require "tmpdir"

module Tsubame
  # TCP ports for servers whose address a test must know before they start
  # (a control URL, $PORT, nginx's or HAProxy's front, an activated
  # socket). Asking the kernel for a free port (bind to port 0, close) and
  # handing it on is a race: until the server binds it, the kernel may give
  # the same port to any other bind to port 0 (every TestServer binds
  # tcp://127.0.0.1:0) or to the local end of an outgoing connection (each
  # test makes many), and the server then fails with EADDRINUSE. The suite
  # runs under Rack 2 and Rack 3 at once, and engineers run test files side
  # by side, so this happened.
  #
  # So the ports come from below the kernel's ephemeral range, which the
  # kernel never picks on its own, and each is reserved by an flock on a
  # file named after it that this process holds until it exits (the kernel
  # drops the lock even if it crashes): no two processes of the suite, nor
  # two calls in one process, get the same port, and a port some other
  # program listens on is passed over.
  module FreePorts
    LOCK_DIR = File.join(Dir.tmpdir, "tsubame-test-ports")
    EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"
    # Linux's default ephemeral range starts here.
    DEFAULT_EPHEMERAL_LOW = 32_768
    POOL_SIZE = 10_000

    @held = []
    @lock = Mutex.new

    class << self
      # A port reserved for this process, that nothing listened on just now.
      def take
        @lock.synchronize do
          ports = pool.to_a
          start = rand(ports.size)
          ports.size.times do |i|
            port = ports[(start + i) % ports.size]
            reservation = reserve(port) or next
            next reservation.close unless bindable?(port)

            @held << reservation
            return port
          end
          raise "FreePorts: every port in #{ports.first}..#{ports.last} is reserved or in use"
        end
      end

      # The POOL_SIZE ports just below the ephemeral range.
      def pool
        low = File.read(EPHEMERAL).split.first.to_i
        low = DEFAULT_EPHEMERAL_LOW unless low > 1024
        ([low - POOL_SIZE, 1024].max)..(low - 1)
      rescue SystemCallError
        (DEFAULT_EPHEMERAL_LOW - POOL_SIZE)..(DEFAULT_EPHEMERAL_LOW - 1)
      end

      private

      # The open lock file, or nil if another process (or this one) holds
      # the port. Shared by every user of the machine: the directory is
      # sticky and world-writable, the files world-writable.
      def reserve(port)
        make_lock_dir
        path = File.join(LOCK_DIR, port.to_s)
        file = File.open(path, File::RDWR | File::CREAT, 0o666)
        File.chmod(0o666, path) if file.stat.owned?
        return file if file.flock(File::LOCK_EX | File::LOCK_NB)

        file.close
        nil
      rescue Errno::EACCES, Errno::EPERM
        nil
      end

      def make_lock_dir
        return if File.directory?(LOCK_DIR)

        FileUtils.mkdir_p(LOCK_DIR)
        File.chmod(0o1777, LOCK_DIR)
      rescue Errno::EEXIST, Errno::EPERM
        nil
      end

      def bindable?(port)
        TCPServer.new("127.0.0.1", port).close
        true
      rescue Errno::EADDRINUSE, Errno::EACCES
        false
      end
    end
  end
end
