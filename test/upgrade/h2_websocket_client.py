#!/usr/bin/python3
"""A WebSocket-over-HTTP/2 client (RFC 8441) for the tests, driven by JSON
lines on stdin; one JSON line answers each command on stdout.

HTTP/2 is Debian's python3-h2 (framing, HPACK, flow control) and the
WebSocket layer is python3-websockets' sans-I/O connection (masking,
fragments, the close handshake, permessage-deflate), so what the server
meets is real client behaviour; `raw` sends bytes no real client would.

    h2_websocket_client.py PORT [--tls]

Commands (`stream` is the id `open` answered with):
  {"op": "settings"}                     the server's SETTINGS
  {"op": "open", "path": "/ws", "headers": [[k, v]...], "deflate": bool,
   "pseudo": {":protocol": null, ...},   override (null: omit) pseudo-headers
   "force": bool}                        send :protocol without the setting,
                                         and without header validation
  {"op": "get", "path": "/x"}            a plain request on its own stream
  {"op": "text"|"binary", "stream": n, "data": str|base64}
  {"op": "raw", "stream": n, "hex": "..."}   bytes as DATA, unframed
  {"op": "close", "stream": n, "code": 1000, "reason": ""}
  {"op": "recv", "stream": n, "timeout": s}  the next frame, end or reset
  {"op": "end"|"reset", "stream": n}         END_STREAM / RST_STREAM CANCEL
  {"op": "pause"|"resume", "stream": n}      withhold / grant flow control
  {"op": "unacked", "stream": n}             bytes received with the window
                                             not given back, all DATA bytes
                                             received, and bytes waiting for
                                             the server's window
"""

import base64
import collections
import json
import select
import socket
import ssl
import sys
import time

import h2.config
import h2.exceptions
import h2.connection
import h2.events
import h2.settings
from websockets.connection import Connection, Side, State
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.frames import Close, Opcode
from websockets.headers import build_extension, parse_extension


class H2Connection(h2.connection.H2Connection):
    """python-h2 4.1 takes any GOAWAY as the end of the connection, while
    RFC 9113 §6.8 lets the streams up to its last stream id finish: what
    the server's graceful stop does. After a GOAWAY without an error this
    keeps the connection open, so those streams can be read to their end."""

    def _receive_goaway_frame(self, frame):
        state = self.state_machine.state
        frames, events = super()._receive_goaway_frame(frame)
        if frame.error_code == 0:
            self.state_machine.state = state
        return frames, events


class Stream:
    def __init__(self):
        self.response = None
        self.reset = None
        self.ended = False
        self.body = b""
        self.wire = 0
        self.ws = None
        self.frames = collections.deque()
        self.paused = False
        self.unacked = 0
        self.outbuf = b""
        self.end_after_out = False
        self.factory = None
        self.websocket = False

    def respond(self, headers):
        """A 200 opens the WebSocket at once: its first frames may come in
        the same read as the HEADERS."""
        self.response = headers
        if not self.websocket or dict(headers)[":status"] != "200":
            return
        self.ws = Connection(Side.CLIENT, State.OPEN, max_size=None)
        accepted = [v for k, v in headers if k == "sec-websocket-extensions"]
        if accepted and self.factory:
            _, params = parse_extension(accepted[0])[0]
            self.ws.extensions = [self.factory.process_response_params(params, [])]


