//! The two kinds of failure: a run that cannot start (bad arguments, a file
//! that cannot be read, a URL nothing answers on), reported as one line and
//! a non-zero exit; and a request that failed during a run, counted by kind
//! in the report.

use std::fmt;
use std::io;

/// Why a run could not start or its report could not be written.
#[derive(Debug)]
pub enum Error {
    /// A flag or value the user gave is wrong.
    Usage(String),
    /// A line of a targets file is wrong.
    Targets { file: String, line: usize, message: String },
    /// A file named on the command line could not be read or written.
    File {
        path: String,
        action: &'static str,
        source: io::Error,
    },
    /// The first connection to the URL failed.
    Unreachable { url: String, reason: String },
}

impl Error {
    pub fn usage(message: impl Into<String>) -> Self {
        Error::Usage(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(message) => f.write_str(message),
            Error::Targets { file, line, message } => write!(f, "{file}:{line}: {message}"),
            Error::File { path, action, source } => write!(f, "cannot {action} {path}: {}", io_message(source)),
            Error::Unreachable { url, reason } => write!(f, "cannot connect to {url}: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// `io::Error`'s message without the " (os error N)" tail.
pub fn io_message(err: &io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// How one request failed. The report counts each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Failure {
    /// Nothing listens on the address (ECONNREFUSED).
    ConnectRefused,
    /// The unix socket file does not exist.
    SocketNotFound,
    /// Any other error while connecting.
    ConnectFailed,
    /// No whole response within `--timeout`.
    Timeout,
    /// The peer reset the connection (ECONNRESET).
    Reset,
    /// Writing the request failed because the peer had closed (EPIPE).
    BrokenPipe,
    /// The connection closed before the whole response arrived.
    Closed,
    /// The response was not valid HTTP/1.x.
    InvalidResponse,
    /// Any other I/O error.
    Io,
}

impl Failure {
    pub const ALL: [Failure; 9] = [
        Failure::ConnectRefused,
        Failure::SocketNotFound,
        Failure::ConnectFailed,
        Failure::Timeout,
        Failure::Reset,
        Failure::BrokenPipe,
        Failure::Closed,
        Failure::InvalidResponse,
        Failure::Io,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn label(self) -> &'static str {
        match self {
            Failure::ConnectRefused => "connection refused",
            Failure::SocketNotFound => "socket not found",
            Failure::ConnectFailed => "connect failed",
            Failure::Timeout => "timeout",
            Failure::Reset => "connection reset",
            Failure::BrokenPipe => "broken pipe",
            Failure::Closed => "connection closed early",
            Failure::InvalidResponse => "invalid response",
            Failure::Io => "i/o error",
        }
    }

    /// Classifies an I/O error; `connecting` tells a failed connect from a
    /// failure on an open connection.
    pub fn from_io(err: &io::Error, connecting: bool) -> Failure {
        use io::ErrorKind as K;
        match err.kind() {
            K::ConnectionRefused => Failure::ConnectRefused,
            K::NotFound if connecting => Failure::SocketNotFound,
            K::TimedOut | K::WouldBlock => Failure::Timeout,
            K::ConnectionReset | K::ConnectionAborted => Failure::Reset,
            K::BrokenPipe => Failure::BrokenPipe,
            K::UnexpectedEof => Failure::Closed,
            _ if connecting => Failure::ConnectFailed,
            _ => Failure::Io,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_match_all() {
        for (i, f) in Failure::ALL.iter().enumerate() {
            assert_eq!(f.index(), i);
        }
    }

    #[test]
    fn classifies_io_errors() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(Failure::from_io(&refused, true), Failure::ConnectRefused);
        let missing = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(Failure::from_io(&missing, true), Failure::SocketNotFound);
        assert_eq!(Failure::from_io(&missing, false), Failure::Io);
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(Failure::from_io(&reset, false), Failure::Reset);
        let other = io::Error::from(io::ErrorKind::AddrNotAvailable);
        assert_eq!(Failure::from_io(&other, true), Failure::ConnectFailed);
    }

    #[test]
    fn io_message_drops_os_error_tail() {
        let err = io::Error::from_raw_os_error(2);
        assert_eq!(io_message(&err), "No such file or directory");
    }

    #[test]
    fn targets_error_names_file_and_line() {
        let err = Error::Targets {
            file: "t.txt".into(),
            line: 3,
            message: "bad".into(),
        };
        assert_eq!(err.to_string(), "t.txt:3: bad");
    }
}
