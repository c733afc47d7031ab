//! The report: text for people, JSON for machines. Both come from one
//! `Summary`.

use std::fmt::Write as _;
use std::time::Duration;

use crate::args::Config;
use crate::error::Failure;
use crate::format::{fmt_bytes, fmt_duration, fmt_micros, fmt_rate};
use crate::run::Outcome;
use crate::stats::{distribution, Latency, WindowSummary};

/// Everything the report says, computed once.
#[derive(Debug, Clone)]
pub struct Summary {
    pub url: String,
    pub mode: &'static str,
    pub rate_target: Option<f64>,
    pub connections: usize,
    pub threads: usize,
    pub keepalive: bool,
    /// Connections were opened before the clock started (`--preconnect`).
    pub preconnect: bool,
    pub timeout: Duration,
    pub request_kinds: usize,
    pub duration: Duration,
    /// Requests that got a response or failed.
    pub requests: u64,
    pub responses: u64,
    pub ok: u64,
    pub unsent: u64,
    pub interrupted: bool,
    pub statuses: Vec<(u16, u64)>,
    pub errors: Vec<(&'static str, u64)>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub latency: Option<Latency>,
    pub timeline: Vec<WindowSummary>,
    pub window: Duration,
    /// (percentile, microseconds)
    pub distribution: Vec<(f64, u64)>,
}

impl Summary {
    pub fn new(config: &Config, outcome: &Outcome) -> Summary {
        let t = &outcome.totals;
        let statuses = t
            .statuses
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(code, &n)| (code as u16, n))
            .collect();
        let errors = Failure::ALL
            .iter()
            .filter(|f| t.failures[f.index()] > 0)
            .map(|f| (f.label(), t.failures[f.index()]))
            .collect();
        Summary {
            url: config.url.text.clone(),
            mode: if config.rate.is_some() { "open" } else { "closed" },
            rate_target: config.rate,
            connections: config.connections,
            threads: config.threads,
            keepalive: config.keepalive,
            preconnect: config.preconnect,
            timeout: config.timeout,
            request_kinds: config.specs.len(),
            duration: outcome.elapsed,
            requests: t.responses() + t.errors(),
            responses: t.responses(),
            ok: t.ok(),
            unsent: outcome.unsent,
            interrupted: outcome.interrupted,
            statuses,
            errors,
            bytes_read: t.bytes_read,
            bytes_written: t.bytes_written,
            latency: Latency::of(&t.latencies),
            timeline: outcome.windows.clone(),
            window: outcome.window,
            distribution: distribution(&t.latencies),
        }
    }

    fn per_second(&self, n: u64) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            n as f64 / secs
        } else {
            0.0
        }
    }

    /// Requests (answered or failed) per second.
    pub fn rate(&self) -> f64 {
        self.per_second(self.requests)
    }

    /// 2xx/3xx responses per second.
    pub fn throughput(&self) -> f64 {
        self.per_second(self.ok)
    }

    /// Share of requests answered with 2xx/3xx, 0..=1.
    pub fn success_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.ok as f64 / self.requests as f64
        }
    }
}

pub fn text(s: &Summary) -> String {
    let mut out = String::new();
    let kinds = if s.request_kinds > 1 {
        format!(" ({} kinds of request)", s.request_kinds)
    } else {
        String::new()
    };
    let _ = writeln!(out, "Target      {}{kinds}", s.url);
    let loop_kind = match s.rate_target {
        Some(r) => format!(
            "open loop at {} req/s (latency from each request's due time)",
            fmt_rate(r)
        ),
        None => "closed loop".to_string(),
    };
    let _ = writeln!(
        out,
        "Load        {loop_kind}, {} connection{} on {} thread{}, {}, timeout {}",
        s.connections,
        if s.connections == 1 { "" } else { "s" },
        s.threads,
        if s.threads == 1 { "" } else { "s" },
        connection_mode(s),
        fmt_duration(s.timeout)
    );
    let _ = writeln!(
        out,
        "Duration    {}{}",
        fmt_duration(s.duration),
        if s.interrupted { " (interrupted)" } else { "" }
    );
    let of_target = s
        .rate_target
        .map_or(String::new(), |r| format!(" of {} target", fmt_rate(r)));
    let _ = writeln!(
        out,
        "Requests    {} ({} req/s{of_target})",
        s.requests,
        fmt_rate(s.rate())
    );
    if s.unsent > 0 {
        let _ = writeln!(
            out,
            "Unsent      {} requests were due but not sent before the run ended",
            s.unsent
        );
    }
    let _ = writeln!(
        out,
        "Success     {:.2}% ({} of {} got 2xx/3xx), throughput {} req/s",
        s.success_ratio() * 100.0,
        s.ok,
        s.requests,
        fmt_rate(s.throughput())
    );
    let statuses: Vec<String> = s.statuses.iter().map(|(c, n)| format!("{c}: {n}")).collect();
    let _ = writeln!(
        out,
        "Status      {}",
        if statuses.is_empty() {
            "none".to_string()
        } else {
            statuses.join("   ")
        }
    );
    let errors: Vec<String> = s.errors.iter().map(|(l, n)| format!("{l}: {n}")).collect();
    let _ = writeln!(
        out,
        "Errors      {}",
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors.join("   ")
        }
    );
    let _ = writeln!(
        out,
        "Transfer    {} received, {} sent",
        fmt_bytes(s.bytes_read),
        fmt_bytes(s.bytes_written)
    );
    match &s.latency {
        None => {
            let _ = writeln!(out, "Latency     no responses");
        }
        Some(l) => {
            let _ = writeln!(
                out,
                "Latency     {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                "min", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"
            );
            let _ = writeln!(
                out,
                "            {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                fmt_micros(l.min),
                fmt_micros(l.mean.round() as u64),
                fmt_micros(l.p50),
                fmt_micros(l.p90),
                fmt_micros(l.p95),
                fmt_micros(l.p99),
                fmt_micros(l.p999),
                fmt_micros(l.max)
            );
        }
    }
    out
}

