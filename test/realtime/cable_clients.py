#!/usr/bin/python3
"""ActionCable clients for test/realtime: N WebSocket connections in one
asyncio process, with Debian's python3-websockets (run it with
/usr/bin/python3; a python3 earlier on PATH may not have the module).

    /usr/bin/python3 test/realtime/cable_clients.py --url ws://127.0.0.1:9292/cable \
        --http http://127.0.0.1:9292 --clients 1000 [--ca ca.pem]

Each client connects, waits for ActionCable's welcome, subscribes to
ChatChannel and waits for confirm_subscription (the channel first transmits
{"pid": ...}, the pid of the process serving the connection). Once all are
subscribed (or --timeout passed) one JSON line is printed:

    {"event": "subscribed", "subscribed": 1000, "clients": 1000,
     "seconds": 3.2, "pids": {"1234": 1000}, "failed": []}

Then commands are read from stdin, one a line, each answered with one JSON
line on stdout:

    broadcast [TIMEOUT]  GET /broadcast?id=K on --http, again (new id, new
                         connection: in cluster mode it may reach another
                         worker, and the async adapter is per process) until
                         every subscribed client got one of them; reports
                         how many received one, the time from the first GET
                         to the last delivery, the GETs made, and
                         wrong_process: deliveries to a client of another
                         process than the one that answered the GET (0).
    burst N [TIMEOUT]    GET /broadcast N times, one after the other (each on a
                         new connection), then waits until every subscribed
                         client got all N; reports deliveries (of clients x
                         N), the time from the first GET to the last
                         delivery, and whether every client got them in
                         one same order (and in the order of the GETs).
    series PREFIX COUNT TIMEOUT [PID]
                         waits until every subscribed client (of PID only,
                         when given) got message PREFIX-COUNT (ids
                         PREFIX-1.. sent by the app's /series), and up
                         to 2 s more until each got all of them (an
                         earlier one may come after the last), then
                         reports per client: the pids it
                         was served by, its closes, how many of the
                         series it got, whether in order and without a
                         gap after the first.
    pace RATE SECONDS    GET /broadcast RATE times a second for SECONDS (one
                         client talking while something else is measured),
                         then waits up to 5 s for the deliveries; reports
                         the broadcasts made and the deliveries.
    status               subscribed clients, closes seen, pids.
    reconnected OLD_PIDS TIMEOUT
                         waits until every client is subscribed again on a
                         pid not in OLD_PIDS (comma separated).
    quit                 closes every connection (code 1000) and exits.

A connection the server closes is recorded by how it ended: "frame:CODE"
when a close frame came, "tcp" when the TCP connection closed without one;
the client then reconnects and subscribes again (after 50-250 ms, spread so
a thousand do not come back at once).
"""

import argparse
import asyncio
import json
import random
import ssl
import sys
import time
import urllib.parse

import websockets
from websockets.exceptions import ConnectionClosed

IDENTIFIER = json.dumps({"channel": "ChatChannel"})


def now():
    return time.monotonic()


class Client:
    def __init__(self, index, pool):
        self.index = index
        self.pool = pool
        self.pid = None          # pid serving the current subscription
        self.subscribed = False
        self.pids = []           # every pid it subscribed on, in order
        self.closes = []         # "frame:1001", "tcp", ...
        self.received = {}       # broadcast id -> monotonic time
        self.arrivals = []       # broadcast ids in the order they came
        self.ws = None
        self.error = None
        self.stage = "new"

    async def run(self):
        while not self.pool.quitting:
            try:
                await self.session()
            except ConnectionClosed as e:
                self.subscribed = False
                if self.pool.quitting:
                    return
                self.closes.append(f"frame:{e.rcvd.code}" if e.rcvd is not None else "tcp")
            except (OSError, asyncio.TimeoutError, websockets.InvalidHandshake) as e:
                self.subscribed = False
                if self.pool.quitting:
                    return
                self.error = f"{type(e).__name__}: {e}"
                self.closes.append("connect-failed")
            await asyncio.sleep(0.05 + random.random() * 0.2)

    async def session(self):
        self.stage = "connecting"
        async with self.pool.connect_slots:
            ws = await asyncio.wait_for(
                websockets.connect(self.pool.url, ssl=self.pool.ssl, ping_interval=None,
                                   close_timeout=2, max_queue=None, open_timeout=20),
                timeout=30)
        self.ws = ws
        self.stage = "connected"
        try:
            async for raw in ws:
                message = json.loads(raw)
                kind = message.get("type")
                if kind == "welcome":
                    # As ActionCable's JavaScript consumer does: subscribe
                    # once the connection is welcomed.
                    self.stage = "welcomed"
                    await ws.send(json.dumps({"command": "subscribe", "identifier": IDENTIFIER}))
                elif kind == "confirm_subscription":
                    self.stage = "subscribed"
                    self.subscribed = True
                    self.pids.append(self.pid)
                    self.pool.changed()
                elif kind is None and message.get("identifier") == IDENTIFIER:
                    body = message.get("message", {})
                    if "pid" in body and "text" not in body:
                        self.pid = body["pid"]
                    elif "id" in body:
                        self.received.setdefault(body["id"], now())
                        self.arrivals.append(body["id"])
                        self.pool.changed()
                elif kind == "disconnect":
                    # ActionCable's own goodbye before it closes (a restart
                    # inside the app); the close frame follows.
                    pass
            # The iterator ends on a normal close (1000/1001): same record.
            raise ConnectionClosed(ws.close_rcvd, ws.close_sent)
        finally:
            self.ws = None


