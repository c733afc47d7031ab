//! Command-line flags.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::Error;
use crate::request::{is_token, parse_header, RequestSpec};
use crate::targets;
use crate::url::Url;

pub const DEFAULT_CONNECTIONS: usize = 10;
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_CONNECTIONS: usize = 100_000;
pub const MAX_RATE: f64 = 10_000_000.0;

pub fn usage(prog: &str) -> String {
    format!(
        "Usage: {prog} [options] URL

URL is http://HOST[:PORT][/PATH] or unix:///SOCKET[/PATH]; for a unix URL the
socket is the longest prefix of the path that exists as a file.

Load:
  -c, --connections N   connections kept open (default {DEFAULT_CONNECTIONS})
  -r, --rate N[/s|/m]   open loop: start N requests per second whatever the
                        server does; latency counts from when each request
                        should have been sent (default: closed loop, each
                        connection sends its next request on each response)
  -d, --duration TIME   run this long, e.g. 30s, 2m, 1m30s, 500ms (default 10s
                        unless -n is given)
  -n, --requests N      stop after N requests (with -d, whichever comes first)
  -t, --threads N       client threads (default: CPU cores, at most -c)
      --no-keepalive    one connection per request (default: keep-alive)
      --preconnect      open every connection before the clock starts, so
                        latencies and the duration leave out the TCP
                        handshakes (default: a connection opens with its
                        first request, and that request's latency counts it)
      --timeout TIME    a request without a whole response by then fails
                        (default 10s)
Requests:
  -m, --method NAME     request method (default GET, or POST with a body)
  -H, --header 'N: v'   add a request header (repeatable)
      --body STRING     request body
      --body-file PATH  request body read from PATH
      --targets FILE    mix the requests listed in FILE (METHOD /PATH [@BODY]
                        [weight=N] per line; see the README)
Output:
      --json            print the report as JSON instead of text
      --html FILE       also write an HTML report with charts to FILE
  -q, --quiet           no progress line (shown only when stderr is a terminal)
  -h, --help            print this help
  -V, --version         print the version
"
    )
}

#[derive(Debug)]
pub struct Config {
    pub url: Url,
    pub connections: usize,
    pub threads: usize,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    pub rate: Option<f64>,
    pub keepalive: bool,
    pub preconnect: bool,
    pub timeout: Duration,
    pub headers: Vec<(String, String)>,
    pub specs: Vec<RequestSpec>,
    pub json: bool,
    pub html: Option<PathBuf>,
    pub quiet: bool,
}

#[derive(Debug)]
pub enum Command {
    Run(Box<Config>),
    Help,
    Version,
}

/// Parses `text` as a duration: a number with a unit (`ns`, `us`, `ms`,
/// `s`, `m`, `h`), several such parts (`1m30s`), or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration \"{text}\": expected a number with a unit, like 10s, 500ms, 2m or 1m30s");
    if text.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = text.parse::<f64>() {
        return seconds(secs).ok_or_else(bad);
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let unit_end = rest[num_end..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .map_or(rest.len(), |i| num_end + i);
        let number: f64 = rest[..num_end].parse().map_err(|_| bad())?;
        let scale = match &rest[num_end..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    seconds(total).ok_or_else(bad)
}

fn seconds(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs > 0.0 && secs < 1e9).then(|| Duration::from_secs_f64(secs))
}

/// Parses a rate: `N`, `N/s`, `N/m` or `N/h`, in requests per second.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let (number, per) = match text.split_once('/') {
        Some((n, "s")) => (n, 1.0),
        Some((n, "m")) => (n, 60.0),
        Some((n, "h")) => (n, 3600.0),
        Some(_) => return Err(format!("invalid rate \"{text}\": the unit must be /s, /m or /h")),
        None => (text, 1.0),
    };
    match number.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && n / per <= MAX_RATE => Ok(n / per),
        _ => Err(format!(
            "invalid rate \"{text}\": expected a positive number of requests per second, like 100 or 6000/m"
        )),
    }
}

fn parse_count(flag: &str, text: &str, max: u64) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n >= 1 && n <= max => Ok(n),
        _ => Err(format!(
            "invalid {flag} \"{text}\": expected an integer from 1 to {max}"
        )),
    }
}

