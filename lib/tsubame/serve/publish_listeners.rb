# frozen_string_literal: true

require "tsubame/support/named_thread"

module Tsubame
  # Ruby blocks that hear what `Tsubame.publish` sends to a channel in this
  # process (`Tsubame.subscribe`), next to the engine-held connections the
  # engine itself reaches. ActionCable's `tsubame` adapter is one of them.
  #
  # One thread of their own (`tsubame-publish`) calls the blocks, one
  # message after the other, so a slow block holds up neither the app nor
  # the link to the master. In a cluster every publish, this worker's own
  # included, comes back from the master before it is queued here, so
  # every worker hears a channel's messages in the one order the master
  # saw them.
  # What waits for that thread is bounded (`publish_buffer` bytes): past
  # it, messages are dropped and counted, never queued without end.
  class PublishListeners
    # What a process keeps: one registry, whichever server runs in it.
    def self.process
      @process ||= new
    end

    attr_writer :limit, :log_line

    def initialize(limit: 4_194_304, log_line: ->(line) { warn(line) })
      @limit = limit
      @log_line = log_line
      @listeners = {}
      @lock = Mutex.new
      @queue = []
      @queued_bytes = 0
      @ready = ConditionVariable.new
      @thread = nil
      @thread_pid = nil
      @delivered = 0
      @dropped = 0
    end

    def add(channel, listener)
      channel = channel.to_s
      @lock.synchronize { @listeners[channel] = [*@listeners[channel], listener].freeze }
      listener
    end

    # Returns whether `listener` was there.
    def remove(channel, listener)
      channel = channel.to_s
      @lock.synchronize do
        list = @listeners[channel] or return false
        rest = list.reject { |l| l.equal?(listener) }
        rest.empty? ? @listeners.delete(channel) : @listeners[channel] = rest.freeze
        rest.size < list.size
      end
    end

    # Read without the lock: the lists are frozen and replaced whole.
    def listening?(channel)
      @listeners.key?(channel)
    end

    # For the listeners' thread, in order. False (and counted) when
    # `limit` bytes already wait.
    def enqueue(channel, message)
      return true unless listening?(channel)

      @lock.synchronize do
        if @queued_bytes + message.bytesize > @limit && !@queue.empty?
          @dropped += 1
          return false
        end

        start_thread
        @queue << [channel, message]
        @queued_bytes += message.bytesize
        @ready.signal
      end
      true
    end

    def stats
      @lock.synchronize do
        { "channels" => @listeners.size, "delivered" => @delivered, "dropped" => @dropped,
          "queued" => @queue.size, "queued_bytes" => @queued_bytes }
      end
    end

    private

    # Under @lock. A worker forked from a master that had listeners gets
    # the registry but not the thread.
    def start_thread
      return if @thread_pid == Process.pid && @thread&.alive?

      @thread_pid = Process.pid
      @thread = NamedThread.start("tsubame-publish") { deliver_queued }
    end

    def deliver_queued
      loop do
        channel, message = @lock.synchronize do
          @ready.wait(@lock) while @queue.empty?
          item = @queue.shift
          @queued_bytes -= item[1].bytesize
          item
        end
        call(channel, message)
      end
    end

    def call(channel, message)
      list = @listeners[channel] or return
      list.each { |listener| run(listener, channel, message) }
      @lock.synchronize { @delivered += 1 }
    end

    def run(listener, channel, message)
      listener.call(message)
    rescue Exception => e # rubocop:disable Lint/RescueException
      # The listener's failure: logged, and the others still hear it.
      @log_line.call("Tsubame.subscribe listener on #{channel.inspect} raised: #{e.class}: #{e.message}")
    end
  end
end
