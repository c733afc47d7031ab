//! The two uses of base64 (RFC 4648 §4, standard alphabet, padded) in the
//! opening handshake: encoding `Sec-WebSocket-Accept`, and checking that
//! `Sec-WebSocket-Key` decodes to exactly 16 bytes. Small enough not to be
//! worth a dependency.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn encode(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        // `chunk.len() + 1` characters carry the bits; the rest is padding.
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 0x3F]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes canonical base64 only: padded to a multiple of 4, no
/// whitespace, and zero bits in the last character's unused low bits, so
/// one byte string has exactly one accepted spelling.
pub fn decode_strict(input: &[u8]) -> Option<Vec<u8>> {
    if !input.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let quads = input.len() / 4;
    for (index, quad) in input.chunks_exact(4).enumerate() {
        let padding = match (quad[2], quad[3]) {
            (b'=', b'=') => 2,
            (_, b'=') => 1,
            _ => 0,
        };
        if padding > 0 && index + 1 != quads {
            return None;
        }
        let mut n: u32 = 0;
        for &c in &quad[..4 - padding] {
            n = n << 6 | u32::from(sextet(c)?);
        }
        n <<= 6 * padding;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let kept = 3 - padding;
        // Bits past the last whole byte must be zero (RFC 4648 §3.5).
        if bytes[kept..].iter().any(|&b| b != 0) {
            return None;
        }
        out.extend_from_slice(&bytes[..kept]);
    }
    Some(out)
}

fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4648 §10.
    const VECTORS: &[(&str, &str)] = &[
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];

    #[test]
    fn encodes_the_rfc_4648_vectors() {
        for (plain, encoded) in VECTORS {
            assert_eq!(encode(plain.as_bytes()), *encoded);
        }
    }

    #[test]
    fn decodes_the_rfc_4648_vectors() {
        for (plain, encoded) in VECTORS {
            assert_eq!(decode_strict(encoded.as_bytes()).as_deref(), Some(plain.as_bytes()));
        }
    }

    #[test]
    fn round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode_strict(encode(&all).as_bytes()), Some(all));
    }

    #[test]
    fn refuses_non_canonical_input() {
        for bad in [
            "Zg", "Zg=", "Zh==", "Zm9=", "Zg==Zg==", "Z===", "Zm 9v", "Zm9v\n", "Zm-v", "Zm_v", "=Zm9",
        ] {
            assert_eq!(decode_strict(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
