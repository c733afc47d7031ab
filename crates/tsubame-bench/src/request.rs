//! Requests are serialized once, before the run; each send writes the same
//! bytes. A weighted mix of requests is spread evenly over the run by
//! smooth weighted round robin, so request number `i` of the run is always
//! `schedule[i % schedule.len()]`, and a run of a multiple of the total
//! weight sends each request exactly in proportion to its weight.

use crate::error::Error;

/// One kind of request, from the command line or a targets file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSpec {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub weight: u32,
}

/// A request ready to write.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub bytes: Vec<u8>,
    /// A HEAD response has no body whatever its headers say.
    pub head: bool,
}

/// The largest sum of weights (after dividing by their common divisor).
pub const MAX_TOTAL_WEIGHT: u64 = 1_000_000;

pub fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Parses `Name: value`, as given to `-H` or in a targets file.
pub fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("invalid header \"{text}\": expected \"Name: value\""))?;
    let name = name.trim();
    if !is_token(name) {
        return Err(format!("invalid header name \"{name}\""));
    }
    let value = value.trim();
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!("invalid header value for {name}"));
    }
    Ok((name.to_string(), value.to_string()))
}

fn has(headers: &[(String, String)], name: &str) -> bool {
    headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// Serializes `spec` for `authority` with the run-wide `headers` (a
/// request's own header replaces a run-wide one of the same name).
pub fn prepare(spec: &RequestSpec, authority: &str, headers: &[(String, String)], keepalive: bool) -> Prepared {
    let mut all: Vec<(String, String)> = headers
        .iter()
        .filter(|(name, _)| !has(&spec.headers, name))
        .cloned()
        .collect();
    all.extend(spec.headers.iter().cloned());

    let mut out = Vec::with_capacity(128 + spec.body.len());
    out.extend_from_slice(spec.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(spec.target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut line = |name: &str, value: &str| {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    };
    if !has(&all, "host") {
        line("Host", authority);
    }
    if !has(&all, "user-agent") {
        line("User-Agent", concat!("tsubame-bench/", env!("CARGO_PKG_VERSION")));
    }
    for (name, value) in &all {
        line(name, value);
    }
    let wants_length = !spec.body.is_empty() || matches!(spec.method.as_str(), "POST" | "PUT" | "PATCH");
    if wants_length && !has(&all, "content-length") && !has(&all, "transfer-encoding") {
        line("Content-Length", &spec.body.len().to_string());
    }
    if !keepalive && !has(&all, "connection") {
        line("Connection", "close");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&spec.body);
    Prepared {
        bytes: out,
        head: spec.method == "HEAD",
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The order in which requests are sent: indexes into `weights`, each
/// appearing `weight / gcd` times, spread evenly (smooth weighted round
/// robin, as nginx balances upstreams).
pub fn schedule(weights: &[u32]) -> Result<Vec<u32>, Error> {
    let divisor = weights.iter().fold(0u64, |g, &w| gcd(g, u64::from(w))).max(1);
    let reduced: Vec<i64> = weights.iter().map(|&w| (u64::from(w) / divisor) as i64).collect();
    let total: i64 = reduced.iter().sum();
    if total as u64 > MAX_TOTAL_WEIGHT {
        return Err(Error::usage(format!(
            "the weights add up to {total} (after dividing by their common divisor); at most {MAX_TOTAL_WEIGHT}"
        )));
    }
    let mut current = vec![0i64; reduced.len()];
    let mut order = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for i in 0..reduced.len() {
            current[i] += reduced[i];
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        order.push(best as u32);
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(method: &str, body: &str) -> RequestSpec {
        RequestSpec {
            method: method.into(),
            target: "/p?q=1".into(),
            headers: vec![],
            body: body.as_bytes().to_vec(),
            weight: 1,
        }
    }

    fn text(p: &Prepared) -> String {
        String::from_utf8(p.bytes.clone()).unwrap()
    }

    #[test]
    fn serializes_a_get() {
        let p = prepare(&spec("GET", ""), "h:1", &[], true);
        assert_eq!(
            text(&p),
            format!(
                "GET /p?q=1 HTTP/1.1\r\nHost: h:1\r\nUser-Agent: tsubame-bench/{}\r\n\r\n",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert!(!p.head);
    }

    #[test]
    fn serializes_a_post_with_headers() {
        let global = vec![
            ("X-A".to_string(), "1".to_string()),
            ("X-B".to_string(), "2".to_string()),
        ];
        let mut s = spec("POST", "hello");
        s.headers = vec![("x-b".into(), "3".into()), ("User-Agent".into(), "me".into())];
        let t = text(&prepare(&s, "h", &global, false));
        assert!(
            t.starts_with("POST /p?q=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-b: 3\r\nUser-Agent: me\r\n"),
            "{t}"
        );
        assert!(
            t.ends_with("Content-Length: 5\r\nConnection: close\r\n\r\nhello"),
            "{t}"
        );
        assert!(!t.contains("X-B"));
        assert!(!t.contains("tsubame-bench"));
    }

    #[test]
    fn empty_post_has_zero_length_and_host_can_be_overridden() {
        let mut s = spec("POST", "");
        s.headers = vec![("host".into(), "other".into())];
        let t = text(&prepare(&s, "h", &[], true));
        assert!(t.contains("Content-Length: 0\r\n"));
        assert!(t.contains("host: other\r\n"));
        assert!(!t.contains("Host: h"));
        assert!(prepare(&spec("HEAD", ""), "h", &[], true).head);
    }

    #[test]
    fn parses_headers() {
        assert_eq!(parse_header("X-Y:  a b ").unwrap(), ("X-Y".into(), "a b".into()));
        assert_eq!(parse_header("X:").unwrap(), ("X".into(), "".into()));
        assert!(parse_header("novalue").is_err());
        assert!(parse_header("bad name: x").is_err());
        assert!(parse_header(": x").is_err());
    }

    #[test]
    fn schedule_is_proportional_and_spread() {
        assert_eq!(schedule(&[1]).unwrap(), vec![0]);
        assert_eq!(schedule(&[2, 4]).unwrap(), vec![1, 0, 1]);
        let s = schedule(&[5, 1, 1]).unwrap();
        assert_eq!(s.len(), 7);
        assert_eq!(s.iter().filter(|&&i| i == 0).count(), 5);
        assert_eq!(s, vec![0, 0, 1, 0, 2, 0, 0]);
        let s = schedule(&[3, 1]).unwrap();
        assert_eq!(s, vec![0, 0, 1, 0]);
    }

    #[test]
    fn schedule_refuses_huge_totals() {
        assert!(schedule(&[1_000_000, 1]).is_err());
        assert_eq!(schedule(&[1_000_000, 2_000_000]).unwrap().len(), 3);
    }
}
