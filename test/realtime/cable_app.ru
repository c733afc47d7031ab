# frozen_string_literal: true

# A single-file Rails 6.1 app with ActionCable (Debian's ruby-actioncable)
# for the real-time tests and docs/REALTIME.md:
#
#   exe/tsubame -b tcp://127.0.0.1:9292 test/realtime/cable_app.ru
#
# - /cable      ActionCable (set here: no config/cable.yml; the async
#               adapter, or CABLE_ADAPTER=tsubame, or CABLE_ADAPTER=redis
#               with CABLE_REDIS_URL; CABLE_PREFIX sets channel_prefix),
#               any origin; one channel,
#               ChatChannel, streaming from "chat" (on subscribing it
#               first transmits {"pid": <worker pid>})
# - /ping       plain HTTP: "pong <pid>"
# - /broadcast  ActionCable.server.broadcast("chat", ...) with ?text= and
#               ?id=; answers "<pid> <subscribers of this process>"
# - /series     ?prefix=P&count=N&interval=S&pad=B: a thread of this
#               process broadcasts ids P-1..P-N to "chat", S seconds apart,
#               with B bytes of text each; answers the pid at once
# - /heard      ?prefix=P: "<pid> <ids>": the ids starting with P that this
#               process's subscription adapter handed to "chat"'s
#               subscribers, in that order (a subscriber of its own, on
#               ActionCable's event loop: what the adapter did, before
#               ActionCable's worker pool and sockets)
# - /tsubame_publish
#               ?channel=C&id=I: Tsubame.publish(C, {"id": I} as JSON)
#               (what an ActionCable broadcast on C carries)
# - /pid        the pid
#
# No database, no ActiveRecord, nothing eager-loaded.

require "rails"
require "action_controller/railtie"
require "action_cable/engine"
require "logger"

class CableApp < Rails::Application
  config.root = __dir__
  config.eager_load = false
  config.consider_all_requests_local = false
  config.secret_key_base = "tsubame-realtime-test-#{'0' * 48}"
  config.logger = Logger.new(ENV["CABLE_LOG"] ? $stderr : nil)
  config.log_level = :warn
  config.hosts.clear if config.respond_to?(:hosts)
  config.action_cable.mount_path = "/cable"
  # Symbol keys, as Rails makes of config/cable.yml (ActionCable reads
  # cable[:channel_prefix]).
  config.action_cable.cable = { adapter: ENV.fetch("CABLE_ADAPTER", "async"), url: ENV["CABLE_REDIS_URL"],
                                channel_prefix: ENV["CABLE_PREFIX"] }.compact.with_indifferent_access
  config.action_cable.disable_request_forgery_protection = true
  config.action_cable.logger = config.logger
  # One thread per subscriber callback batch is plenty for the tests.
  config.action_cable.worker_pool_size = Integer(ENV.fetch("CABLE_POOL", "4"))
end

class ChatChannel < ActionCable::Channel::Base
  def subscribed
    transmit({ "pid" => Process.pid })
    stream_from "chat"
  end
end

module ChatStats
  # How many subscriptions this process's connections hold.
  def self.subscribers
    ActionCable.server.connections.sum { |connection| connection.subscriptions.identifiers.size }
  end
end

CableApp.initialize!

module Heard
  @ids = []
  @lock = Mutex.new
  ActionCable.server.pubsub.subscribe("chat", lambda { |payload|
    id = JSON.parse(payload)["id"]
    @lock.synchronize { @ids << id }
  })

  def self.starting_with(prefix)
    @lock.synchronize { @ids.select { |id| id.start_with?(prefix) } }
  end
end

# With its length: the Python clients read plain, unchunked bodies, and
# Rack::Lint (around every test app) hides an Array body's length on Rack 2.
TEXT_RESPONSE = ->(text) { [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]] }

CableApp.routes.draw do
  get "/ping", to: ->(_env) { TEXT_RESPONSE.call("pong #{Process.pid}") }
  get "/heard", to: lambda { |env|
    prefix = Rack::Utils.parse_query(env["QUERY_STRING"])["prefix"].to_s
    TEXT_RESPONSE.call([Process.pid, *Heard.starting_with(prefix)].join(" "))
  }
  get "/tsubame_publish", to: lambda { |env|
    params = Rack::Utils.parse_query(env["QUERY_STRING"])
    count = Tsubame.publish(params["channel"], JSON.generate("id" => params["id"], "text" => "t"))
    TEXT_RESPONSE.call(count.to_s)
  }
  get "/pid", to: ->(_env) { TEXT_RESPONSE.call(Process.pid.to_s) }
  get "/broadcast", to: lambda { |env|
    params = Rack::Utils.parse_query(env["QUERY_STRING"])
    ActionCable.server.broadcast("chat", { "text" => params["text"].to_s, "id" => params["id"].to_s,
                                           "pid" => Process.pid })
    TEXT_RESPONSE.call("#{Process.pid} #{ChatStats.subscribers}")
  }
  get "/series", to: lambda { |env|
    params = Rack::Utils.parse_query(env["QUERY_STRING"])
    prefix = params.fetch("prefix", "s")
    interval = params["interval"].to_f
    text = "x" * params["pad"].to_i
    Thread.new do
      (1..params["count"].to_i).each do |i|
        ActionCable.server.broadcast("chat", { "text" => text, "id" => "#{prefix}-#{i}", "pid" => Process.pid })
        sleep interval if interval.positive?
      end
    end
    TEXT_RESPONSE.call(Process.pid.to_s)
  }
end

run CableApp
