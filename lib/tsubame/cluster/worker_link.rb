# frozen_string_literal: true

require "json"
require "socket"

module Tsubame
  # The master and each worker talk over a UNIX socket pair, one JSON object
  # per line. Worker to master: "boot", then a "ping" with its stats every
  # worker_check_interval, and "reply" to a request. Master to worker:
  # requests ("gc", "backtraces") carrying an id the reply repeats.
  #
  # A socket pair, not a pipe, so the master can ask as well as listen; and
  # the master's end closes on exec and on death, which is how a worker
  # learns its master is gone.
  #
  # The worker writes with `send` (blocking: the master always reads). The
  # master never blocks on a worker: it `post`s, and what the socket does
  # not take waits in an outbox its loop flushes when the socket is
  # writable. Relayed publishes are droppable: past `limit` bytes waiting
  # (a stopped or slow worker), they are dropped and counted, so one
  # worker that does not read can hold up neither the master nor the
  # others.
  class WorkerLink
    # [master's end, worker's end]
    def self.pair
      UNIXSocket.pair(:STREAM).map { |io| new(io) }
    end

    attr_reader :io, :dropped

    # Bytes a droppable post may leave waiting in the outbox.
    attr_writer :limit

    def initialize(io)
      @io = io
      @buffer = +""
      @write_lock = Mutex.new
      @outbox = "".b
      @limit = 4_194_304
      @dropped = 0
    end

    # Returns false when the other side is gone.
    def send(message)
      line = "#{JSON.generate(message)}\n"
      @write_lock.synchronize { @io.write(line) }
      true
    rescue IOError, SystemCallError
      false
    end

    # Never blocks: writes what the socket takes and keeps the rest for
    # `flush`.
    def post(message)
      post_line("#{JSON.generate(message)}\n")
    end

    # `post` for a line already encoded (one relay, many workers). A
    # droppable line that would leave more than `limit` bytes waiting is
    # dropped instead (false; counted in `dropped`).
    def post_line(line, droppable: false)
      @write_lock.synchronize do
        if droppable && !@outbox.empty? && @outbox.bytesize + line.bytesize > @limit
          @dropped += 1
          return false
        end

        @outbox << line.b
        flush_locked
      end
      true
    end

    # Writes what the socket takes of the outbox; true while some waits.
    def flush
      @write_lock.synchronize { flush_locked }
    end

    def pending?
      !@outbox.empty?
    end

    def pending_bytes
      @outbox.bytesize
    end

    # The complete messages that can be read without blocking; nil once the
    # other side has closed and everything it sent has been returned.
    def read_available
      messages = []
      loop do
        chunk = @io.read_nonblock(65_536, exception: false)
        if chunk.nil?
          return messages.empty? ? nil : messages.compact
        elsif chunk == :wait_readable
          break
        end

        @buffer << chunk
        while (newline = @buffer.index("\n"))
          messages << parse(@buffer.slice!(0, newline + 1))
        end
      end
      messages.compact
    rescue IOError, SystemCallError
      messages.empty? ? nil : messages.compact
    end

    def close
      @io.close unless @io.closed?
    end

    def closed?
      @io.closed?
    end

    private

    def flush_locked
      until @outbox.empty?
        written = @io.write_nonblock(@outbox, exception: false)
        return true if written == :wait_writable

        @outbox = @outbox.byteslice(written, @outbox.bytesize - written)
      end
      false
    rescue IOError, SystemCallError
      # Gone (the worker died): nothing will read it.
      @outbox = "".b
      false
    end

    def parse(line)
      JSON.parse(line)
    rescue JSON::ParserError
      nil
    end
  end
end
