//! `--html FILE`: one self-contained page (inline SVG, no scripts, nothing
//! fetched) with the summary, latency over time, requests per second over
//! time, and the latency distribution by percentile. The JSON report is
//! embedded too, in `<script type="application/json" id="bench-data">`.

use std::fmt::Write as _;

use crate::format::{fmt_bytes, fmt_micros};
use crate::report::{json, Summary};

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 320.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Most points drawn per series; longer series are merged (max per group).
const MAX_POINTS: usize = 1500;

/// Escapes text for HTML content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A step of 1, 2 or 5 times a power of ten giving about `ticks` ticks up to `max`.
pub fn nice_step(max: f64, ticks: usize) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / ticks.max(1) as f64;
    let power = 10f64.powf(raw.log10().floor());
    let unit = raw / power;
    let nice = if unit <= 1.0 {
        1.0
    } else if unit <= 2.0 {
        2.0
    } else if unit <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

fn fmt_tick(v: f64) -> String {
    if v == v.trunc() {
        format!("{v:.0}")
    } else if (v * 10.0) == (v * 10.0).trunc() {
        format!("{v:.1}")
    } else {
        format!("{v:.3}").trim_end_matches('0').to_string()
    }
}

struct Series<'a> {
    name: &'a str,
    color: &'a str,
    /// `None` breaks the line (a window with no responses).
    points: Vec<Option<(f64, f64)>>,
}

