# frozen_string_literal: true

# rack.upgrade echo and broadcast, for benchmarks/websocket.rb: the same
# app runs on Tsubame and on Iodine (both define rack.upgrade).
class Echo
  def on_open(conn)
    conn.subscribe("all")
  end

  def on_message(conn, data)
    conn.write(data)
  end
end

PUBLISH = if defined?(Tsubame::Upgrades)
            ->(message) { Tsubame.publish("all", message) }
          else
            ->(message) { Iodine.publish("all", message) }
          end

run lambda { |env|
  if env["PATH_INFO"] == "/publish"
    PUBLISH.call("broadcast")
    [200, { "content-type" => "text/plain" }, ["ok"]]
  elsif env["rack.upgrade?"] == :websocket
    env["rack.upgrade"] = Echo.new
    [200, {}, []]
  else
    [200, { "content-type" => "text/plain" }, ["hello"]]
  end
}
