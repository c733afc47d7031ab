//! The targets file: several requests to mix in one run.
//!
//! ```text
//! # A comment. Blank lines are ignored.
//! GET /
//! GET /search?q=swift weight=3
//! POST /users @user.json weight=2
//!     Content-Type: application/json
//!     X-Trace: bench
//! DELETE /users/1
//! ```
//!
//! A request line is `METHOD PATH`, then optionally `@FILE` (the body, read
//! from FILE relative to the targets file) and `weight=N` (a positive
//! integer, default 1), in either order. Indented `Name: value` lines that
//! follow add headers to that request. The URL on the command line gives
//! the host (or socket); the paths replace its path.

use std::path::Path;

use crate::error::Error;
use crate::request::{is_token, parse_header, RequestSpec};
use crate::url::check_target;

pub const MAX_WEIGHT: u32 = 1_000_000;

/// Reads and parses a targets file.
pub fn load(path: &Path) -> Result<Vec<RequestSpec>, Error> {
    let text = std::fs::read(path).map_err(|source| Error::File {
        path: path.display().to_string(),
        action: "read targets file",
        source,
    })?;
    let text = String::from_utf8(text).map_err(|_| Error::Targets {
        file: path.display().to_string(),
        line: 1,
        message: "not UTF-8 text".into(),
    })?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    parse(&text, &path.display().to_string(), &|name: &str| {
        let body_path = base.join(name);
        std::fs::read(&body_path).map_err(|e| {
            format!(
                "cannot read body file {}: {}",
                body_path.display(),
                crate::error::io_message(&e)
            )
        })
    })
}

/// Parses targets text; `read_body` loads an `@FILE` body.
pub fn parse(
    text: &str,
    file: &str,
    read_body: &dyn Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<Vec<RequestSpec>, Error> {
    let mut specs: Vec<RequestSpec> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let fail = |message: String| Error::Targets {
            file: file.to_string(),
            line: index + 1,
            message,
        };
        let line = raw.trim_end_matches('\r');
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            let spec = specs
                .last_mut()
                .ok_or_else(|| fail("an indented header line must follow a request line".into()))?;
            let header = parse_header(trimmed).map_err(fail)?;
            spec.headers.push(header);
            continue;
        }
        specs.push(parse_request_line(trimmed, read_body).map_err(fail)?);
    }
    if specs.is_empty() {
        return Err(Error::Targets {
            file: file.to_string(),
            line: 1,
            message: "no requests in the file".into(),
        });
    }
    Ok(specs)
}

