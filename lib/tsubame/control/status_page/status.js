// The live status page: one EventSource on the control app, the numbers
// written into the page as text (never as HTML), two small line charts
// drawn as SVG polylines. No other file is loaded.
"use strict";
(function () {
  const body = document.body;
  const history = { rps: [], p99: [] };
  const HISTORY = 60;
  const $ = (id) => document.getElementById(id);
  const text = (id, value) => { $(id).textContent = value === null || value === undefined ? "–" : String(value); };

  function chart(id, values) {
    const svg = $(id);
    const max = Math.max(1, ...values);
    const step = 300 / (HISTORY - 1);
    const offset = HISTORY - values.length;
    const points = values.map((v, i) => `${((offset + i) * step).toFixed(1)},${(58 - (v / max) * 56).toFixed(1)}`);
    let line = svg.querySelector("polyline");
    if (!line) {
      line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
      svg.appendChild(line);
    }
    line.setAttribute("points", points.join(" "));
  }

  function row(cells) {
    const tr = document.createElement("tr");
    cells.forEach((cell) => {
      const td = document.createElement("td");
      td.textContent = cell === null || cell === undefined ? "–" : String(cell);
      tr.appendChild(td);
    });
    return tr;
  }

  function list(id, items, empty) {
    const ul = $(id);
    ul.replaceChildren();
    if (items.length === 0 && empty) {
      const li = document.createElement("li");
      li.className = "muted";
      li.textContent = empty;
      ul.appendChild(li);
    }
    items.forEach((item) => {
      const li = document.createElement("li");
      li.textContent = item;
      ul.appendChild(li);
    });
  }

  function show(s) {
    text("mode", s.mode);
    text("time", new Date(s.time).toLocaleTimeString());
    text("rps", s.rps);
    text("p50", s.p50_ms);
    text("p99", s.p99_ms);
    text("window", s.window_seconds);
    text("requests-total", s.requests_total);
    text("threads-busy", s.threads_busy);
    text("threads-max", s.threads_max);
    text("queue", s.queue_depth);
    text("connections", s.connections);
    text("shed-total", s.shed_total);
    list("shed", Object.entries(s.shed).filter(([, n]) => n > 0).map(([reason, n]) => `${reason}: ${n}`));
    const workers = $("workers");
    workers.replaceChildren(...s.workers.map((w) => row([
      w.index === null ? "single" : w.index, w.pid, `${w.threads_busy} / ${w.threads_max}`,
      w.queue, w.connections, w.requests, w.rss_mb
    ])));
    list("events", s.recent_events.map((e) => `${e.time} worker ${e.worker} (pid ${e.pid}) ${e.event}${e.detail ? ": " + e.detail : ""}`), "none");
    history.rps.push(s.rps);
    history.p99.push(s.p99_ms || 0);
    Object.values(history).forEach((h) => { if (h.length > HISTORY) h.shift(); });
    chart("chart-rps", history.rps);
    chart("chart-p99", history.p99);
    // For tests and scripts reading the page: how many updates arrived,
    // and the request totals the first and the last one showed.
    const updates = Number(body.dataset.updates) + 1;
    body.dataset.updates = String(updates);
    if (updates === 1) body.dataset.firstTotal = String(s.requests_total);
    body.dataset.lastTotal = String(s.requests_total);
  }

  const events = new EventSource(body.dataset.events);
  events.onopen = () => { text("link", "live"); $("link").className = "pill live"; };
  events.onerror = () => { text("link", "reconnecting"); $("link").className = "pill"; };
  events.onmessage = (message) => show(JSON.parse(message.data));
})();
