# frozen_string_literal: true

# ActionCable's `tsubame` subscription adapter (docs/REALTIME.md):
#
#   # config/cable.yml
#   production:
#     adapter: tsubame
#
# ActionCable requires "action_cable/subscription_adapter/<adapter>" and
# takes the class of that name; this file is that path in the gem's lib/,
# so it is loaded only by ActionCable, only when cable.yml names it.
require "action_cable/subscription_adapter/inline"
require "action_cable/subscription_adapter/channel_prefix"
require "tsubame/serve/upgrades"

module ActionCable
  module SubscriptionAdapter
    # A broadcast in any worker of a Tsubame cluster reaches the
    # subscribers of every worker: it is a `Tsubame.publish` on the
    # broadcasting's name, which the master relays to every worker, and
    # each worker's subscriber map listens to the names its connections
    # stream from (`Tsubame.subscribe`). In single mode it stays in the
    # process, as with the async adapter.
    #
    # The stream callbacks are called from Tsubame's one listener thread,
    # in the order the master relayed the messages (the async and redis
    # adapters post each call to ActionCable's event-loop pool of up to 10
    # threads, which may swap two of them).
    #
    # In a process Tsubame does not serve (a console, a runner) a
    # broadcast reaches only that process's subscribers, as with async.
    class Tsubame < Inline
      prepend ChannelPrefix

      def broadcast(channel, payload)
        return super unless ::Tsubame::Upgrades.current

        ::Tsubame.publish(channel, payload)
      end

      private

      def new_subscriber_map
        PublishedSubscriberMap.new
      end

      # Listens to Tsubame.publish for each channel it holds.
      class PublishedSubscriberMap < SubscriberMap
        def initialize
          super
          @listeners = {}
        end

        # Called under the map's lock when a channel gets its first
        # subscriber; the listener is in place before the subscription is
        # confirmed, so the client hears every broadcast made after that.
        def add_channel(channel, on_success)
          @listeners[channel] = ::Tsubame.subscribe(channel) { |message| broadcast(channel, message) }
          super
        end

        def remove_channel(channel)
          listener = @listeners.delete(channel)
          ::Tsubame.unsubscribe(channel, listener) if listener
          super
        end
      end
    end
  end
end
