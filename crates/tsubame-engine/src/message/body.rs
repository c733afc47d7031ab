//! Collecting a request body: in memory while small, in an unlinked temp
//! file once it passes the spool threshold, so a large upload costs disk,
//! not heap, and the application thread gets it whole. A body past the
//! threshold whose length is declared may still stay in memory while the
//! bodies held that way together fit `upload_memory`: a bounded amount of
//! heap buys every upload the file system's work (writing, then reading
//! back, a temp file per request: half of the I/O thread's time on 1 MiB
//! uploads).

use crate::error::{HttpError, ShedReason};
use bytes::{Bytes, BytesMut};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub enum Body {
    Empty,
    Memory(Bytes),
    /// Positioned at the start; the file has no name left on disk.
    File {
        file: File,
        len: u64,
    },
}

impl Body {
    pub fn len(&self) -> u64 {
        match self {
            Body::Empty => 0,
            Body::Memory(b) => b.len() as u64,
            Body::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Caps how many bodies are written to disk at once, so a flood of large
/// uploads cannot fill the disk or its bandwidth all together.
#[derive(Debug)]
pub struct SpoolGate {
    active: AtomicUsize,
    max: usize,
    /// Where the temp files go; `None` is `$TMPDIR`.
    dir: Option<PathBuf>,
    /// Bytes of bodies past the threshold that may be held in memory at
    /// once (`upload_memory`), and how many are.
    memory_budget: u64,
    memory_used: AtomicU64,
}

impl SpoolGate {
    pub fn new(max: usize) -> Arc<SpoolGate> {
        SpoolGate::with_dir(max, None)
    }

    pub fn with_dir(max: usize, dir: Option<PathBuf>) -> Arc<SpoolGate> {
        SpoolGate::with_memory(max, dir, 0)
    }

    pub fn with_memory(max: usize, dir: Option<PathBuf>, memory_budget: u64) -> Arc<SpoolGate> {
        Arc::new(SpoolGate {
            active: AtomicUsize::new(0),
            max,
            dir,
            memory_budget,
            memory_used: AtomicU64::new(0),
        })
    }

    /// Holds `len` bytes of the memory budget, if that much is left.
    fn reserve_memory(self: &Arc<Self>, len: u64) -> Option<MemoryPermit> {
        let budget = self.memory_budget;
        self.memory_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(len).filter(|total| *total <= budget)
            })
            .ok()
            .map(|_| MemoryPermit {
                gate: self.clone(),
                len,
            })
    }

    /// Bytes of the memory budget held right now.
    pub fn memory_used(&self) -> u64 {
        self.memory_used.load(Ordering::Acquire)
    }

    fn enter(self: &Arc<Self>) -> Result<SpoolPermit, HttpError> {
        let max = self.max;
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .map(|_| SpoolPermit(self.clone()))
            .map_err(|_| HttpError::Unavailable(ShedReason::Uploads))
    }

    pub fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }
}

struct SpoolPermit(Arc<SpoolGate>);

impl Drop for SpoolPermit {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A share of `upload_memory`, given back when the body it paid for is
/// dropped (the `Bytes` own it, so every clone keeps it).
#[derive(Debug)]
struct MemoryPermit {
    gate: Arc<SpoolGate>,
    len: u64,
}

impl Drop for MemoryPermit {
    fn drop(&mut self) {
        self.gate.memory_used.fetch_sub(self.len, Ordering::AcqRel);
    }
}

/// A body held under the memory budget.
struct Budgeted {
    bytes: Bytes,
    _permit: MemoryPermit,
}

impl AsRef<[u8]> for Budgeted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

pub struct BodySink {
    memory: BytesMut,
    memory_permit: Option<MemoryPermit>,
    file: Option<File>,
    len: u64,
    threshold: u64,
    limit: Option<u64>,
    gate: Arc<SpoolGate>,
    _permit: Option<SpoolPermit>,
}

impl BodySink {
    /// `expected` is the Content-Length when known, so a body that will be
    /// spooled goes straight to disk and one that fits is allocated once.
    pub fn new(
        expected: Option<u64>,
        threshold: u64,
        limit: Option<u64>,
        gate: &Arc<SpoolGate>,
    ) -> Result<Self, HttpError> {
        let mut sink = BodySink {
            memory: BytesMut::new(),
            memory_permit: None,
            file: None,
            len: 0,
            threshold,
            limit,
            gate: gate.clone(),
            _permit: None,
        };
        match expected {
            Some(n) if n > threshold => match sink.gate.reserve_memory(n) {
                Some(permit) => {
                    sink.memory.reserve(n as usize);
                    sink.memory_permit = Some(permit);
                }
                None => {
                    sink._permit = Some(sink.gate.enter()?);
                    sink.file = Some(spool_file(&sink.gate)?);
                }
            },
            Some(n) => sink.memory.reserve(n as usize),
            None => {}
        }
        Ok(sink)
    }