/// A JSON string literal. `<` is escaped too, so the text can sit inside
/// an HTML `<script>` element.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' => out.push_str("\\u003c"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_number(x: f64) -> String {
    if x.is_finite() {
        let text = format!("{x:.3}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        if text.is_empty() || text == "-" {
            "0".to_string()
        } else {
            text.to_string()
        }
    } else {
        "null".to_string()
    }
}

fn ms(us: u64) -> String {
    json_number(us as f64 / 1000.0)
}

/// The report as one JSON object. Latencies are in milliseconds.
/// How the run used connections, for the text and HTML reports.
pub fn connection_mode(s: &Summary) -> &'static str {
    match (s.keepalive, s.preconnect) {
        (true, true) => "keep-alive, opened before the clock started",
        (true, false) => "keep-alive",
        (false, _) => "a new connection per request",
    }
}

pub fn json(s: &Summary) -> String {
    let mut o = String::from("{");
    let mut field = |name: &str, value: String| {
        if o.len() > 1 {
            o.push(',');
        }
        let _ = write!(o, "{}:{value}", json_string(name));
    };
    field("url", json_string(&s.url));
    field("mode", json_string(s.mode));
    field("rate_target", s.rate_target.map_or("null".into(), json_number));
    field("connections", s.connections.to_string());
    field("threads", s.threads.to_string());
    field("keepalive", s.keepalive.to_string());
    field("preconnect", s.preconnect.to_string());
    field("timeout_s", json_number(s.timeout.as_secs_f64()));
    field("duration_s", json_number(s.duration.as_secs_f64()));
    field("requests", s.requests.to_string());
    field("responses", s.responses.to_string());
    field("success", s.ok.to_string());
    field("unsent", s.unsent.to_string());
    field("interrupted", s.interrupted.to_string());
    field("rate", json_number(s.rate()));
    field("throughput", json_number(s.throughput()));
    field(
        "success_ratio",
        format!("{:.6}", s.success_ratio())
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string(),
    );
    let statuses: Vec<String> = s.statuses.iter().map(|(c, n)| format!("\"{c}\":{n}")).collect();
    field("status_codes", format!("{{{}}}", statuses.join(",")));
    let errors: Vec<String> = s
        .errors
        .iter()
        .map(|(l, n)| format!("{}:{n}", json_string(l)))
        .collect();
    field("errors", format!("{{{}}}", errors.join(",")));
    field("bytes_read", s.bytes_read.to_string());
    field("bytes_written", s.bytes_written.to_string());
    field(
        "latency_ms",
        match &s.latency {
            None => "null".to_string(),
            Some(l) => format!(
                "{{\"min\":{},\"mean\":{},\"stdev\":{},\"p50\":{},\"p90\":{},\"p95\":{},\"p99\":{},\"p99_9\":{},\"max\":{}}}",
                ms(l.min),
                json_number(l.mean / 1000.0),
                json_number(l.stdev / 1000.0),
                ms(l.p50),
                ms(l.p90),
                ms(l.p95),
                ms(l.p99),
                ms(l.p999),
                ms(l.max)
            ),
        },
    );
    field("window_s", json_number(s.window.as_secs_f64()));
    let windows: Vec<String> = s
        .timeline
        .iter()
        .map(|w| {
            format!(
                "{{\"t\":{},\"responses\":{},\"success\":{},\"errors\":{},\"p50_ms\":{},\"p90_ms\":{},\"p99_ms\":{},\"max_ms\":{}}}",
                json_number(w.start),
                w.responses,
                w.ok,
                w.errors,
                ms(w.p50),
                ms(w.p90),
                ms(w.p99),
                ms(w.max)
            )
        })
        .collect();
    field("timeline", format!("[{}]", windows.join(",")));
    let points: Vec<String> = s
        .distribution
        .iter()
        .map(|(p, us)| format!("[{},{}]", json_number(*p), ms(*us)))
        .collect();
    field("distribution", format!("[{}]", points.join(",")));
    o.push('}');
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn sample() -> Summary {
        Summary {
            url: "http://127.0.0.1:1/<x>".into(),
            mode: "closed",
            rate_target: None,
            connections: 2,
            threads: 1,
            keepalive: true,
            preconnect: false,
            timeout: Duration::from_secs(10),
            request_kinds: 1,
            duration: Duration::from_secs(2),
            requests: 10,
            responses: 9,
            ok: 6,
            unsent: 0,
            interrupted: false,
            statuses: vec![(200, 6), (500, 3)],
            errors: vec![("timeout", 1)],
            bytes_read: 2048,
            bytes_written: 100,
            latency: Some(Latency {
                min: 500,
                mean: 1500.0,
                stdev: 10.0,
                p50: 1000,
                p90: 2000,
                p95: 2000,
                p99: 3000,
                p999: 3000,
                max: 1_500_000,
            }),
            timeline: vec![WindowSummary {
                start: 0.0,
                responses: 9,
                ok: 6,
                errors: 1,
                p50: 1000,
                p90: 2000,
                p99: 3000,
                max: 3000,
            }],
            window: Duration::from_millis(100),
            distribution: vec![(0.0, 500), (100.0, 1_500_000)],
        }
    }

    #[test]
    fn rates_and_ratio() {
        let s = sample();
        assert_eq!(s.rate(), 5.0);
        assert_eq!(s.throughput(), 3.0);
        assert_eq!(s.success_ratio(), 0.6);
        let mut empty = sample();
        empty.requests = 0;
        empty.duration = Duration::ZERO;
        assert_eq!((empty.rate(), empty.success_ratio()), (0.0, 0.0));
    }

    #[test]
    fn formats() {
        assert_eq!(json_number(1.5), "1.5");
        assert_eq!(json_number(2.0), "2");
        assert_eq!(json_number(0.0), "0");
        assert_eq!(json_number(f64::NAN), "null");
        assert_eq!(
            json_string("a\"b\\c\n</script>\u{1}"),
            "\"a\\\"b\\\\c\\n\\u003c/script>\\u0001\""
        );
    }

    #[test]
    fn text_report() {
        let t = text(&sample());
        assert!(
            t.contains("Load        closed loop, 2 connections on 1 thread, keep-alive, timeout 10.00s"),
            "{t}"
        );
        assert!(t.contains("Requests    10 (5.0 req/s)"), "{t}");
        assert!(
            t.contains("Success     60.00% (6 of 10 got 2xx/3xx), throughput 3.0 req/s"),
            "{t}"
        );
        assert!(t.contains("Status      200: 6   500: 3"), "{t}");
        assert!(t.contains("Errors      timeout: 1"), "{t}");
        assert!(t.contains("Transfer    2.0 KiB received, 100 B sent"), "{t}");
        assert!(t.contains("1.00ms"), "{t}");
        assert!(t.contains("1.500s"), "{t}");
    }

    #[test]
    fn json_report() {
        let j = json(&sample());
        assert!(
            j.starts_with("{\"url\":\"http://127.0.0.1:1/\\u003cx>\",\"mode\":\"closed\",\"rate_target\":null"),
            "{j}"
        );
        assert!(j.contains("\"status_codes\":{\"200\":6,\"500\":3}"), "{j}");
        assert!(j.contains("\"errors\":{\"timeout\":1}"), "{j}");
        assert!(j.contains("\"success_ratio\":0.6,"), "{j}");
        assert!(
            j.contains("\"latency_ms\":{\"min\":0.5,\"mean\":1.5,\"stdev\":0.01,\"p50\":1,"),
            "{j}"
        );
        assert!(j.contains("\"timeline\":[{\"t\":0,\"responses\":9,"), "{j}");
        assert!(j.contains("\"distribution\":[[0,0.5],[100,1500]]"), "{j}");
        assert!(j.ends_with('}'));
    }
}