fn parse_request_line(line: &str, read_body: &dyn Fn(&str) -> Result<Vec<u8>, String>) -> Result<RequestSpec, String> {
    let mut words = line.split_whitespace();
    let (Some(method), Some(target)) = (words.next(), words.next()) else {
        return Err(format!(
            "expected \"METHOD /PATH [@BODY_FILE] [weight=N]\", got \"{line}\""
        ));
    };
    if !is_token(method) || method.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(format!(
            "invalid method \"{method}\" (expected an upper-case name like GET)"
        ));
    }
    check_target(target)?;
    let mut body: Option<Vec<u8>> = None;
    let mut weight: Option<u32> = None;
    for word in words {
        if let Some(name) = word.strip_prefix('@') {
            if body.is_some() {
                return Err("more than one @BODY_FILE".into());
            }
            if name.is_empty() {
                return Err("@ must be followed by a file name".into());
            }
            body = Some(read_body(name)?);
        } else if let Some(value) = word.strip_prefix("weight=") {
            if weight.is_some() {
                return Err("more than one weight=".into());
            }
            weight = match value.parse::<u32>() {
                Ok(w) if (1..=MAX_WEIGHT).contains(&w) => Some(w),
                _ => {
                    return Err(format!(
                        "invalid weight \"{value}\" (expected an integer from 1 to {MAX_WEIGHT})"
                    ))
                }
            };
        } else {
            return Err(format!("unexpected \"{word}\" (expected @BODY_FILE or weight=N)"));
        }
    }
    Ok(RequestSpec {
        method: method.to_string(),
        target: target.to_string(),
        headers: Vec::new(),
        body: body.unwrap_or_default(),
        weight: weight.unwrap_or(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bodies(name: &str) -> Result<Vec<u8>, String> {
        match name {
            "b.json" => Ok(b"{\"a\":1}".to_vec()),
            _ => Err(format!("cannot read body file {name}: No such file or directory")),
        }
    }

    fn parse_ok(text: &str) -> Vec<RequestSpec> {
        parse(text, "t.txt", &bodies).unwrap()
    }

    fn parse_err(text: &str) -> String {
        parse(text, "t.txt", &bodies).unwrap_err().to_string()
    }

    #[test]
    fn parses_the_documented_example() {
        let specs = parse_ok(
            "# comment\n\nGET /\nGET /search?q=swift weight=3\r\nPOST /users @b.json weight=2\n    Content-Type: application/json\n\tX-Trace: bench\nDELETE /users/1\n",
        );
        assert_eq!(specs.len(), 4);
        assert_eq!(
            (specs[0].method.as_str(), specs[0].target.as_str(), specs[0].weight),
            ("GET", "/", 1)
        );
        assert_eq!(specs[1].target, "/search?q=swift");
        assert_eq!(specs[1].weight, 3);
        assert_eq!(specs[2].body, b"{\"a\":1}");
        assert_eq!(specs[2].weight, 2);
        assert_eq!(
            specs[2].headers,
            vec![
                ("Content-Type".into(), "application/json".into()),
                ("X-Trace".into(), "bench".into())
            ]
        );
        assert_eq!(specs[3].method, "DELETE");
        assert!(specs[3].headers.is_empty());
    }

    #[test]
    fn weight_before_body() {
        let specs = parse_ok("PUT /x weight=7 @b.json");
        assert_eq!(specs[0].weight, 7);
        assert!(!specs[0].body.is_empty());
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(
            parse_err("GET /\n\nGET"),
            "t.txt:3: expected \"METHOD /PATH [@BODY_FILE] [weight=N]\", got \"GET\""
        );
        assert_eq!(
            parse_err("get /"),
            "t.txt:1: invalid method \"get\" (expected an upper-case name like GET)"
        );
        assert_eq!(parse_err("GET x"), "t.txt:1: the path must start with / (got \"x\")");
        assert_eq!(
            parse_err("GET / weight=0"),
            "t.txt:1: invalid weight \"0\" (expected an integer from 1 to 1000000)"
        );
        assert_eq!(parse_err("GET / weight=x").split(':').nth(1), Some("1"));
        assert_eq!(parse_err("GET / weight=1 weight=2"), "t.txt:1: more than one weight=");
        assert_eq!(
            parse_err("GET / junk"),
            "t.txt:1: unexpected \"junk\" (expected @BODY_FILE or weight=N)"
        );
        assert_eq!(parse_err("GET / @"), "t.txt:1: @ must be followed by a file name");
        assert_eq!(
            parse_err("# c\nPOST / @missing.json"),
            "t.txt:2: cannot read body file missing.json: No such file or directory"
        );
        assert_eq!(
            parse_err("  X: y\nGET /"),
            "t.txt:1: an indented header line must follow a request line"
        );
        assert_eq!(
            parse_err("GET /\n  nocolon"),
            "t.txt:2: invalid header \"nocolon\": expected \"Name: value\""
        );
        assert_eq!(parse_err("# only comments\n"), "t.txt:1: no requests in the file");
        assert_eq!(parse_err(""), "t.txt:1: no requests in the file");
    }

    #[test]
    fn loads_bodies_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("body.txt"), "payload").unwrap();
        let file = dir.path().join("targets.txt");
        std::fs::write(&file, "POST /in @body.txt\n").unwrap();
        let specs = load(&file).unwrap();
        assert_eq!(specs[0].body, b"payload");

        std::fs::write(&file, "POST /in @nope.txt\n").unwrap();
        let err = load(&file).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}:1: cannot read body file", file.display())),
            "{err}"
        );

        let missing = dir.path().join("missing.txt");
        let err = load(&missing).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "cannot read targets file {}: No such file or directory",
                missing.display()
            )
        );
    }
}
