"""Fetches PATHS as concurrent streams of one HTTP/2 connection over TLS
(Debian's python3-h2) and prints one line per stream:
`path length sha256-of-body`, then `connections 1`.

Used by http2_test.rb instead of `curl --parallel`: curl 7.88's parallel
mode now and then left one output file holding another transfer's size
(the right bytes first, then stale ones), which a test cannot tell from a
server that sent them. The windows are opened wide, as curl's are, so the
server sends without waiting for WINDOW_UPDATEs.

Usage: parallel_get.py PORT PATH..."""
import hashlib
import socket
import ssl
import sys

import h2.config
import h2.connection
import h2.events
import h2.settings

port, paths = int(sys.argv[1]), sys.argv[2:]
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.set_alpn_protocols(["h2"])
sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname="localhost")
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
conn.initiate_connection()
conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**25})
conn.increment_flow_control_window(2**30)
streams = {}
for path in paths:
    sid = conn.get_next_available_stream_id()
    headers = [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", "localhost")]
    conn.send_headers(sid, headers, end_stream=True)
    streams[sid] = [path, bytearray(), False]
sock.sendall(conn.data_to_send())
while not all(done for _, _, done in streams.values()):
    data = sock.recv(1 << 16)
    if not data:
        sys.exit("connection closed early")
    for event in conn.receive_data(data):
        if isinstance(event, h2.events.DataReceived):
            streams[event.stream_id][1] += event.data
            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            streams[event.stream_id][2] = True
        elif isinstance(event, h2.events.StreamReset):
            sys.exit(f"stream {event.stream_id} reset")
    sock.sendall(conn.data_to_send())
for path, body, _ in streams.values():
    print(path, len(body), hashlib.sha256(body).hexdigest())
print("connections 1")
