//! The access log (`access_log FORMAT`): lines are formatted on the
//! connection's I/O thread and handed to a writer thread over a bounded
//! channel, so a slow disk or a full pipe never holds up a request. When
//! the channel is full the line is dropped and counted
//! (`tsubame_access_log_dropped_total`). HUP reopens the file (log
//! rotation): the writer reopens it before its next write.

use crate::observe::log_format::{format_line, Format, LogLine};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Lines that may wait for the writer; about 2 MB of typical lines.
const CAPACITY: usize = 8192;
/// Lines written with one `write` at most.
const BATCH: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Stdout,
    File(PathBuf),
}

/// What the writer and the I/O threads share.
#[derive(Debug, Default)]
struct Counters {
    queued: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
    reopen: AtomicBool,
}

#[derive(Debug)]
pub struct AccessLog {
    format: Format,
    worker: Option<u32>,
    tx: SyncSender<Vec<u8>>,
    counters: Arc<Counters>,
}

#[derive(Debug)]
pub struct OpenError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot open the access log {}: {}", self.path.display(), self.source)
    }
}

enum Sink {
    Stdout,
    File { path: PathBuf, file: File },
}

fn open(path: &PathBuf) -> Result<File, OpenError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| OpenError {
            path: path.clone(),
            source,
        })
}

impl AccessLog {
    /// Opens the file now (a path that cannot be written fails the boot)
    /// and starts the writer thread.
    pub fn start(format: Format, destination: Destination, worker: Option<u32>) -> Result<AccessLog, OpenError> {
        let sink = match destination {
            Destination::Stdout => Sink::Stdout,
            Destination::File(path) => Sink::File {
                file: open(&path)?,
                path,
            },
        };
        let (tx, rx) = sync_channel(CAPACITY);
        let counters = Arc::new(Counters::default());
        let theirs = counters.clone();
        std::thread::Builder::new()
            .name("tsubame-log".to_string())
            .spawn(move || {
                // As on the I/O threads: signals go to a Ruby thread,
                // whose handlers (TERM, HUP) are what the server obeys.
                crate::sys::block_all_signals();
                write_lines(rx, sink, &theirs)
            })
            .map_err(|source| OpenError {
                path: PathBuf::from("(writer thread)"),
                source,
            })?;
        Ok(AccessLog {
            format,
            worker,
            tx,
            counters,
        })
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Formats and queues one line; never blocks.
    pub fn write(&self, line: &LogLine<'_>) {
        let bytes = format_line(self.format, line, self.worker);
        match self.tx.try_send(bytes) {
            Ok(()) => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Lines dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    pub fn written(&self) -> u64 {
        self.counters.written.load(Ordering::Relaxed)
    }

    /// HUP: the file is opened again by name before the next write.
    pub fn reopen(&self) {
        self.counters.reopen.store(true, Ordering::Release);
    }

    /// Waits up to `limit` for the writer to catch up (at a stop, so the
    /// last requests' lines are not lost when the process exits).
    pub fn flush(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while self.counters.written.load(Ordering::Acquire) < self.counters.queued.load(Ordering::Acquire)
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The writer thread: takes what is queued (up to a batch), writes it with
/// one call, and ends when the engine drops its sender.
fn write_lines(rx: Receiver<Vec<u8>>, mut sink: Sink, counters: &Counters) {
    let mut batch = Vec::with_capacity(64 * 1024);
    while let Ok(first) = rx.recv() {
        batch.clear();
        batch.extend_from_slice(&first);
        let mut lines: u64 = 1;
        while lines < BATCH as u64 {
            match rx.try_recv() {
                Ok(line) => {
                    batch.extend_from_slice(&line);
                    lines += 1;
                }
                Err(_) => break,
            }
        }
        if counters.reopen.swap(false, Ordering::AcqRel) {
            reopen(&mut sink);
        }
        let result = match &mut sink {
            Sink::Stdout => std::io::stdout().lock().write_all(&batch),
            Sink::File { file, .. } => file.write_all(&batch),
        };
        if let Err(e) = result {
            crate::log::error(&format!("access log: {e}; {lines} lines lost"));
        }
        counters.written.fetch_add(lines, Ordering::Release);
    }
}

fn reopen(sink: &mut Sink) {
    if let Sink::File { path, file } = sink {
        match open(path) {
            Ok(new) => *file = new,
            Err(e) => crate::log::error(&format!("{e}; still writing to the old file")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::head::Version;

    fn line<'a>() -> LogLine<'a> {
        LogLine {
            peer: "127.0.0.1",
            method: b"GET",
            target: b"/a",
            version: Version::Http11,
            status: 200,
            body_bytes: 5,
            duration: Duration::from_micros(1500),
            queue_wait: None,
            app: None,
            request_id: None,
            user_agent: None,
            referer: None,
        }
    }

    #[test]
    fn lines_reach_the_file_and_a_reopen_follows_a_rename() {
        let dir = std::env::temp_dir().join(format!("tsubame-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let log = AccessLog::start(Format::Common, Destination::File(path.clone()), None).unwrap();
        log.write(&line());
        log.flush(Duration::from_secs(5));
        std::fs::rename(&path, dir.join("access.log.1")).unwrap();
        log.reopen();
        log.write(&line());
        log.flush(Duration::from_secs(5));
        let old = std::fs::read_to_string(dir.join("access.log.1")).unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        assert_eq!(old.lines().count(), 1, "{old}");
        assert_eq!(new.lines().count(), 1, "{new}");
        assert!(new.contains("\"GET /a HTTP/1.1\" 200 5"), "{new}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_path_is_an_error_naming_it() {
        let e = AccessLog::start(
            Format::Json,
            Destination::File(PathBuf::from("/nonexistent-dir/x.log")),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir/x.log"), "{e}");
    }
}
