# frozen_string_literal: true

# A chat room on rack.upgrade (docs/WEBSOCKETS.md):
#   exe/tsubame examples/websocket/config.ru
# then open http://127.0.0.1:9292/ in two tabs. /events is the same room
# as Server-Sent Events (read-only).

# Every connection joins the room; a message is published to all of them.
class ChatRoom
  def on_open(conn)
    conn.subscribe("room")
    conn.write("joined (#{conn.protocol})")
  end

  def on_message(_conn, data)
    Tsubame.publish("room", data.to_s[0, 500])
  end
end

PAGE = <<~HTML
  <!doctype html>
  <meta charset="utf-8"><title>Tsubame chat</title>
  <ul id="log"></ul>
  <form id="f"><input id="m" autocomplete="off" autofocus><button>Send</button></form>
  <script>
    const ws = new WebSocket(`ws://${location.host}/chat`);
    const log = (t) => { const li = document.createElement("li"); li.textContent = t; document.getElementById("log").append(li); };
    ws.onmessage = (e) => log(e.data);
    ws.onclose = (e) => log(`closed (${e.code})`);
    document.getElementById("f").onsubmit = (e) => { e.preventDefault(); const m = document.getElementById("m"); ws.send(m.value); m.value = ""; };
  </script>
HTML

run lambda { |env|
  if env["rack.upgrade?"]
    env["rack.upgrade"] = ChatRoom.new
    [200, {}, []]
  else
    [200, { "content-type" => "text/html; charset=utf-8" }, [PAGE]]
  end
}
