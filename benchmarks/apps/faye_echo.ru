# frozen_string_literal: true

# faye-websocket echo over full rack.hijack, for benchmarks/websocket.rb on
# Puma (Debian's ruby-faye-websocket).
require "faye/websocket"

run lambda { |env|
  if Faye::WebSocket.websocket?(env)
    ws = Faye::WebSocket.new(env)
    ws.on(:message) { |event| ws.send(event.data) }
    ws.rack_response
  else
    [200, { "content-type" => "text/plain" }, ["hello"]]
  end
}