class Client:
    def __init__(self, port, tls):
        sock = socket.create_connection(("127.0.0.1", port))
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.scheme = "https" if tls else "http"
        self.authority = "127.0.0.1:%d" % port
        self.h2 = H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.streams = {}
        self.settings = None
        self.terminated = None
        self.flush()
        deadline = time.time() + 10
        while self.settings is None and time.time() < deadline and self.terminated is None:
            self.pump(0.2)

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self, timeout):
        """Reads what arrives within `timeout` and handles its events."""
        readable, _, _ = select.select([self.sock], [], [], timeout)
        if not readable and not (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
            return
        try:
            data = self.sock.recv(65536)
        except (ConnectionError, ssl.SSLError):
            data = b""
        if not data:
            self.terminated = self.terminated or "eof"
            return
        for event in self.h2.receive_data(data):
            self.handle(event)
        self.flush()

    def handle(self, event):
        stream = self.streams.get(getattr(event, "stream_id", None))
        if isinstance(event, h2.events.RemoteSettingsChanged):
            self.settings = {int(k): v.new_value for k, v in event.changed_settings.items()}
        elif isinstance(event, h2.events.ConnectionTerminated) and event.error_code != 0:
            self.terminated = "goaway %d" % event.error_code
        elif stream is None:
            return
        elif isinstance(event, h2.events.ResponseReceived):
            stream.respond(event.headers)
        elif isinstance(event, h2.events.DataReceived):
            if stream.paused:
                stream.unacked += event.flow_controlled_length
            else:
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            stream.wire += len(event.data)
            if stream.ws is not None:
                stream.ws.receive_data(event.data)
                self.after_ws(event.stream_id, stream)
            else:
                stream.body += event.data
        elif isinstance(event, h2.events.StreamEnded):
            stream.ended = True
            if stream.ws is not None and stream.ws.state is not State.CLOSED:
                stream.ws.receive_eof()
                self.after_ws(event.stream_id, stream)
        elif isinstance(event, h2.events.StreamReset):
            stream.reset = int(event.error_code)
        elif isinstance(event, h2.events.WindowUpdated):
            for sid, s in self.streams.items():
                self.send_out(sid, s)

    def after_ws(self, sid, stream):
        for frame in stream.ws.events_received():
            stream.frames.append(frame)
        for data in stream.ws.data_to_send():
            if data:
                stream.outbuf += data
            else:
                # The websockets layer's EOF: our side of the stream ends.
                stream.end_after_out = True
        self.send_out(sid, stream)

    def send_out(self, sid, stream):
        """Sends what the window allows; the rest waits for WINDOW_UPDATE."""
        if stream.reset is not None:
            return
        while stream.outbuf:
            room = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if room <= 0:
                break
            chunk, stream.outbuf = stream.outbuf[:room], stream.outbuf[room:]
            self.h2.send_data(sid, chunk)
        if not stream.outbuf and stream.end_after_out:
            stream.end_after_out = False
            try:
                self.h2.end_stream(sid)
            except h2.exceptions.StreamClosedError:
                pass
        self.flush()

    def wait(self, done, timeout):
        deadline = time.time() + timeout
        while not done() and time.time() < deadline and self.terminated is None:
            self.pump(min(0.1, max(0, deadline - time.time())))
        return done()

    # Commands.

    def cmd_settings(self, _):
        s = self.settings or {}
        return {"enable_connect_protocol": s.get(int(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL))}

    def cmd_open(self, c):
        enabled = (self.settings or {}).get(int(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL))
        if enabled != 1 and not c.get("force"):
            return {"error": "the server did not send SETTINGS_ENABLE_CONNECT_PROTOCOL=1"}
        pseudo = {":method": "CONNECT", ":protocol": "websocket", ":scheme": self.scheme,
                  ":path": c.get("path", "/ws"), ":authority": self.authority}
        pseudo.update(c.get("pseudo", {}))
        headers = [(k, v) for k, v in pseudo.items() if v is not None]
        headers += [(k, v) for k, v in c.get("headers", [["sec-websocket-version", "13"]])]
        sid = self.h2.get_next_available_stream_id()
        stream = self.streams[sid] = Stream()
        stream.websocket = True
        if c.get("deflate"):
            factory = stream.factory = ClientPerMessageDeflateFactory(client_max_window_bits=True)
            headers.append(("sec-websocket-extensions",
                            build_extension([(factory.name, factory.get_request_params())])))
        force = bool(c.get("force"))
        self.h2.config.validate_outbound_headers = not force
        self.h2.config.normalize_outbound_headers = not force
        try:
            self.h2.send_headers(sid, headers)
        finally:
            self.h2.config.validate_outbound_headers = True
            self.h2.config.normalize_outbound_headers = True
        self.flush()
        self.wait(lambda: stream.response is not None or stream.reset is not None, c.get("timeout", 10))
        if stream.response is None and stream.reset is not None:
            return {"stream": sid, "reset": stream.reset}
        if stream.response is None:
            return {"stream": sid, "error": "no response", "terminated": self.terminated}
        answer = {"stream": sid, "status": int(dict(stream.response)[":status"]),
                  "headers": [[k, v] for k, v in stream.response if not k.startswith(":")]}
        if answer["status"] != 200:
            self.wait(lambda: stream.ended or stream.reset is not None, 5)
            answer["body"] = stream.body.decode("utf-8", "replace")
            answer["ended"] = stream.ended
        return answer

    def cmd_get(self, c):
        sid = self.h2.get_next_available_stream_id()
        stream = self.streams[sid] = Stream()
        self.h2.send_headers(sid, [(":method", "GET"), (":scheme", self.scheme), (":path", c["path"]),
                                   (":authority", self.authority)], end_stream=True)
        self.flush()
        self.wait(lambda: stream.ended or stream.reset is not None, c.get("timeout", 10))
        return {"stream": sid, "status": int(dict(stream.response or {}).get(":status", 0)),
                "body": stream.body.decode("utf-8", "replace"), "reset": stream.reset}

    def ws_send(self, c, send):
        sid = c["stream"]
        stream = self.streams[sid]
        send(stream.ws)
        self.after_ws(sid, stream)
        return {"ok": True}

    def cmd_text(self, c):
        return self.ws_send(c, lambda ws: ws.send_text(c["data"].encode("utf-8")))

    def cmd_binary(self, c):
        return self.ws_send(c, lambda ws: ws.send_binary(base64.b64decode(c["data"])))

    def cmd_close(self, c):
        return self.ws_send(c, lambda ws: ws.send_close(c.get("code", 1000), c.get("reason", "")))

    def cmd_raw(self, c):
        sid = c["stream"]
        stream = self.streams[sid]
        stream.outbuf += bytes.fromhex(c["hex"])
        self.send_out(sid, stream)
        return {"ok": True}

    def cmd_recv(self, c):
        stream = self.streams[c["stream"]]
        self.wait(lambda: stream.frames or stream.reset is not None or stream.ended, c.get("timeout", 10))
        while stream.frames:
            frame = stream.frames.popleft()
            if frame.opcode is Opcode.TEXT:
                return {"type": "text", "data": frame.data.decode("utf-8"), "fin": frame.fin}
            if frame.opcode is Opcode.BINARY:
                return {"type": "binary", "data": base64.b64encode(frame.data).decode(), "fin": frame.fin}
            if frame.opcode is Opcode.CLOSE:
                close = Close.parse(frame.data)
                return {"type": "close", "code": close.code, "reason": close.reason}
            if frame.opcode is Opcode.PING:
                return {"type": "ping"}
            # Pongs and continuations are not asked for by the tests.
        if stream.reset is not None:
            return {"type": "reset", "code": stream.reset}
        if stream.ended:
            return {"type": "end"}
        return {"type": "timeout", "terminated": self.terminated}

    def cmd_end(self, c):
        self.h2.end_stream(c["stream"])
        self.flush()
        return {"ok": True}

    def cmd_reset(self, c):
        self.h2.reset_stream(c["stream"], error_code=8)  # CANCEL
        self.flush()
        return {"ok": True}

    def cmd_pause(self, c):
        self.streams[c["stream"]].paused = True
        return {"ok": True}

    def cmd_resume(self, c):
        sid = c["stream"]
        stream = self.streams[sid]
        stream.paused = False
        if stream.unacked:
            self.h2.acknowledge_received_data(stream.unacked, sid)
            stream.unacked = 0
        self.flush()
        return {"ok": True}

    def cmd_unacked(self, c):
        self.pump(0.2)
        stream = self.streams[c["stream"]]
        return {"unacked": stream.unacked, "wire": stream.wire, "unsent": len(stream.outbuf)}


def main():
    client = Client(int(sys.argv[1]), "--tls" in sys.argv[2:])
    for line in sys.stdin:
        command = json.loads(line)
        try:
            answer = getattr(client, "cmd_" + command["op"])(command)
        except Exception as e:  # the test shows what went wrong
            answer = {"error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