    pub fn push(&mut self, data: &[u8]) -> Result<(), HttpError> {
        self.len += data.len() as u64;
        if self.limit.is_some_and(|limit| self.len > limit) {
            return Err(HttpError::PayloadTooLarge);
        }
        if self.file.is_none() && self.len > self.threshold && self.memory_permit.is_none() {
            self._permit = Some(self.gate.enter()?);
            let mut file = spool_file(&self.gate)?;
            file.write_all(&self.memory).map_err(spool_error)?;
            self.memory = BytesMut::new();
            self.file = Some(file);
        }
        match &mut self.file {
            // A write to a fresh temp file lands in the page cache; doing it
            // inline costs less than a hop to a blocking thread per chunk.
            Some(file) => file.write_all(data).map_err(spool_error),
            None => {
                self.memory.extend_from_slice(data);
                Ok(())
            }
        }
    }

    pub fn finish(self) -> Result<Body, HttpError> {
        match self.file {
            Some(mut file) => {
                file.flush().map_err(spool_error)?;
                file.seek(SeekFrom::Start(0)).map_err(spool_error)?;
                Ok(Body::File { file, len: self.len })
            }
            None if self.len == 0 => Ok(Body::Empty),
            None => Ok(Body::Memory(match self.memory_permit {
                Some(permit) => Bytes::from_owner(Budgeted {
                    bytes: self.memory.freeze(),
                    _permit: permit,
                }),
                None => self.memory.freeze(),
            })),
        }
    }
}

fn spool_file(gate: &SpoolGate) -> Result<File, HttpError> {
    match &gate.dir {
        Some(dir) => tempfile::tempfile_in(dir),
        None => tempfile::tempfile(),
    }
    .map_err(spool_error)
}

fn spool_error(err: std::io::Error) -> HttpError {
    crate::log::error(&format!("cannot spool request body to disk: {err}"));
    HttpError::SpoolFailed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn small_bodies_stay_in_memory() {
        let mut sink = BodySink::new(Some(5), 10, None, &SpoolGate::new(1)).unwrap();
        sink.push(b"hello").unwrap();
        assert!(matches!(sink.finish().unwrap(), Body::Memory(b) if &b[..] == b"hello"));
    }

    #[test]
    fn bodies_past_the_threshold_spool_to_disk_intact() {
        let mut sink = BodySink::new(None, 10, None, &SpoolGate::new(1)).unwrap();
        for _ in 0..100 {
            sink.push(b"0123456789").unwrap();
        }
        match sink.finish().unwrap() {
            Body::File { mut file, len } => {
                assert_eq!(len, 1000);
                let mut read = Vec::new();
                file.read_to_end(&mut read).unwrap();
                assert_eq!(read, b"0123456789".repeat(100));
            }
            other => panic!("expected a file, got {other:?}"),
        }
    }

    #[test]
    fn the_spool_gate_caps_concurrent_disk_bodies() {
        let gate = SpoolGate::new(1);
        let first = BodySink::new(Some(100), 10, None, &gate).unwrap();
        assert_eq!(gate.active(), 1);
        let second = BodySink::new(Some(100), 10, None, &gate);
        assert_eq!(second.err(), Some(HttpError::Unavailable(ShedReason::Uploads)));
        drop(first);
        assert_eq!(gate.active(), 0);
        assert!(BodySink::new(Some(100), 10, None, &gate).is_ok());
    }

    #[test]
    fn bodies_spool_into_the_upload_dir() {
        let dir = tempfile::tempdir().unwrap();
        let gate = SpoolGate::with_dir(1, Some(dir.path().to_path_buf()));
        let missing = SpoolGate::with_dir(1, Some(dir.path().join("gone")));
        let mut sink = BodySink::new(Some(100), 10, None, &gate).unwrap();
        sink.push(&[b'x'; 100]).unwrap();
        assert!(matches!(sink.finish().unwrap(), Body::File { len: 100, .. }));
        assert_eq!(
            BodySink::new(Some(100), 10, None, &missing).err(),
            Some(HttpError::SpoolFailed)
        );
    }

    #[test]
    fn declared_bodies_past_the_threshold_stay_in_memory_within_the_budget() {
        let gate = SpoolGate::with_memory(1, None, 250);
        let mut first = BodySink::new(Some(100), 10, None, &gate).unwrap();
        first.push(&[b'a'; 100]).unwrap();
        let first = first.finish().unwrap();
        assert!(matches!(&first, Body::Memory(b) if b.len() == 100));
        let second = BodySink::new(Some(100), 10, None, &gate).unwrap();
        assert_eq!(gate.memory_used(), 200);
        let third = BodySink::new(Some(100), 10, None, &gate).unwrap();
        assert_eq!(gate.active(), 1, "over the budget: spooled to disk");
        drop((second, third));
        assert_eq!(gate.memory_used(), 100, "held until the body itself is dropped");
        drop(first);
        assert_eq!(gate.memory_used(), 0);
    }

    #[test]
    fn the_limit_gives_413() {
        let mut sink = BodySink::new(None, 10, Some(15), &SpoolGate::new(1)).unwrap();
        sink.push(b"0123456789").unwrap();
        assert_eq!(sink.push(b"0123456789").unwrap_err(), HttpError::PayloadTooLarge);
    }
}
