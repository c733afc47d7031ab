# frozen_string_literal: true

require "tsubame/errors"
require "tsubame/support/named_thread"
require "tsubame/serve/publish_listeners"

module Tsubame
  # Sends `message` to every WebSocket and SSE connection of this process
  # subscribed to `channel` (`Connection#subscribe`); returns how many took
  # it. The engine sends it (straight to an idle plain socket, from this
  # thread; queued for the others): no Ruby runs per recipient.
  def self.publish(channel, message)
    upgrades = Upgrades.current
    raise Error, "Tsubame.publish needs a running Tsubame server" unless upgrades

    upgrades.publish(channel, message)
  end

  # Calls the block with every message `Tsubame.publish` sends to `channel`
  # from any worker of the cluster (a String: UTF-8 for text, ASCII-8BIT
  # for binary). The blocks run on one thread of their own
  # (`tsubame-publish`), one message after the other; in a cluster in the
  # order the master relayed them, the same in every worker. Returns the
  # block, for `unsubscribe`.
  def self.subscribe(channel, &block)
    raise ArgumentError, "Tsubame.subscribe needs a block" unless block

    PublishListeners.process.add(channel, block)
  end

  def self.unsubscribe(channel, block)
    PublishListeners.process.remove(channel, block)
  end

  # `rack.upgrade` (docs/WEBSOCKETS.md), the interface Iodine and Agoo
  # define: the env offers `rack.upgrade?` (:websocket or :sse), the app
  # sets `env["rack.upgrade"]` to a handler, and the engine holds the
  # connection. The handler's callbacks run on a few threads of their own
  # (`upgrade_threads`), one event at a time per connection and in order;
  # between events a connection costs no thread and no fiber.
  class Upgrades
    CALLBACKS = { open: :on_open, message: :on_message, drained: :on_drained,
                  shutdown: :on_shutdown, close: :on_close }.freeze

    REQUEST_KEYS = %w[rack.input rack.hijack rack.hijack_io tsubame.request rack.response_finished
                      rack.after_reply rack.early_hints].freeze

    class << self
      # The server whose connections Tsubame.publish reaches.
      attr_accessor :current
    end

    # What a handler's callbacks get: the connection, to write to, close,
    # and subscribe.
    class Connection
      attr_reader :env

      def initialize(native, id, env, kind)
        @native = native
        @id = id
        @env = env
        @kind = kind
      end

      # :websocket or :sse.
      def protocol
        @kind
      end

      def websocket?
        @kind == :websocket
      end

      def sse?
        @kind == :sse
      end

      # Sends a message without waiting (straight to the socket when it is
      # free and takes it all, else queued for the engine). A binary
      # (ASCII-8BIT) String goes as a binary frame, any other as text
      # (UTF-8). False when the connection is closed, or closing because
      # its client stopped reading (`upgrade_max_pending`).
      def write(data)
        data, text = Upgrades.message(data)
        @native.upgrade_write(@id, data, text)
      end

      # Starts the close (a WebSocket close frame with `code`); on_close
      # follows once the connection is gone.
      def close(code = 1000)
        raise ArgumentError, "close code #{code} is not one an endpoint may send" unless Upgrades.sendable_code?(code)

        @native.upgrade_close(@id, code)
      end

      # Bytes written and not yet sent to the client; -1 once closed.
      def pending
        @native.upgrade_pending(@id) || -1
      end

      def open?
        @native.upgrade_open?(@id)
      end

      # Messages published to `channel` (Tsubame.publish) come to this
      # connection.
      def subscribe(channel)
        @native.upgrade_subscribe(@id, channel.to_s)
      end

      def unsubscribe(channel)
        @native.upgrade_unsubscribe(@id, channel.to_s)
      end
    end

    # [bytes, text?] for a message: an ASCII-8BIT String is binary, any
    # other text, transcoded to UTF-8 and refused if it is not valid (a
    # text frame must be, RFC 6455 §8.1).
    def self.message(data)
      data = data.to_s
      return [data, false] if data.encoding.equal?(Encoding::BINARY)

      data = data.encode(Encoding::UTF_8) unless data.encoding.equal?(Encoding::UTF_8)
      raise ArgumentError, "a text message must be valid UTF-8 (send binary data as an ASCII-8BIT String)" unless data.valid_encoding?

      [data, true]
    end

    # Codes a server may put in a close frame (RFC 6455 §7.4): not the
    # reserved 1004-1006 and 1015, nothing outside the assigned ranges.
    def self.sendable_code?(code)
      code.is_a?(Integer) && ((1000..1003).cover?(code) || (1007..1014).cover?(code) || (3000..4999).cover?(code))
    end

    # In a cluster worker: passes each publish on to the master, which
    # hands it to the other workers (`deliver`), and back to this one when
    # it has listeners for the channel. False once the master is gone.
    attr_writer :relay

    attr_reader :listeners

    def initialize(native, threads, log_line, listeners: PublishListeners.process)
      @relay = nil
      @listeners = listeners
      @native = native
      @thread_count = threads
      @log_line = log_line
      @handlers = {}
      @lock = Mutex.new
      @threads = nil
    end

    # The threads, once the first connection was upgraded.
    def threads
      @threads || []
    end

    # After the app returned with `env["rack.upgrade"]` set: the request's
    # connection becomes an upgraded one. Registered before the engine is
    # told, so its first event finds the handler.
    def take(request, env, handler)
      kind = env["rack.upgrade?"]
      id = @native.upgrade_open(handler.respond_to?(:on_drained))
      connection = Connection.new(@native, id, connection_env(env), kind)
      @lock.synchronize do
        @handlers[id] = [handler, connection]
        @threads ||= Array.new(@thread_count) { |i| NamedThread.start("tsubame-upgrade-#{i}") { run } }
      end
      request.upgrade(kind, id)
    end

    # Queues the message on this process's engine-held subscribers (the
    # count returned) and, in a cluster, on the other workers' too. Ruby
    # listeners (`Tsubame.subscribe`) hear it from their own thread: in a
    # cluster once the master hands it back, as every other worker does,
    # so all of them hear a channel's messages in the same order.
    def publish(channel, message)
      channel = channel.to_s
      message, text = Upgrades.message(message)
      relayed = @relay&.call("type" => "publish", "channel" => channel, "text" => text, "pid" => Process.pid,
                             "echo" => @listeners.listening?(channel),
                             "message" => text ? message : [message].pack("m0"))
      # Single mode, or the master is gone: nobody hands it back.
      @listeners.enqueue(channel, message) unless relayed
      @native.publish(channel, message, text)
    end

    # A publish the master relayed: another worker's, for this one's
    # subscribers, or this worker's own coming back for its listeners.
    def deliver(publish)
      text = publish["text"]
      channel = publish["channel"].to_s
      message = text ? publish["message"] : publish["message"].unpack1("m0")
      @native.publish(channel, message, text) unless publish["pid"] == Process.pid
      @listeners.enqueue(channel, message)
    end

    private

    # What the connection keeps of the env: the request's keys without the
    # ones that hold the finished request itself (its body, the request
    # object, the callback lists), so an idle connection does not keep
    # them alive for as long as it stays open.
    def connection_env(env)
      env.reject { |key, _| REQUEST_KEYS.include?(key) }
    end

    def run
      while (event = @native.next_upgrade_event)
        dispatch(*event)
      end
    end

    def dispatch(id, kind, data)
      handler, connection = @lock.synchronize { kind == :close ? @handlers.delete(id) : @handlers[id] }
      return unless handler

      callback = CALLBACKS.fetch(kind)
      return unless handler.respond_to?(callback)

      kind == :message ? handler.on_message(connection, data) : handler.public_send(callback, connection)
    rescue Exception => e # rubocop:disable Lint/RescueException
      # The handler's failure, not the server's: logged, and the
      # connection goes on (as Iodine does).
      @log_line.call("rack.upgrade handler #{handler.class} raised in #{callback}: #{e.class}: #{e.message}")
    ensure
      @native.upgrade_event_done(id)
    end
  end
end
