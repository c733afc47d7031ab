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
  class WorkerLink
    # [master's end, worker's end]
    def self.pair
      UNIXSocket.pair(:STREAM).map { |io| new(io) }
    end

    attr_reader :io

    def initialize(io)
      @io = io
      @buffer = +""
      @write_lock = Mutex.new
    end

    # Returns false when the other side is gone.
    def send(message)
      line = "#{JSON.generate(message)}\n"
      @write_lock.synchronize { @io.write(line) }
      true
    rescue IOError, SystemCallError
      false
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

    def parse(line)
      JSON.parse(line)
    rescue JSON::ParserError
      nil
    end
  end
end
