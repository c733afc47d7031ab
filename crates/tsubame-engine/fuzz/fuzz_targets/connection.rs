//! The whole connection: bytes from a client, in writes of arbitrary
//! sizes, through the engine's serve loop (head parsing, Content-Length
//! and chunked bodies, spooling to disk, 100-continue, keep-alive,
//! refusals) to a stand-in application and back. Checks that the client
//! gets a clean sequence of complete responses, one per request the app
//! saw, with any refusal last and closing the connection, and that each
//! body reached the app whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tsubame_engine::fuzzing::{serve_in_memory, Seen};
use tsubame_engine::message::head::Framing;
use tsubame_engine::EngineOptions;

struct Response {
    status: u16,
    close: bool,
    body: Vec<u8>,
}

/// Splits the server's output into responses; panics on anything a client
/// could not read.
fn responses(mut out: &[u8], seen: &[Seen]) -> Vec<Response> {
    let mut all = Vec::new();
    while !out.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        let len = match response.parse(out) {
            Ok(httparse::Status::Complete(len)) => len,
            other => panic!("unreadable response {other:?}: {:?}", String::from_utf8_lossy(out)),
        };
        let status = response.code.unwrap_or(0);
        let header = |name: &str| {
            response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
        };
        let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        assert!(header("transfer-encoding").is_none());
        out = &out[len..];
        if status == 100 {
            continue;
        }
        let final_index = all.len();
        let is_head = seen.get(final_index).is_some_and(|s| s.method == b"HEAD") && status == 200;
        let body_len = match header("content-length") {
            Some(v) => v.parse::<usize>().expect("numeric content-length"),
            None => {
                assert!(is_head, "a response without a length: {status}");
                0
            }
        };
        let body_len = if is_head { 0 } else { body_len };
        assert!(out.len() >= body_len, "truncated body");
        all.push(Response {
            status,
            close,
            body: out[..body_len].to_vec(),
        });
        out = &out[body_len..];
    }
    all
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 4 {
        return;
    }
    let (config, rest) = input.split_at(4);
    let opts = EngineOptions {
        spool_threshold: [16, 256, 4096, 1 << 20][usize::from(config[0] & 3)],
        max_body_size: (config[0] & 4 != 0).then_some(2048),
        max_uri_size: 512,
        max_header_size: 4096,
        max_headers: 32,
        ..EngineOptions::default()
    };
    let sizes: Vec<usize> = config[1..].iter().map(|&b| usize::from(b) + 1).collect();
    let Ok(exchange) = serve_in_memory(rest, &sizes, opts) else {
        return;
    };
    let answered = responses(&exchange.output, &exchange.seen);
    let ok = answered.iter().take_while(|r| r.status == 200).count();
    assert_eq!(ok, exchange.seen.len(), "one 200 per request the app saw");
    for (response, seen) in answered.iter().zip(&exchange.seen) {
        if seen.method != b"HEAD" {
            assert_eq!(response.body, format!("len={}\n", seen.body.len()).into_bytes());
        }
        if let Framing::Length(n) = seen.framing {
            assert_eq!(seen.body.len() as u64, n, "a body reached the app short or long");
        }
    }
    // Anything else is the engine's refusal: one, last, and closing.
    assert!(answered.len() <= ok + 1, "responses after a refusal");
    if let Some(refusal) = answered.get(ok) {
        assert!(refusal.status >= 400, "status {}", refusal.status);
        assert!(refusal.close, "a refusal that keeps the connection");
    }
    for (i, response) in answered.iter().enumerate() {
        if response.close {
            assert_eq!(i + 1, answered.len(), "a response after connection: close");
        }
    }
});
