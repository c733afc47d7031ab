//! Incremental UTF-8 validation for text messages that arrive in fragments.
//!
//! RFC 6455 §8.1 lets an endpoint fail the connection as soon as it sees
//! a text message that cannot be valid UTF-8, and §5.6 allows a code point
//! to be split across fragments. So each fragment is checked as it
//! arrives, and only the (at most 3) bytes of a sequence cut off at the
//! fragment's end are carried to the next one: a message whose first
//! fragment already holds an invalid sequence fails at that fragment.

use std::fmt;

/// The bytes seen so far are not the prefix of any UTF-8 text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidUtf8;

impl fmt::Display for InvalidUtf8 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid UTF-8")
    }
}

impl std::error::Error for InvalidUtf8 {}

/// Validates a byte stream fed in pieces. `std::str::from_utf8` does the
/// work (it is vectorised); this only stitches sequences across pieces.
#[derive(Debug, Default, Clone)]
pub struct Utf8Validator {
    /// The start of a sequence the previous piece ended inside of. Always a
    /// valid prefix: `from_utf8` reports a prefix that can no longer be
    /// completed (E0 80, F4 90, ...) as an error, not as a cut-off.
    pending: [u8; 4],
    pending_len: usize,
}

impl Utf8Validator {
    pub fn new() -> Utf8Validator {
        Utf8Validator::default()
    }

    /// Checks the next piece. Fails as soon as the bytes seen so far cannot
    /// begin valid UTF-8, whatever comes after them.
    pub fn feed(&mut self, mut piece: &[u8]) -> Result<(), InvalidUtf8> {
        if self.pending_len > 0 {
            let width = sequence_width(self.pending[0]);
            let take = (width - self.pending_len).min(piece.len());
            let have = self.pending_len + take;
            self.pending[self.pending_len..have].copy_from_slice(&piece[..take]);
            match std::str::from_utf8(&self.pending[..have]) {
                Ok(_) => {
                    self.pending_len = 0;
                    piece = &piece[take..];
                }
                // Still cut off: `piece` was too short to finish it.
                Err(e) if e.error_len().is_none() => {
                    self.pending_len = have;
                    return Ok(());
                }
                Err(_) => return Err(InvalidUtf8),
            }
        }
        match std::str::from_utf8(piece) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                let rest = &piece[e.valid_up_to()..];
                self.pending[..rest.len()].copy_from_slice(rest);
                self.pending_len = rest.len();
                Ok(())
            }
            Err(_) => Err(InvalidUtf8),
        }
    }

    /// The stream has ended: a sequence still cut off is invalid.
    pub fn finish(&self) -> Result<(), InvalidUtf8> {
        if self.pending_len == 0 {
            Ok(())
        } else {
            Err(InvalidUtf8)
        }
    }
}

/// The length of the sequence a lead byte starts. Only called on bytes
/// `from_utf8` accepted as the start of a sequence (C2..=F4).
fn sequence_width(lead: u8) -> usize {
    match lead {
        0xF0.. => 4,
        0xE0.. => 3,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(pieces: &[&[u8]]) -> Result<(), InvalidUtf8> {
        let mut v = Utf8Validator::new();
        for piece in pieces {
            v.feed(piece)?;
        }
        v.finish()
    }

    #[test]
    fn whole_text_is_valid() {
        assert_eq!(feed_all(&["Hello, 世界 🦀".as_bytes()]), Ok(()));
        assert_eq!(feed_all(&[b""]), Ok(()));
    }

    #[test]
    fn every_split_of_multibyte_text_is_valid() {
        let text = "aé世🦀z".as_bytes();
        for i in 0..=text.len() {
            for j in i..=text.len() {
                assert_eq!(
                    feed_all(&[&text[..i], &text[i..j], &text[j..]]),
                    Ok(()),
                    "split at {i},{j}"
                );
            }
        }
        // One byte at a time, the hardest case for the carry.
        let mut v = Utf8Validator::new();
        for b in text {
            v.feed(std::slice::from_ref(b)).unwrap();
        }
        assert_eq!(v.finish(), Ok(()));
    }

    #[test]
    fn invalid_bytes_fail_in_the_piece_that_holds_them() {
        let mut v = Utf8Validator::new();
        assert_eq!(v.feed(b"ok \xff"), Err(InvalidUtf8));
        // A lone continuation byte.
        assert_eq!(Utf8Validator::new().feed(b"\x80"), Err(InvalidUtf8));
        // An overlong encoding of '/'.
        assert_eq!(Utf8Validator::new().feed(b"\xc0\xaf"), Err(InvalidUtf8));
        // A UTF-16 surrogate (U+D800) encoded as UTF-8.
        assert_eq!(Utf8Validator::new().feed(b"\xed\xa0\x80"), Err(InvalidUtf8));
    }

    #[test]
    fn a_prefix_that_cannot_be_completed_fails_before_the_next_piece() {
        // E0 80 can only start an overlong form; F4 90 would be above U+10FFFF.
        assert_eq!(Utf8Validator::new().feed(b"a\xe0\x80"), Err(InvalidUtf8));
        assert_eq!(Utf8Validator::new().feed(b"\xf4\x90"), Err(InvalidUtf8));
        // A valid prefix whose continuation in the next piece is wrong.
        let mut v = Utf8Validator::new();
        assert_eq!(v.feed(b"\xce"), Ok(()));
        assert_eq!(v.feed(b"\x41"), Err(InvalidUtf8));
        let mut v = Utf8Validator::new();
        assert_eq!(v.feed(b"\xf0\x9f"), Ok(()));
        assert_eq!(v.feed(b"\xa6"), Ok(()));
        assert_eq!(v.feed(b"\xc0"), Err(InvalidUtf8));
    }

    #[test]
    fn a_sequence_cut_off_at_the_end_is_invalid() {
        assert_eq!(feed_all(&[b"abc\xe4\xb8"]), Err(InvalidUtf8));
        assert_eq!(feed_all(&[b"\xf0", b"\x9f", b"\xa6"]), Err(InvalidUtf8));
    }

    #[test]
    fn the_rest_of_a_piece_after_a_completed_sequence_is_checked() {
        let mut v = Utf8Validator::new();
        assert_eq!(v.feed(b"\xe4"), Ok(()));
        assert_eq!(v.feed(b"\xb8\x96 ok \xff"), Err(InvalidUtf8));
    }
}