enum XAxis {
    /// Plain numbers with this unit label.
    Linear(&'static str),
    /// x = number of nines (-log10(1 - p)); ticks read 0%, 90%, 99%, ...
    Nines,
}

fn chart(title: &str, y_label: &str, x_axis: XAxis, series: &[Series]) -> String {
    let all = series.iter().flat_map(|s| s.points.iter().flatten());
    let (mut x_max, mut y_max) = (0f64, 0f64);
    for &(x, y) in all {
        x_max = x_max.max(x);
        y_max = y_max.max(y);
    }
    if x_max <= 0.0 {
        x_max = 1.0;
    }
    let y_step = nice_step(y_max * 1.05, 5);
    let y_top = (y_max * 1.05 / y_step).ceil().max(1.0) * y_step;
    let x_step = match x_axis {
        XAxis::Linear(_) => nice_step(x_max, 10),
        XAxis::Nines => 1.0,
    };
    let x_right = match x_axis {
        XAxis::Linear(_) => x_max,
        XAxis::Nines => x_max.ceil().max(1.0),
    };
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |x: f64| LEFT + x / x_right * plot_w;
    let sy = |y: f64| TOP + plot_h - y / y_top * plot_h;

    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{t}\">\
         <rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\
         <text x=\"{LEFT}\" y=\"22\" class=\"title\">{t}</text>",
        t = escape(title)
    );
    // Horizontal grid and y labels.
    let mut y = 0.0;
    while y <= y_top + y_step / 2.0 {
        let py = sy(y);
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{py:.1}\" y2=\"{py:.1}\" class=\"grid\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" class=\"ylab\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            fmt_tick(y)
        );
        y += y_step;
    }
    // Vertical grid and x labels.
    let mut x = 0.0;
    while x <= x_right + x_step / 1000.0 {
        let px = sx(x);
        let label = match x_axis {
            XAxis::Linear(_) => fmt_tick(x),
            XAxis::Nines => {
                let nines = x.round() as i32;
                if nines == 0 {
                    "0%".to_string()
                } else {
                    format!("{}%", fmt_tick(100.0 - 100.0 * 10f64.powi(-nines)))
                }
            }
        };
        let _ = write!(
            svg,
            "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{TOP}\" y2=\"{:.1}\" class=\"grid\"/>\
             <text x=\"{px:.1}\" y=\"{:.1}\" class=\"xlab\">{label}</text>",
            TOP + plot_h,
            TOP + plot_h + 16.0
        );
        x += x_step;
    }
    let x_label = match x_axis {
        XAxis::Linear(unit) => unit,
        XAxis::Nines => "percentile",
    };
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" class=\"xlab\">{}</text>\
         <text x=\"14\" y=\"{:.1}\" class=\"axis\" transform=\"rotate(-90 14 {:.1})\">{}</text>",
        LEFT + plot_w / 2.0,
        HEIGHT - 10.0,
        escape(x_label),
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    // Lines and legend.
    let mut legend_x = WIDTH - RIGHT;
    for s in series.iter().rev() {
        let mut d = String::new();
        let mut pen_down = false;
        for point in &s.points {
            match point {
                Some((x, y)) => {
                    let _ = write!(d, "{}{:.1},{:.1} ", if pen_down { 'L' } else { 'M' }, sx(*x), sy(*y));
                    pen_down = true;
                }
                None => pen_down = false,
            }
        }
        let _ = write!(
            svg,
            "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"><title>{}</title></path>",
            d.trim_end(),
            s.color,
            escape(s.name)
        );
        legend_x -= 12.0 + 7.0 * s.name.len() as f64 + 18.0;
        let _ = write!(
            svg,
            "<rect x=\"{legend_x:.1}\" y=\"13\" width=\"12\" height=\"4\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"19\" class=\"legend\">{}</text>",
            s.color,
            legend_x + 16.0,
            escape(s.name)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Groups consecutive windows so at most MAX_POINTS remain, keeping the
/// worst latency and the total count of each group.
fn grouped(s: &Summary) -> Vec<(f64, u64, u64, [u64; 4])> {
    let per = s.timeline.len().div_ceil(MAX_POINTS).max(1);
    s.timeline
        .chunks(per)
        .map(|group| {
            let start = group[0].start;
            let count: u64 = group.iter().map(|w| w.responses).sum();
            let errors: u64 = group.iter().map(|w| w.errors).sum();
            let worst = |f: fn(&crate::stats::WindowSummary) -> u64| group.iter().map(f).max().unwrap_or(0);
            (
                start,
                count,
                errors,
                [worst(|w| w.p50), worst(|w| w.p90), worst(|w| w.p99), worst(|w| w.max)],
            )
        })
        .collect()
}

fn latency_over_time(s: &Summary) -> String {
    let groups = grouped(s);
    let names = ["p50", "p90", "p99", "max"];
    let colors = ["#2b7bb9", "#3aa35b", "#e08a1e", "#c0392b"];
    let series: Vec<Series> = (0..4)
        .map(|i| Series {
            name: names[i],
            color: colors[i],
            points: groups
                .iter()
                .map(|(t, count, _, l)| (*count > 0).then(|| (*t, l[i] as f64 / 1000.0)))
                .collect(),
        })
        .collect();
    chart(
        "Latency over time",
        "latency (ms)",
        XAxis::Linear("seconds since start"),
        &series,
    )
}

fn rate_over_time(s: &Summary) -> String {
    let groups = grouped(s);
    let span = s.window.as_secs_f64() * s.timeline.len().div_ceil(MAX_POINTS).max(1) as f64;
    let series = [
        Series {
            name: "responses/s",
            color: "#2b7bb9",
            points: groups
                .iter()
                .map(|(t, count, _, _)| Some((*t, *count as f64 / span)))
                .collect(),
        },
        Series {
            name: "errors/s",
            color: "#c0392b",
            points: groups
                .iter()
                .map(|(t, _, errors, _)| Some((*t, *errors as f64 / span)))
                .collect(),
        },
    ];
    chart(
        "Requests per second over time",
        "per second",
        XAxis::Linear("seconds since start"),
        &series,
    )
}

fn distribution(s: &Summary) -> String {
    let finite: Vec<(f64, f64)> = s
        .distribution
        .iter()
        .filter(|(p, _)| *p < 100.0)
        .map(|(p, us)| (-(1.0 - p / 100.0).log10(), *us as f64 / 1000.0))
        .collect();
    let mut points: Vec<Option<(f64, f64)>> = finite.iter().copied().map(Some).collect();
    if let (Some(&(_, max)), Some(&(x, _))) = (s.distribution.last(), finite.last()) {
        // The maximum sits at the next whole number of nines.
        points.push(Some(((x + 0.01).ceil(), max as f64 / 1000.0)));
    }
    chart(
        "Latency by percentile",
        "latency (ms)",
        XAxis::Nines,
        &[Series {
            name: "latency",
            color: "#6c3fb5",
            points,
        }],
    )
}

/// The whole page.
pub fn page(s: &Summary) -> String {
    let mut rows = String::new();
    let mut row = |k: &str, v: String| {
        let _ = write!(rows, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(&v));
    };
    row("Target", s.url.clone());
    let mode = match s.rate_target {
        Some(r) => format!("open loop at {r} req/s"),
        None => "closed loop".to_string(),
    };
    row(
        "Load",
        format!(
            "{mode}, {} connections, {} threads, {}",
            s.connections,
            s.threads,
            crate::report::connection_mode(s)
        ),
    );
    row("Duration", format!("{:.2}s", s.duration.as_secs_f64()));
    row("Requests", format!("{} ({:.1} req/s)", s.requests, s.rate()));
    row(
        "Success",
        format!("{:.2}% ({} of {})", s.success_ratio() * 100.0, s.ok, s.requests),
    );
    row(
        "Status codes",
        s.statuses
            .iter()
            .map(|(c, n)| format!("{c}: {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    row(
        "Errors",
        s.errors
            .iter()
            .map(|(l, n)| format!("{l}: {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    row(
        "Transfer",
        format!(
            "{} received, {} sent",
            fmt_bytes(s.bytes_read),
            fmt_bytes(s.bytes_written)
        ),
    );
    if let Some(l) = &s.latency {
        row(
            "Latency",
            format!(
                "min {}, mean {}, p50 {}, p90 {}, p95 {}, p99 {}, p99.9 {}, max {}",
                fmt_micros(l.min),
                fmt_micros(l.mean.round() as u64),
                fmt_micros(l.p50),
                fmt_micros(l.p90),
                fmt_micros(l.p95),
                fmt_micros(l.p99),
                fmt_micros(l.p999),
                fmt_micros(l.max)
            ),
        );
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>tsubame bench: {title}</title>\
         <style>\
         body{{font:14px/1.4 system-ui,sans-serif;margin:24px auto;max-width:940px;color:#222}}\
         table{{border-collapse:collapse;margin-bottom:16px}}th,td{{text-align:left;padding:3px 12px 3px 0}}\
         th{{color:#555;font-weight:600}}svg{{width:100%;height:auto;margin:8px 0 16px}}\
         .grid{{stroke:#e4e4e4}}.title{{font-weight:600;font-size:15px}}\
         .xlab{{font-size:11px;text-anchor:middle;fill:#555}}.ylab{{font-size:11px;text-anchor:end;fill:#555}}\
         .axis{{font-size:12px;text-anchor:middle;fill:#555}}.legend{{font-size:12px;fill:#333}}\
         </style></head><body>\n<h1>tsubame bench</h1>\n<table>{rows}</table>\n{}\n{}\n{}\n\
         <script type=\"application/json\" id=\"bench-data\">{}</script>\n</body></html>\n",
        latency_over_time(s),
        rate_over_time(s),
        distribution(s),
        json(s),
        title = escape(&s.url),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Latency, WindowSummary};
    use std::time::Duration;

    fn summary() -> Summary {
        let timeline = (0..30)
            .map(|i| WindowSummary {
                start: f64::from(i) * 0.1,
                responses: if i == 10 { 0 } else { 50 },
                ok: 50,
                errors: 0,
                p50: 1000,
                p90: 2000,
                p99: 5000,
                max: 9000,
            })
            .collect();
        Summary {
            url: "http://h/<a&b>".into(),
            mode: "open",
            rate_target: Some(500.0),
            connections: 4,
            threads: 2,
            keepalive: true,
            preconnect: false,
            timeout: Duration::from_secs(10),
            request_kinds: 1,
            duration: Duration::from_secs(3),
            requests: 1450,
            responses: 1450,
            ok: 1450,
            unsent: 0,
            interrupted: false,
            statuses: vec![(200, 1450)],
            errors: vec![],
            bytes_read: 1000,
            bytes_written: 1000,
            latency: Some(Latency {
                min: 100,
                mean: 1200.0,
                stdev: 5.0,
                p50: 1000,
                p90: 2000,
                p95: 3000,
                p99: 5000,
                p999: 8000,
                max: 9000,
            }),
            timeline,
            window: Duration::from_millis(100),
            distribution: vec![
                (0.0, 100),
                (50.0, 1000),
                (90.0, 2000),
                (99.0, 5000),
                (99.9, 8000),
                (100.0, 9000),
            ],
        }
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(10.0, 5), 2.0);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(1000.0, 5), 200.0);
        assert_eq!(nice_step(0.03, 5), 0.01);
        assert_eq!(nice_step(0.0, 5), 1.0);
    }

    #[test]
    fn page_is_self_contained_with_charts_and_data() {
        let html = page(&summary());
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("http://h/<a"), "URL must be escaped");
        assert!(html.contains("http://h/&lt;a&amp;b&gt;"));
        assert_eq!(html.matches("<svg").count(), 3);
        assert!(html.contains("Latency over time"));
        assert!(html.contains("Latency by percentile"));
        assert!(html.contains("99.9%"));
        assert!(html.contains("<script type=\"application/json\" id=\"bench-data\">{\"url\":\"http://h/\\u003ca&b>\""));
        assert!(!html.contains("src=\"http"), "nothing fetched");
        // The empty window breaks the latency lines into two pieces.
        let p99_path = html.split("<title>p99</title>").next().unwrap();
        let d = p99_path.rsplit("d=\"").next().unwrap();
        assert_eq!(d.matches('M').count(), 2, "{d}");
    }

    #[test]
    fn long_timelines_are_grouped() {
        let mut s = summary();
        s.timeline = (0..4000)
            .map(|i| WindowSummary {
                start: f64::from(i) * 0.1,
                responses: 1,
                ok: 1,
                errors: 0,
                p50: 1,
                p90: 1,
                p99: if i == 3999 { 7 } else { 1 },
                max: 1,
            })
            .collect();
        let g = grouped(&s);
        assert_eq!(g.len(), 1334);
        assert_eq!(g.last().unwrap().3[2], 7);
        assert_eq!(g[0].1, 3);
    }
}
