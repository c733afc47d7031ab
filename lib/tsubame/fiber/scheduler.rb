# frozen_string_literal: true

require "socket"
require "tsubame/fiber/timers"

module Tsubame
  # The Fiber::Scheduler (Ruby 3.1 interface) of a fiber loop thread. Each
  # request runs in its own non-blocking fiber; whenever the app would
  # block (a socket read, sleep, a contended Mutex, a Queue pop, DNS, a
  # child process) Ruby calls one of the hooks below, which parks the fiber
  # and switches back to the loop. The loop waits in a Native::Selector
  # (epoll, GVL released) for the descriptors parked fibers wait on, the
  # next timer, and the selector's eventfd, which other threads and the
  # engine's fiber queue use to wake it.
  #
  # Fibers switch with Fiber#transfer, never resume/yield: a hook may run
  # inside a fiber the app resumed itself (an Enumerator's), and transfer
  # returns straight to the loop without disturbing that pairing.
  class FiberScheduler
    # One parked fiber. `resume` only queues it; a waiter is resumed at
    # most once, and one that left its hook (an exception raised into the
    # fiber) is skipped when its queued resume comes up.
    class Waiter
      attr_reader :fiber
      attr_accessor :done, :gone

      def initialize(fiber)
        @fiber = fiber
        @done = false
        @gone = false
      end
    end

    # Blocking work run off the loop (getaddrinfo); a few threads, started
    # as needed, so a thousand fibers resolving at once cost no thousand
    # threads.
    HELPER_THREADS = 4

    # While a long batch of ready fibers runs (200 upstream answers landing
    # at once), new requests are still taken this often, and run first: a
    # fast request waits for one fiber's turn, not for the whole batch.
    INTAKE_INTERVAL = 0.002

    attr_reader :fibers_alive

    def initialize(selector, log: nil)
      @selector = selector
      @log = log
      @thread = Thread.current
      @root = Fiber.current
      # Fibers to resume, flat: waiter, value, waiter, value, ... (no pair
      # array per resume).
      @ready = []
      @remote = Thread::Queue.new
      @timers = FiberTimers.new
      @io = {}
      # Keyed by fiber or waiter: identity hashing, since Object#hash would
      # give every request's fiber an object id (a global table entry).
      @blocked = {}.compare_by_identity
      @fibers_alive = 0
      @helpers = []
      @helper_jobs = Thread::Queue.new
      @closed = false
      @calls = Hash.new(0)
      @room_waiters = {}.compare_by_identity
      @intake = nil
      @accepting = false
      @intake_at = 0.0
    end

    # How many times each hook ran on this loop (for diagnostics and the
    # tests, which check that app code really went through the scheduler).
    def calls
      @calls.dup
    end

    # Runs the loop on this thread (its root fiber) until `intake` returns
    # false (no more work will come) and every fiber has finished. `intake`
    # is called each turn to start new fibers; it must not block.
    def run(intake = nil)
      @intake = intake
      @accepting = !intake.nil?
      loop do
        take_new
        run_ready
        take_remote
        fire_timers
        break if !@accepting && @fibers_alive.zero? && @ready.empty? && @remote.empty?

        wait_for_events
      end
    end

    # Starts `block` in a new non-blocking fiber on the next loop turn.
    def spawn(&block)
      new_fiber({}, block)
    end

    # Raises `exception` in `fiber` from any thread: the loop thread raises
    # it when the fiber is parked (Fiber#raise needs it suspended).
    def raise_in(fiber, exception)
      enqueue_remote([:raise, fiber, exception])
    end

    # --- Fiber::Scheduler hooks (Ruby 3.1) ---

    # IO#wait_readable, IO#wait_writable, and every Ruby-level read or
    # write that would block. Returns the ready events, or false on timeout.
    def io_wait(io, events, timeout)
      @calls[:io_wait] += 1
      fd = io.fileno
      waiter = Waiter.new(Fiber.current)
      watch(fd, waiter, events)
      timer = @timers.after(timeout, waiter, false) if timeout
      park(waiter)
    ensure
      timer&.cancel
      unwatch(fd, waiter) if waiter
    end

    # Reads at least `length` bytes (at least once when 0) into `buffer`
    # (an IO::Buffer) without blocking the loop; returns the bytes read, or
    # -errno. Ruby calls it when its own read buffer is empty; the read is
    # a plain read(2) (Native.fd_read), since Ruby's read_nonblock would
    # call this hook again.
    def io_read(io, buffer, length)
      @calls[:io_read] += 1
      fd = io.fileno
      offset = 0
      while offset < buffer.size
        chunk = Native.fd_read(fd, buffer.size - offset)
        case chunk
        when false then io_wait(io, IO::READABLE, nil)
        when nil then break
        when Integer then return offset.zero? ? chunk : offset
        else
          buffer.set_string(chunk, offset)
          offset += chunk.bytesize
          break if offset >= length
        end
      end
      offset
    end

    # Writes at least `length` bytes of `buffer` (at least once when 0);
    # returns the bytes written or -errno.
    def io_write(io, buffer, length)
      @calls[:io_write] += 1
      fd = io.fileno
      offset = 0
      while offset < buffer.size
        written = Native.fd_write(fd, buffer.get_string(offset))
        if written == false
          io_wait(io, IO::WRITABLE, nil)
        elsif written.negative?
          return offset.zero? ? written : offset
        else
          offset += written
          break if offset >= length
        end
      end
      offset
    end

    # Kernel#sleep; nil sleeps until woken (unblock).
    def kernel_sleep(duration = nil)
      @calls[:kernel_sleep] += 1
      waiter = Waiter.new(Fiber.current)
      @blocked[waiter.fiber] = waiter
      timer = @timers.after(duration, waiter, true) if duration
      park(waiter)
      true
    ensure
      timer&.cancel
      @blocked.delete(waiter.fiber) if waiter
    end

    # Mutex, ConditionVariable, Queue, SizedQueue, Thread#join: parks the
    # fiber until `unblock` (true) or the timeout (false).
    def block(_blocker, timeout = nil)
      @calls[:block] += 1
      waiter = Waiter.new(Fiber.current)
      @blocked[waiter.fiber] = waiter
      timer = @timers.after(timeout, waiter, false) if timeout
      park(waiter)
    ensure
      timer&.cancel
      @blocked.delete(waiter.fiber) if waiter
    end

    # May be called from any thread (a thread pool request pushing to a
    # Queue a fiber waits on); must not block.
    def unblock(_blocker, fiber)
      @calls[:unblock] += 1
      if Thread.current.equal?(@thread)
        waiter = @blocked[fiber]
        resume(waiter, true) if waiter
      else
        enqueue_remote([:unblock, fiber])
      end
    end

    # Socket.getaddrinfo, TCPSocket.new, Addrinfo.getaddrinfo, Net::HTTP:
    # getaddrinfo(3) blocks in C, so it runs on a helper thread while the
    # fiber is parked. Returns the addresses as strings.
    def address_resolve(hostname)
      @calls[:address_resolve] += 1
      # An IPv6 zone ("fe80::1%eth0") is not part of the name to resolve.
      name = hostname.sub(/%.*\z/, "")
      numeric(name) || off_loop { Addrinfo.getaddrinfo(name, nil, nil, :STREAM).map(&:ip_address).uniq }
    rescue SocketError
      []
    end

    # Timeout.timeout: raises `exception_class` in this fiber if `block`
    # has not finished within `duration` seconds.
    def timeout_after(duration, exception_class, *exception_arguments)
      @calls[:timeout_after] += 1
      fiber = Fiber.current
      expire = lambda do
        fiber.raise(exception_class, *exception_arguments) if fiber.alive?
      rescue FiberError => e
        @log&.call("timeout could not interrupt a fiber: #{e.message}")
      end
      timer = @timers.after(duration, expire)
      yield duration
    ensure
      timer&.cancel
    end

    # Process.wait, IO.popen's close, `system`, backticks: waitpid blocks,
    # so a thread of its own waits (a child may run for long; the DNS
    # helpers are not held by it).
    def process_wait(pid, flags)
      @calls[:process_wait] += 1
      off_loop(dedicated: true) { Process::Status.wait(pid, flags) }
    end

    # Fiber.schedule: the new fiber starts on the next loop turn.
    def fiber(**options, &block)
      @calls[:fiber] += 1
      new_fiber(options, block)
    end

    # Not a Ruby hook: Native::Stream#write calls it when a streamed body
    # is ahead of its client (the engine's channel is full). The fiber is
    # parked until the engine makes room, which wakes the selector.
    def wait_stream_room(stream)
      @calls[:stream_room] += 1
      waiter = Waiter.new(Fiber.current)
      @room_waiters[waiter] = stream
      stream.notify_room(@selector)
      # Room made before the waker was in place would wake no one.
      resume(waiter, true) if stream.room?
      park(waiter)
    ensure
      @room_waiters.delete(waiter) if waiter
      stream.notify_room(nil)
    end

    # Called by Ruby when the scheduler is replaced or its thread ends:
    # lets every fiber still alive finish, then stops the helpers.
    def close
      return if @closed

      @closed = true
      # A thread being killed (a stop past its grace) must not start
      # waiting for its fibers again.
      run if Fiber.current.equal?(@root) && @fibers_alive.positive? && Thread.current.status != "aborting"
      @helpers.size.times { @helper_jobs << nil }
      @helpers.each(&:join)
    end

    def closed?
      @closed
    end

    private

    def new_fiber(options, block)
      fiber = Fiber.new(blocking: false, **options) do
        block.call
      ensure
        @fibers_alive -= 1
      end
      @fibers_alive += 1
      @ready.push(Waiter.new(fiber), nil)
      fiber
    end

    # Parks the current fiber until its waiter is resumed; returns the
    # value it was resumed with.
    def park(waiter)
      @root.transfer
    ensure
      waiter.gone = true
    end

    def resume(waiter, value)
      return if waiter.done

      waiter.done = true
      @ready.push(waiter, value)
    end

    # A due timer either resumes the fiber it belongs to or (a
    # Timeout.timeout) runs its action.
    def fire_timers
      @timers.fire do |target, value|
        target.is_a?(Waiter) ? resume(target, value) : target.call
      end
    end

    def run_ready
      until @ready.empty?
        batch = @ready
        @ready = []
        index = 0
        while index < batch.size
          waiter = batch[index]
          value = batch[index + 1]
          index += 2
          next if waiter.gone || !waiter.fiber.alive?

          switch { waiter.fiber.transfer(value) }
          next unless @accepting && FiberTimers.now - @intake_at > INTAKE_INTERVAL

          take_new
          next if @ready.empty?

          batch = @ready.concat(batch.drop(index))
          @ready = []
          index = 0
        end
      end
    end

    def take_new
      @intake_at = FiberTimers.now
      @accepting = @intake.call if @accepting
    end

    # An exception a fiber did not handle ends up here, on the loop: it is
    # the fiber's failure, logged, and the loop goes on.
    def switch
      yield
    rescue Exception => e # rubocop:disable Lint/RescueException
      @log&.call("fiber failed: #{e.class}: #{e.message}")
    end

    def enqueue_remote(message)
      @remote << message
      @selector.wakeup
    end

    def take_remote
      until @remote.empty?
        kind, target, argument = @remote.pop(true)
        case kind
        when :unblock
          waiter = @blocked[target]
          resume(waiter, true) if waiter
        when :resume
          resume(target, argument)
        when :raise
          switch { target.raise(argument) } if target.alive?
        end
      end
      run_ready
    rescue ThreadError
      nil
    end

    def wait_for_events
      timeout = @ready.empty? && @remote.empty? ? @timers.wait_interval : 0
      ready = @selector.select(timeout)
      check_stream_room unless @room_waiters.empty?
      index = 0
      while index < ready.size
        dispatch(ready[index], ready[index + 1])
        index += 2
      end
    end

    def check_stream_room
      @room_waiters.each { |waiter, stream| resume(waiter, true) if stream.room? }
    end

    def dispatch(fd, events)
      waiters = @io[fd]
      return unless waiters

      waiters.each do |waiter, wanted|
        got = wanted & events
        resume(waiter, got) unless got.zero?
      end
      # Waiters still registered need a fresh edge: re-arming reports
      # readiness that is already there.
      rearm(fd)
    end

    # A descriptor epoll refuses (a regular file) never blocks: its
    # waiter is ready at once.
    def watch(fd, waiter, events)
      (@io[fd] ||= {}.compare_by_identity)[waiter] = events
      rearm(fd) || resume(waiter, events)
    end

    def unwatch(fd, waiter)
      waiters = @io[fd]
      return unless waiters

      waiters.delete(waiter)
      rearm(fd)
    end

    def rearm(fd)
      waiters = @io[fd]
      events = 0
      waiters.each { |waiter, wanted| events |= wanted unless waiter.done }
      if events.zero?
        @io.delete(fd) if waiters.empty?
        @selector.unwatch(fd)
        true
      else
        @selector.watch(fd, events)
      end
    end

    # An address literal needs no lookup (AI_NUMERICHOST never blocks), so
    # it costs no helper thread hand-off.
    def numeric(name)
      Addrinfo.getaddrinfo(name, nil, nil, :STREAM, nil, Socket::AI_NUMERICHOST).map(&:ip_address).uniq
    rescue SocketError
      nil
    end

    # Runs `work` on another thread while this fiber is parked; returns its
    # result or raises its exception here.
    def off_loop(dedicated: false, &work)
      waiter = Waiter.new(Fiber.current)
      outcome = nil
      job = lambda do
        outcome = begin
          [:ok, work.call]
        rescue Exception => e # rubocop:disable Lint/RescueException
          [:error, e]
        end
        enqueue_remote([:resume, waiter, true])
      end
      if dedicated
        Thread.new(&job)
      else
        start_helper if @helpers.size < HELPER_THREADS && @helper_jobs.num_waiting.zero?
        @helper_jobs << job
      end
      park(waiter)
      raise outcome.last if outcome.first == :error

      outcome.last
    end

    def start_helper
      @helpers << Thread.new do
        Thread.current.name = "tsubame-fiber-helper"
        while (job = @helper_jobs.pop)
          job.call
        end
      end
    end
  end
end
