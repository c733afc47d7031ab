use std::fmt;

/// A bind URI that cannot be used, with the URI in every message so the
/// operator sees which of several binds failed.
#[derive(Debug)]
pub enum BindError {
    Invalid { uri: String, reason: String },
    Io { uri: String, source: std::io::Error },
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindError::Invalid { uri, reason } => write!(f, "{}: {reason}", redacted(uri)),
            BindError::Io { uri, source } => write!(f, "{}: {source}", redacted(uri)),
        }
    }
}

impl std::error::Error for BindError {}

/// The URI with the values of secret-bearing keys (`key_pem`, `cert_pem`,
/// `key_password_command`, and their numbered forms) replaced by their
/// length, so an error message or warning never prints a private key.
pub fn redacted(uri: &str) -> String {
    let Some((location, query)) = uri.split_once('?') else {
        return uri.to_string();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value))
                if ["key_pem", "cert_pem", "key_password_command"]
                    .contains(&name.split('.').next().unwrap_or(name)) =>
            {
                format!("{name}=[{} bytes]", value.len())
            }
            _ => pair.to_string(),
        })
        .collect();
    format!("{location}?{}", pairs.join("&"))
}

/// A request the engine answers itself, never reaching the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpError {
    BadRequest(&'static str),
    RequestTimeout,
    PayloadTooLarge,
    UriTooLong,
    HeadersTooLarge,
    NotImplemented(&'static str),
    VersionNotSupported,
    ExpectationFailed,
    Internal(&'static str),
    /// A request body could not be stored (disk full, out of descriptors).
    SpoolFailed,
    Unavailable(ShedReason),
}

/// Why the engine answered 503 instead of running the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShedReason {
    QueueFull,
    QueueTimeout,
    RequestTimeout,
    Connections,
    Uploads,
    /// `max_fibers` requests are already queued for or running on fibers.
    FiberLimit,
}

impl ShedReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ShedReason::QueueFull => "queue_full",
            ShedReason::QueueTimeout => "queue_timeout",
            ShedReason::RequestTimeout => "request_timeout",
            ShedReason::Connections => "connection_limit",
            ShedReason::Uploads => "upload_limit",
            ShedReason::FiberLimit => "fiber_limit",
        }
    }

    pub fn detail(self) -> &'static str {
        match self {
            ShedReason::QueueFull => "too many requests are waiting for the application",
            ShedReason::QueueTimeout => "the request waited too long for the application",
            ShedReason::RequestTimeout => "the application did not answer in time",
            ShedReason::Connections => "too many open connections",
            ShedReason::Uploads => "too many uploads in progress",
            ShedReason::FiberLimit => "too many requests are running on fibers",
        }
    }
}

impl HttpError {
    pub fn status(self) -> u16 {
        match self {
            HttpError::BadRequest(_) => 400,
            HttpError::RequestTimeout => 408,
            HttpError::PayloadTooLarge => 413,
            HttpError::UriTooLong => 414,
            HttpError::ExpectationFailed => 417,
            HttpError::HeadersTooLarge => 431,
            HttpError::Internal(_) | HttpError::SpoolFailed => 500,
            HttpError::NotImplemented(_) => 501,
            HttpError::VersionNotSupported => 505,
            HttpError::Unavailable(_) => 503,
        }
    }

    /// Short reason logged and sent as the body, so a client author can tell
    /// which rule the request broke.
    pub fn detail(self) -> &'static str {
        match self {
            HttpError::BadRequest(why) | HttpError::NotImplemented(why) | HttpError::Internal(why) => why,
            HttpError::RequestTimeout => "request not received in time",
            HttpError::PayloadTooLarge => "request body is larger than the configured limit",
            HttpError::UriTooLong => "request target is too long",
            HttpError::HeadersTooLarge => "request header block is too large",
            HttpError::VersionNotSupported => "HTTP version not supported",
            HttpError::ExpectationFailed => "unsupported Expect value",
            HttpError::SpoolFailed => "request body could not be stored",
            HttpError::Unavailable(reason) => reason.detail(),
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status(), self.detail())
    }
}

impl std::error::Error for HttpError {}
