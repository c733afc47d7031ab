use std::time::Duration;

/// Every setting the engine reads. The Ruby side (`Tsubame::Options#native`)
/// builds this whole from defaults, the config file and CLI flags, so the
/// defaults below only matter to Rust callers such as the tests.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub binds: Vec<String>,
    pub backlog: u32,
    pub io_threads: usize,
    /// The application thread pool's size, run by the Ruby side; kept here
    /// so the one options structure describes the whole server.
    pub threads_min: usize,
    pub threads_max: usize,
    /// Largest request body accepted; `None` means no limit.
    pub max_body_size: Option<u64>,
    /// Bodies larger than this go to an unlinked temp file instead of memory.
    pub spool_threshold: u64,
    pub max_uri_size: usize,
    pub max_header_size: usize,
    pub max_headers: usize,
    /// How long a new connection may take to deliver a complete header block.
    pub first_data_timeout: Duration,
    /// How long an idle keep-alive connection is kept open.
    pub persistent_timeout: Duration,
    /// Longest pause allowed between two reads of a request body.
    pub body_timeout: Duration,
    /// How long a graceful stop waits for in-flight requests.
    pub drain_timeout: Duration,
    pub log_requests: bool,
    pub tcp_nodelay: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            binds: vec!["tcp://0.0.0.0:9292".to_string()],
            backlog: 1024,
            io_threads: 1,
            threads_min: 0,
            threads_max: 5,
            max_body_size: None,
            spool_threshold: 256 * 1024,
            max_uri_size: 12 * 1024,
            max_header_size: 112 * 1024,
            max_headers: 100,
            first_data_timeout: Duration::from_secs(30),
            persistent_timeout: Duration::from_secs(20),
            body_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
            log_requests: false,
            tcp_nodelay: true,
        }
    }
}
