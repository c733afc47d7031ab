//! Session tickets (TLS 1.2 tickets and TLS 1.3 resumption tickets) sealed
//! with keys every process of one server shares.
//!
//! rustls's own ticketer makes a random key per process, so in cluster
//! mode a client that comes back to another worker cannot resume. Here the
//! keys derive from one 32-byte secret made once per master process
//! (`seed_tickets`, called by the master before it forks; forked workers
//! inherit the memory): the key for period `n` (wall-clock seconds divided
//! by the rotation interval) is HKDF-SHA256(secret, n). Every worker
//! computes the same key for the same period without talking to the
//! others, keys change on the schedule, and nothing is written anywhere.
//! A ticket is accepted under the current and the previous period's key,
//! so it lives between one and two intervals. A hot restart (exec) makes a
//! new secret: tickets from before it are refused and those clients pay
//! one full handshake.
//!
//! Ticket layout: period (8 bytes, big-endian) | nonce (12) | AES-256-GCM
//! ciphertext and tag, the period bytes authenticated as associated data.

use crate::crypto::lib::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use crate::crypto::lib::hkdf;
use crate::crypto::lib::rand::{SecureRandom, SystemRandom};
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

static SECRET: OnceLock<[u8; 32]> = OnceLock::new();

/// Makes this process's ticket secret if it has none. The master calls it
/// before forking so that every worker has the same one; a process that
/// never called it makes its own on first use (single mode).
pub fn seed_tickets() -> bool {
    if SECRET.get().is_some() {
        return true;
    }
    let mut secret = [0u8; 32];
    if SystemRandom::new().fill(&mut secret).is_err() {
        return false;
    }
    // Another thread may have won the race; either secret is as good.
    let _ = SECRET.set(secret);
    true
}

const PERIOD_LEN: usize = 8;
const HEADER_LEN: usize = PERIOD_LEN + NONCE_LEN;

/// The `ProducesTickets` of every TLS listener of this process.
pub struct SharedTickets {
    interval: u64,
    rng: SystemRandom,
    /// The last two periods' keys, derived once per period.
    keys: Mutex<Vec<(u64, LessSafeKey)>>,
}

impl fmt::Debug for SharedTickets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedTickets")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl SharedTickets {
    /// `None` when the system has no randomness to make a secret with.
    pub fn new(interval: Duration) -> Option<SharedTickets> {
        if !seed_tickets() {
            return None;
        }
        Some(SharedTickets {
            interval: interval.as_secs().max(1),
            rng: SystemRandom::new(),
            keys: Mutex::new(Vec::with_capacity(2)),
        })
    }

    fn period_now(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        now / self.interval
    }

    fn derive(&self, period: u64) -> Option<LessSafeKey> {
        let secret = SECRET.get()?;
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"tsubame session tickets v1");
        let interval = self.interval.to_be_bytes();
        let period_bytes = period.to_be_bytes();
        let info: [&[u8]; 2] = [&interval, &period_bytes];
        let prk = salt.extract(secret);
        let okm = prk.expand(&info, &AES_256_GCM).ok()?;
        Some(LessSafeKey::new(UnboundKey::from(okm)))
    }

    /// Runs `f` with the key of `period`, which must be the current period
    /// or the one before it; derives and keeps the two as time moves on.
    fn with_key<R>(&self, period: u64, f: impl FnOnce(&LessSafeKey) -> Option<R>) -> Option<R> {
        let now = self.period_now();
        if period != now && period.checked_add(1) != Some(now) {
            return None;
        }
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.retain(|(p, _)| *p == now || p.checked_add(1) == Some(now));
        if !keys.iter().any(|(p, _)| *p == period) {
            let key = self.derive(period)?;
            keys.push((period, key));
        }
        let (_, key) = keys.iter().find(|(p, _)| *p == period)?;
        f(key)
    }
}

impl rustls::server::ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.interval).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let period = self.period_now();
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let period_bytes = period.to_be_bytes();
        let mut out = Vec::with_capacity(HEADER_LEN + plain.len() + AES_256_GCM.tag_len());
        out.extend_from_slice(&period_bytes);
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        self.with_key(period, |key| {
            key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(period_bytes), &mut body)
                .ok()
        })?;
        out.extend_from_slice(&body);
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < HEADER_LEN + AES_256_GCM.tag_len() {
            return None;
        }
        let period_bytes: [u8; PERIOD_LEN] = cipher[..PERIOD_LEN].try_into().ok()?;
        let nonce: [u8; NONCE_LEN] = cipher[PERIOD_LEN..HEADER_LEN].try_into().ok()?;
        let period = u64::from_be_bytes(period_bytes);
        let mut body = cipher[HEADER_LEN..].to_vec();
        let len = self.with_key(period, |key| {
            key.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(period_bytes), &mut body)
                .ok()
                .map(|plain| plain.len())
        })?;
        body.truncate(len);
        Some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;

    #[test]
    fn two_ticketers_of_one_process_open_each_others_tickets() {
        let a = SharedTickets::new(Duration::from_secs(3600)).unwrap();
        let b = SharedTickets::new(Duration::from_secs(3600)).unwrap();
        let ticket = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&ticket).unwrap(), b"session state");
        // Two tickets of the same state differ (fresh nonce).
        assert_ne!(a.encrypt(b"session state").unwrap(), ticket);
        // Tampering, truncation and another interval's keys are refused.
        let mut bad = ticket.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(b.decrypt(&bad).is_none());
        assert!(b.decrypt(&ticket[..10]).is_none());
        let other = SharedTickets::new(Duration::from_secs(1800)).unwrap();
        assert!(other.decrypt(&ticket).is_none());
    }

    #[test]
    fn tickets_of_the_previous_period_open_older_ones_do_not() {
        let t = SharedTickets::new(Duration::from_secs(3600)).unwrap();
        let now = t.period_now();
        let seal = |period: u64| {
            let key = t.derive(period).unwrap();
            let mut body = b"state".to_vec();
            key.seal_in_place_append_tag(
                Nonce::assume_unique_for_key([7; NONCE_LEN]),
                Aad::from(period.to_be_bytes()),
                &mut body,
            )
            .unwrap();
            [&period.to_be_bytes()[..], &[7; NONCE_LEN], &body].concat()
        };
        assert_eq!(t.decrypt(&seal(now - 1)).unwrap(), b"state");
        assert!(t.decrypt(&seal(now - 2)).is_none());
        assert!(t.decrypt(&seal(now + 1)).is_none());
    }
}
