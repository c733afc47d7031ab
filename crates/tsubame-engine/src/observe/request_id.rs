//! `X-Request-Id` (`request_id` on): a valid id from the client (or the
//! proxy in front) is kept, anything else is replaced by a generated one;
//! the app sees it as `HTTP_X_REQUEST_ID`, the response carries it, and
//! the access log writes it.

use crate::dispatch::reply::Reply;
use crate::message::head::RequestHead;
use bytes::Bytes;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

const NAME: &[u8] = b"x-request-id";
/// Longer ids are replaced: a log line or a header value should not carry
/// whatever a client chose to send.
const MAX_LEN: usize = 128;

/// Letters, digits and `-_.:+/=@`: enough for UUIDs, ULIDs, base64 and the
/// ids proxies and tracing systems write, and nothing that needs escaping
/// in a log line or a header.
pub fn valid(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_LEN
        && id
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'+' | b'/' | b'=' | b'@'))
}

/// Makes ids: random per process (each cluster worker seeds its own after
/// the fork) and a counter, mixed, so two are never alike in one process
/// and practically never across processes.
#[derive(Debug)]
pub struct IdGen {
    seed: u64,
    next: AtomicU64,
}

impl Default for IdGen {
    fn default() -> Self {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        hasher.write_u128(nanos);
        IdGen {
            seed: hasher.finish(),
            next: AtomicU64::new(0),
        }
    }
}

fn mix(mut z: u64) -> u64 {
    // splitmix64's finalizer: every input bit moves every output bit.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl IdGen {
    /// A version 4 UUID in its usual text form.
    pub fn generate(&self) -> Bytes {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let high = mix(self.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let low = mix(high ^ self.seed.rotate_left(32) ^ n);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&high.to_be_bytes());
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let mut out = Vec::with_capacity(36);
        for (i, b) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                out.push(b'-');
            }
            out.extend_from_slice(format!("{b:02x}").as_bytes());
        }
        Bytes::from(out)
    }

    /// The request's id: its own if valid, else a new one, which replaces
    /// whatever the head had so the app sees the same id the log does.
    pub fn assign(&self, head: &mut RequestHead) -> Bytes {
        if let Some(id) = head.header(NAME) {
            if valid(id) {
                return id.clone();
            }
            head.headers.retain(|(name, _)| !name.eq_ignore_ascii_case(NAME));
        }
        let id = self.generate();
        head.headers.push((Bytes::from_static(NAME), id.clone()));
        id
    }
}

/// The reply with `x-request-id: ID` in its head, unless the app already
/// set one. Heads are in HTTP/1 form for both protocols here.
pub fn tag_reply(reply: Reply, id: &[u8]) -> Reply {
    match reply {
        Reply::Full {
            status,
            data,
            tail,
            body_len,
            close,
        } => Reply::Full {
            status,
            data: with_id(data, id),
            tail,
            body_len,
            close,
        },
        Reply::File {
            status,
            head,
            file,
            offset,
            len,
            close,
        } => Reply::File {
            status,
            head: with_id(head, id),
            file,
            offset,
            len,
            close,
        },
        Reply::Stream {
            status,
            head,
            chunks,
            framing,
            close,
        } => Reply::Stream {
            status,
            head: with_id(head, id),
            chunks,
            framing,
            close,
        },
        other => other,
    }
}

/// Inserts the header before the blank line ending the head; `data` may
/// have the body after it.
fn with_id(data: Bytes, id: &[u8]) -> Bytes {
    let Some(end) = memchr::memmem::find(&data, b"\r\n\r\n") else {
        return data;
    };
    let head = &data[..end];
    let has_one = head.split(|&b| b == b'\n').skip(1).any(|line| {
        line.len() > NAME.len() && line[..NAME.len()].eq_ignore_ascii_case(NAME) && line[NAME.len()] == b':'
    });
    if has_one {
        return data;
    }
    let mut out = Vec::with_capacity(data.len() + NAME.len() + id.len() + 4);
    out.extend_from_slice(&data[..end + 2]);
    out.extend_from_slice(NAME);
    out.extend_from_slice(b": ");
    out.extend_from_slice(id);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&data[end + 2..]);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuids_and_differ() {
        let gen = IdGen::default();
        let a = gen.generate();
        let b = gen.generate();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a[14], b'4');
        assert!(valid(&a));
    }

    #[test]
    fn validity() {
        assert!(valid(b"req-123_abc.def:1+2/3=@"));
        assert!(!valid(b""));
        assert!(!valid(b"a b"));
        assert!(!valid(b"a\"b"));
        assert!(!valid(&[b'a'; 129]));
    }

    #[test]
    fn the_header_goes_before_the_body_once() {
        let reply = Bytes::from_static(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi");
        let tagged = with_id(reply, b"abc");
        assert_eq!(
            &tagged[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-request-id: abc\r\n\r\nhi"
        );
        let again = with_id(tagged.clone(), b"zzz");
        assert_eq!(again, tagged);
    }
}
