//! Close codes (RFC 6455 §7.4) and close frame payloads (§5.5.1): the code
//! in network order, then an optional UTF-8 reason.

use super::frame::MAX_CONTROL_PAYLOAD;
use bytes::Bytes;
use std::fmt;

/// The purpose of the connection is fulfilled.
pub const NORMAL: u16 = 1000;
/// The server is going down, or a browser navigated away.
pub const GOING_AWAY: u16 = 1001;
pub const PROTOCOL_ERROR: u16 = 1002;
/// A data type the endpoint cannot accept (e.g. binary for a text-only app).
pub const UNSUPPORTED_DATA: u16 = 1003;
/// Reserved for reporting "no code was present"; never sent on the wire.
pub const NO_STATUS: u16 = 1005;
/// Reserved for reporting "closed without a close frame"; never sent.
pub const ABNORMAL: u16 = 1006;
/// Data inconsistent with the message type, e.g. non-UTF-8 text.
pub const INVALID_PAYLOAD: u16 = 1007;
pub const POLICY_VIOLATION: u16 = 1008;
pub const MESSAGE_TOO_BIG: u16 = 1009;
/// Sent by a client only: the server did not negotiate an extension.
pub const MANDATORY_EXTENSION: u16 = 1010;
pub const INTERNAL_ERROR: u16 = 1011;

/// A close frame's reason, with the 2-byte code, fits a control frame.
pub const MAX_REASON_LEN: usize = MAX_CONTROL_PAYLOAD - 2;

/// A close frame's payload: code (network order) then reason (truncated on
/// a char boundary so the payload is ≤ 125 bytes).
pub fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(MAX_REASON_LEN);
    // Cutting inside a character would send invalid UTF-8, which the peer
    // must answer with 1007.
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = Vec::with_capacity(2 + end);
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(&reason.as_bytes()[..end]);
    payload
}

/// Whether a code may appear in a close frame received from a peer (RFC
/// 6455 §7.4: 1000-1003, 1007-1011 (and 1012-1014 as registered by IANA),
/// 3000-4999; never 1004, 1005, 1006, 1015, <1000, 1016-2999, ≥5000).
pub fn valid_received_code(code: u16) -> bool {
    // 1004 is reserved with no meaning; 1005, 1006 and 1015 only stand in
    // for "no code" in APIs. 3000-3999 are registered with IANA for
    // libraries and frameworks, 4000-4999 are for private use.
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// A close payload the peer should not have sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseError {
    /// One byte: too short for a code, and a code is required once the
    /// payload is not empty (§5.5.1).
    Truncated,
    InvalidCode(u16),
    ReasonNotUtf8,
}

impl CloseError {
    /// The code to close the connection with in answer.
    pub fn code(self) -> u16 {
        match self {
            CloseError::Truncated | CloseError::InvalidCode(_) => PROTOCOL_ERROR,
            CloseError::ReasonNotUtf8 => INVALID_PAYLOAD,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            CloseError::Truncated => "one-byte close payload",
            CloseError::InvalidCode(_) => "invalid close code",
            CloseError::ReasonNotUtf8 => "close reason is not UTF-8",
        }
    }
}

impl fmt::Display for CloseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseError::InvalidCode(code) => write!(f, "invalid close code {code}"),
            other => f.write_str(other.reason()),
        }
    }
}

impl std::error::Error for CloseError {}

/// Reads a received close frame's (unmasked) payload: `None` for an empty
/// one, which means "no code" (reported as 1005 by APIs that need a code).
pub fn parse_close(payload: Bytes) -> Result<Option<(u16, Bytes)>, CloseError> {
    match payload.len() {
        0 => return Ok(None),
        1 => return Err(CloseError::Truncated),
        _ => {}
    }
    let code = u16::from_be_bytes([payload[0], payload[1]]);
    if !valid_received_code(code) {
        return Err(CloseError::InvalidCode(code));
    }
    let reason = payload.slice(2..);
    if std::str::from_utf8(&reason).is_err() {
        return Err(CloseError::ReasonNotUtf8);
    }
    Ok(Some((code, reason)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_is_the_code_in_network_order_then_the_reason() {
        assert_eq!(close_payload(1000, ""), b"\x03\xe8");
        assert_eq!(close_payload(1001, "bye"), b"\x03\xe9bye");
    }

    #[test]
    fn a_long_reason_is_cut_to_fit_a_control_frame() {
        let payload = close_payload(1000, &"a".repeat(300));
        assert_eq!(payload.len(), 125);
        assert_eq!(&payload[2..], "a".repeat(123).as_bytes());
    }

    #[test]
    fn a_long_reason_is_cut_on_a_char_boundary() {
        // Byte 123 falls in the middle of the 62nd "é".
        let payload = close_payload(4000, &"é".repeat(70));
        assert_eq!(payload.len(), 124);
        assert!(std::str::from_utf8(&payload[2..]).is_ok());
        // Three-byte chars that end exactly at the limit keep all 123 bytes.
        let payload = close_payload(4000, &"世".repeat(50));
        assert_eq!(payload.len(), 2 + 41 * 3);
    }

    #[test]
    fn valid_received_codes_follow_section_7_4() {
        let valid: Vec<u16> = (0..=u16::MAX).filter(|&c| valid_received_code(c)).collect();
        let mut expected: Vec<u16> = vec![1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014];
        expected.extend(3000..=4999);
        assert_eq!(valid, expected);
        for never in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, u16::MAX] {
            assert!(!valid_received_code(never), "{never}");
        }
    }

    #[test]
    fn parses_received_payloads() {
        assert_eq!(parse_close(Bytes::new()), Ok(None));
        assert_eq!(
            parse_close(Bytes::from_static(b"\x03\xe8done")),
            Ok(Some((1000, Bytes::from_static(b"done"))))
        );
        assert_eq!(
            parse_close(Bytes::from_static(b"\x0f\xa0")),
            Ok(Some((4000, Bytes::new())))
        );
    }

    #[test]
    fn refuses_bad_received_payloads_with_the_rfc_codes() {
        let one_byte = parse_close(Bytes::from_static(b"\x03")).unwrap_err();
        assert_eq!((one_byte, one_byte.code()), (CloseError::Truncated, 1002));
        let reserved = parse_close(Bytes::from_static(b"\x03\xed")).unwrap_err();
        assert_eq!((reserved, reserved.code()), (CloseError::InvalidCode(1005), 1002));
        let not_utf8 = parse_close(Bytes::from_static(b"\x03\xe8\xff")).unwrap_err();
        assert_eq!((not_utf8, not_utf8.code()), (CloseError::ReasonNotUtf8, 1007));
    }
}