/// Parses the arguments after the program name. `cores` is the default
/// thread count.
pub fn parse(args: &[String], cores: usize) -> Result<Command, Error> {
    let mut url: Option<String> = None;
    let mut connections: Option<usize> = None;
    let mut threads: Option<usize> = None;
    let mut duration = None;
    let mut requests = None;
    let mut rate = None;
    let mut keepalive = true;
    let mut preconnect = false;
    let mut timeout = DEFAULT_TIMEOUT;
    let mut method: Option<String> = None;
    let mut headers = Vec::new();
    let mut body: Option<Vec<u8>> = None;
    let mut targets_file: Option<PathBuf> = None;
    let mut json = false;
    let mut html = None;
    let mut quiet = false;

    let mut i = 0;
    let mut only_positional = false;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if only_positional || !arg.starts_with('-') || arg == "-" {
            if let Some(first) = &url {
                return Err(Error::usage(format!("more than one URL: {first} and {arg}")));
            }
            url = Some(arg.clone());
            continue;
        }
        if arg == "--" {
            only_positional = true;
            continue;
        }
        // --flag=value, -cVALUE, or the value in the next argument.
        let (flag, inline): (String, Option<String>) = if let Some(long) = arg.strip_prefix("--") {
            match long.split_once('=') {
                Some((f, v)) => (format!("--{f}"), Some(v.to_string())),
                None => (arg.clone(), None),
            }
        } else if arg.len() > 2 {
            (arg[..2].to_string(), Some(arg[2..].to_string()))
        } else {
            (arg.clone(), None)
        };
        let mut value = |name: &str| -> Result<String, Error> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args
                .get(i)
                .cloned()
                .ok_or_else(|| Error::usage(format!("{name} needs a value")))?;
            i += 1;
            Ok(v)
        };
        let no_value = |name: &str| -> Result<(), Error> {
            match &inline {
                Some(_) => Err(Error::usage(format!("{name} takes no value"))),
                None => Ok(()),
            }
        };
        match flag.as_str() {
            "-c" | "--connections" => {
                let v = value("-c")?;
                connections =
                    Some(parse_count("connections", &v, MAX_CONNECTIONS as u64).map_err(Error::Usage)? as usize);
            }
            "-t" | "--threads" => {
                let v = value("-t")?;
                threads = Some(parse_count("threads", &v, 1024).map_err(Error::Usage)? as usize);
            }
            "-d" | "--duration" => duration = Some(parse_duration(&value("-d")?).map_err(Error::Usage)?),
            "-n" | "--requests" => {
                requests = Some(parse_count("requests", &value("-n")?, u64::MAX / 4).map_err(Error::Usage)?)
            }
            "-r" | "--rate" => rate = Some(parse_rate(&value("--rate")?).map_err(Error::Usage)?),
            "--timeout" => timeout = parse_duration(&value("--timeout")?).map_err(Error::Usage)?,
            "--no-keepalive" => {
                no_value("--no-keepalive")?;
                keepalive = false;
            }
            "--preconnect" => {
                no_value("--preconnect")?;
                preconnect = true;
            }
            "-m" | "--method" => {
                let m = value("-m")?;
                if !is_token(&m) {
                    return Err(Error::usage(format!("invalid method \"{m}\"")));
                }
                method = Some(m);
            }
            "-H" | "--header" => headers.push(parse_header(&value("-H")?).map_err(Error::Usage)?),
            "--body" => {
                let v = value("--body")?;
                if body.replace(v.into_bytes()).is_some() {
                    return Err(Error::usage("give one of --body and --body-file"));
                }
            }
            "--body-file" => {
                let path = value("--body-file")?;
                let bytes = std::fs::read(&path).map_err(|source| Error::File {
                    path: path.clone(),
                    action: "read body file",
                    source,
                })?;
                if body.replace(bytes).is_some() {
                    return Err(Error::usage("give one of --body and --body-file"));
                }
            }
            "--targets" => targets_file = Some(PathBuf::from(value("--targets")?)),
            "--json" => {
                no_value("--json")?;
                json = true;
            }
            "--html" => html = Some(PathBuf::from(value("--html")?)),
            "-q" | "--quiet" => {
                no_value("-q")?;
                quiet = true;
            }
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            _ => return Err(Error::usage(format!("unknown option {flag}"))),
        }
    }

    let url = url.ok_or_else(|| Error::usage("missing URL (usage: tsubame bench [options] URL; --help for more)"))?;
    let url = Url::parse(&url)?;
    let specs = match &targets_file {
        Some(path) => {
            if method.is_some() || body.is_some() {
                return Err(Error::usage(
                    "--targets cannot be combined with -m, --body or --body-file: put them in the targets file",
                ));
            }
            targets::load(path)?
        }
        None => {
            let body = body.unwrap_or_default();
            let method = method.unwrap_or_else(|| if body.is_empty() { "GET" } else { "POST" }.to_string());
            vec![RequestSpec {
                method,
                target: url.target.clone(),
                headers: Vec::new(),
                body,
                weight: 1,
            }]
        }
    };
    if preconnect && !keepalive {
        return Err(Error::usage(
            "--preconnect needs keep-alive: with --no-keepalive every request opens its own connection",
        ));
    }
    let connections = connections.unwrap_or(DEFAULT_CONNECTIONS);
    let threads = threads.unwrap_or(cores.max(1)).min(connections);
    let duration = if duration.is_none() && requests.is_none() {
        Some(DEFAULT_DURATION)
    } else {
        duration
    };
    Ok(Command::Run(Box::new(Config {
        url,
        connections,
        threads,
        duration,
        requests,
        rate,
        keepalive,
        preconnect,
        timeout,
        headers,
        specs,
        json,
        html,
        quiet,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Config, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse(&args, 2) {
            Ok(Command::Run(c)) => Ok(*c),
            Ok(other) => Err(format!("{other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn durations() {
        let ms = |s: &str| parse_duration(s).map(|d| d.as_millis());
        assert_eq!(ms("10s"), Ok(10_000));
        assert_eq!(ms("1m"), Ok(60_000));
        assert_eq!(ms("1m30s"), Ok(90_000));
        assert_eq!(ms("500ms"), Ok(500));
        assert_eq!(ms("1.5s"), Ok(1500));
        assert_eq!(ms("2h"), Ok(7_200_000));
        assert_eq!(ms("3"), Ok(3000));
        assert_eq!(ms("250us"), Ok(0));
        for bad in ["", "s", "10x", "-1s", "0", "0s", "1..2s", "ms10", "10 s", "nan", "inf"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.starts_with(&format!("invalid duration \"{bad}\"")), "{bad}: {err}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100"), Ok(100.0));
        assert_eq!(parse_rate("100/s"), Ok(100.0));
        assert_eq!(parse_rate("6000/m"), Ok(100.0));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
        for bad in ["0", "-5", "x", "5/d", "1e12", ""] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults() {
        let c = run(&["http://127.0.0.1:1/"]).unwrap();
        assert_eq!(c.connections, 10);
        assert_eq!(c.threads, 2);
        assert_eq!(c.duration, Some(DEFAULT_DURATION));
        assert_eq!(c.requests, None);
        assert!(c.keepalive);
        assert_eq!(c.specs.len(), 1);
        assert_eq!(c.specs[0].method, "GET");
        assert_eq!(c.specs[0].target, "/");
    }

    #[test]
    fn flag_forms() {
        let c = run(&[
            "-c4",
            "--threads=1",
            "-n",
            "100",
            "--rate",
            "50/s",
            "http://h/x",
            "-H",
            "A: b",
            "--header=C: d",
            "--body",
            "hi",
            "--no-keepalive",
            "--timeout",
            "2s",
            "--json",
            "--html",
            "r.html",
            "-q",
        ])
        .unwrap();
        assert_eq!(c.connections, 4);
        assert_eq!(c.threads, 1);
        assert_eq!(c.requests, Some(100));
        assert_eq!(c.duration, None);
        assert_eq!(c.rate, Some(50.0));
        assert_eq!(c.headers, vec![("A".into(), "b".into()), ("C".into(), "d".into())]);
        assert_eq!(c.specs[0].method, "POST");
        assert_eq!(c.specs[0].body, b"hi");
        assert_eq!(c.specs[0].target, "/x");
        assert!(!c.keepalive);
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert!(c.json && c.quiet);
        assert_eq!(c.html, Some(PathBuf::from("r.html")));
    }

    #[test]
    fn preconnect_flag_and_its_conflict_with_no_keepalive() {
        let c = run(&["--preconnect", "-c", "3", "http://h/"]).unwrap();
        assert!(c.preconnect && c.keepalive);
        assert!(!run(&["http://h/"]).unwrap().preconnect);
        let err = run(&["--preconnect", "--no-keepalive", "http://h/"]).unwrap_err();
        assert!(err.starts_with("--preconnect needs keep-alive"), "{err}");
    }

    #[test]
    fn threads_never_exceed_connections() {
        assert_eq!(run(&["-c", "1", "http://h/"]).unwrap().threads, 1);
        assert_eq!(run(&["-c", "3", "-t", "8", "http://h/"]).unwrap().threads, 3);
    }

    #[test]
    fn errors() {
        let err = |args: &[&str]| run(args).unwrap_err();
        assert_eq!(
            err(&[]),
            "missing URL (usage: tsubame bench [options] URL; --help for more)"
        );
        assert_eq!(err(&["-x", "http://h/"]), "unknown option -x");
        assert_eq!(err(&["--frob", "http://h/"]), "unknown option --frob");
        assert_eq!(err(&["http://h/", "-c"]), "-c needs a value");
        assert!(err(&["-c", "0", "http://h/"]).starts_with("invalid connections \"0\""));
        assert!(err(&["-d", "soon", "http://h/"]).starts_with("invalid duration \"soon\""));
        assert_eq!(
            err(&["http://a/", "http://b/"]),
            "more than one URL: http://a/ and http://b/"
        );
        assert_eq!(err(&["--json=1", "http://h/"]), "--json takes no value");
        assert_eq!(
            err(&["--body", "a", "--body", "b", "http://h/"]),
            "give one of --body and --body-file"
        );
        assert!(err(&["--targets", "t", "-m", "PUT", "http://h/"]).starts_with("--targets cannot be combined"));
        assert!(
            err(&["--body-file", "/nonexistent/x", "http://h/"]).starts_with("cannot read body file /nonexistent/x")
        );
        assert!(err(&["-m", "G T", "http://h/"]).starts_with("invalid method"));
        assert!(err(&["ftp://h/"]).starts_with("invalid URL"));
    }

    #[test]
    fn help_and_version() {
        let args = vec!["http://h/".to_string(), "--help".to_string()];
        assert!(matches!(parse(&args, 1), Ok(Command::Help)));
        let args = vec!["-V".to_string()];
        assert!(matches!(parse(&args, 1), Ok(Command::Version)));
    }
}