class Pool:
    def __init__(self, args):
        self.url = args.url
        self.http = urllib.parse.urlsplit(args.http)
        self.ssl = None
        if args.url.startswith("wss://"):
            self.ssl = ssl.create_default_context(cafile=args.ca)
        self.quitting = False
        self.connect_slots = asyncio.Semaphore(args.connect_concurrency)
        self.event = asyncio.Event()
        self.clients = [Client(i, self) for i in range(args.clients)]
        self.broadcast_id = 0

    def changed(self):
        self.event.set()

    async def until(self, predicate, timeout):
        deadline = now() + timeout
        while not predicate():
            left = deadline - now()
            if left <= 0:
                return False
            self.event.clear()
            try:
                await asyncio.wait_for(self.event.wait(), min(left, 0.2))
            except asyncio.TimeoutError:
                pass
        return True

    def subscribed(self):
        return [c for c in self.clients if c.subscribed]

    def stages(self):
        counts = {}
        for c in self.clients:
            counts[c.stage] = counts.get(c.stage, 0) + 1
        return counts

    def pid_counts(self):
        counts = {}
        for c in self.subscribed():
            counts[str(c.pid)] = counts.get(str(c.pid), 0) + 1
        return counts

    async def get(self, path):
        reader, writer = await asyncio.open_connection(self.http.hostname, self.http.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.http.netloc}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await reader.read()
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return head.split(b" ", 2)[1].decode(), body.decode()

    async def broadcast(self, timeout):
        targets = self.subscribed()
        ids = []
        answers = []
        wrong_process = 0
        started = now()
        deadline = started + timeout

        def got_one(c):
            return any(i in c.received for i in ids)

        while not ids or not all(got_one(c) for c in targets):
            if now() > deadline:
                break
            self.broadcast_id += 1
            bid = str(self.broadcast_id)
            ids.append(bid)
            status, body = await self.get(f"/broadcast?id={bid}&text=hello")
            answers.append((status, body))
            # "<pid> <subscriptions in that process>": the async adapter
            # delivers to that process's subscribers only, so wait for
            # exactly that many before trying again (a new connection,
            # maybe another worker).
            try:
                pid, expected = (int(x) for x in body.split())
            except ValueError:
                continue
            await self.until(lambda: sum(1 for c in targets if bid in c.received) >= expected,
                             min(5.0, max(0.0, deadline - now())))
            wrong_process += sum(1 for c in targets if bid in c.received and c.pid != pid)
        got = [min(c.received[i] for i in ids if i in c.received) for c in targets if got_one(c)]
        return {"event": "broadcast", "clients": len(targets), "received": len(got),
                "seconds": round(max(got) - started, 4) if got else None,
                "first_seconds": round(min(got) - started, 4) if got else None,
                "gets": len(ids), "answers": [body for _, body in answers],
                "statuses": [status for status, _ in answers], "wrong_process": wrong_process}

    async def burst(self, count, timeout):
        targets = self.subscribed()
        ids = []
        answered = set()
        started = now()
        for _ in range(count):
            self.broadcast_id += 1
            bid = str(self.broadcast_id)
            ids.append(bid)
            _, body = await self.get(f"/broadcast?id={bid}&text=hello")
            answered.add(body.split()[0] if body else "")
        wanted = set(ids)
        await self.until(lambda: all(wanted <= c.received.keys() for c in targets),
                         max(0.0, started + timeout - now()))
        times = [c.received[i] for c in targets for i in ids if i in c.received]
        orders = {tuple(i for i in c.arrivals if i in wanted) for c in targets}
        return {"event": "burst", "clients": len(targets), "broadcasts": count, "answered_pids": sorted(answered),
                "delivered": len(times), "expected": len(targets) * count,
                "seconds": round(max(times) - started, 4) if times else None,
                "same_order": len(orders) == 1, "orders": [list(o) for o in list(orders)[:3]] if len(orders) > 1 else [],
                "in_get_order": sum(1 for c in targets if [i for i in c.arrivals if i in wanted] == ids)}

    async def series(self, prefix, count, timeout, pid=None):
        last = f"{prefix}-{count}"
        ids = [f"{prefix}-{i}" for i in range(1, count + 1)]
        deadline = now() + timeout

        def targets():
            return [c for c in self.subscribed() if pid in (None, c.pid)]

        await self.until(lambda: all(last in c.received for c in targets()), timeout)
        # With ActionCable's worker pool of several threads, a client may get
        # an earlier message just after the last one: wait a moment more
        # for those (a client that reconnected mid-series never completes,
        # hence the bound).
        await self.until(lambda: all(all(i in c.received for i in ids) for c in targets()),
                         min(2.0, max(0.0, deadline - now())))
        clients = []
        for c in self.clients:
            seq = [int(i.split("-")[-1]) for i in c.arrivals if i.startswith(prefix + "-")]
            clients.append({"pids": c.pids, "pid": c.pid, "subscribed": c.subscribed, "closes": len(c.closes),
                            "got": len(seq), "in_order": seq == sorted(set(seq)),
                            "gapless": bool(seq) and len(seq) == seq[-1] - seq[0] + 1,
                            "first": seq[0] if seq else None, "last": seq[-1] if seq else None})
        return {"event": "series", "clients": clients}

    async def pace(self, rate, seconds):
        targets = self.subscribed()
        ids = []
        started = now()
        while now() - started < seconds:
            self.broadcast_id += 1
            bid = str(self.broadcast_id)
            ids.append(bid)
            await self.get(f"/broadcast?id={bid}&text=hello")
            await asyncio.sleep(max(0.0, started + len(ids) / rate - now()))
        wanted = set(ids)
        await self.until(lambda: all(wanted <= c.received.keys() for c in targets), 5)
        return {"event": "pace", "clients": len(targets), "broadcasts": len(ids),
                "delivered": sum(len(wanted & c.received.keys()) for c in targets),
                "expected": len(targets) * len(ids)}

    def status(self):
        closes = {}
        for c in self.clients:
            for kind in c.closes:
                closes[kind] = closes.get(kind, 0) + 1
        return {"event": "status", "clients": len(self.clients), "subscribed": len(self.subscribed()),
                "pids": self.pid_counts(), "closes": closes,
                "closed_clients": sum(1 for c in self.clients if c.closes),
                "errors": sorted({c.error for c in self.clients if c.error})[:5]}

    async def reconnected(self, old_pids, timeout):
        started = now()

        def done():
            return all(c.subscribed and c.pid not in old_pids for c in self.clients)

        ok = await self.until(done, timeout)
        result = self.status()
        result.update({"event": "reconnected", "ok": ok, "seconds": round(now() - started, 3),
                       "on_new_pids": sum(1 for c in self.clients if c.subscribed and c.pid not in old_pids),
                       "every_client_closed": all(c.closes for c in self.clients)})
        return result


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def read_commands():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            return
        yield line.decode().split()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--http", required=True, help="http://host:port for /broadcast")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--ca", help="CA file to trust for wss://")
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--connect-concurrency", type=int, default=50)
    args = parser.parse_args()

    pool = Pool(args)
    started = now()
    tasks = [asyncio.create_task(c.run()) for c in pool.clients]
    await pool.until(lambda: len(pool.subscribed()) == len(pool.clients), args.timeout)
    emit({"event": "subscribed", "subscribed": len(pool.subscribed()), "clients": len(pool.clients),
          "seconds": round(now() - started, 3), "pids": pool.pid_counts(), "stages": pool.stages(),
          "failed": sorted({c.error for c in pool.clients if c.error})[:5]})

    async for words in read_commands():
        if not words:
            continue
        if words[0] == "broadcast":
            emit(await pool.broadcast(float(words[1]) if len(words) > 1 else 10))
        elif words[0] == "burst":
            emit(await pool.burst(int(words[1]), float(words[2]) if len(words) > 2 else 30))
        elif words[0] == "series":
            emit(await pool.series(words[1], int(words[2]), float(words[3]),
                                   int(words[4]) if len(words) > 4 else None))
        elif words[0] == "pace":
            emit(await pool.pace(float(words[1]), float(words[2])))
        elif words[0] == "status":
            emit(pool.status())
        elif words[0] == "reconnected":
            old = {int(p) for p in words[1].split(",") if p}
            emit(await pool.reconnected(old, float(words[2])))
        elif words[0] == "quit":
            break
        else:
            emit({"event": "error", "message": f"unknown command {words[0]}"})

    pool.quitting = True
    closing = [c.ws.close() for c in pool.clients if c.ws is not None]
    await asyncio.gather(*closing, return_exceptions=True)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    emit({"event": "bye"})


if __name__ == "__main__":
    asyncio.run(main())
