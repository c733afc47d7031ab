//! `Tsubame::Native::Request`: one request handed to a Ruby thread. Builds
//! its env, takes the app's response, and implements `rack.hijack` (the
//! object itself is the env's `rack.hijack` callable, so no Proc is
//! allocated per request).

use crate::ffi::{os_path, pinned_bytes, release_pinned, with_bytes, with_elements, without_gvl, PIN_AT};
use crate::rack_env;
use crate::stream::Stream;
use bytes::Bytes;
use magnus::value::{Opaque, ReprValue};
use magnus::{
    gc::Marker, prelude::*, typed_data::DataTypeFunctions, Error, RArray, RHash, RModule, RString, Ruby, Value,
};
use std::cell::{Cell, RefCell};
use std::os::fd::IntoRawFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tsubame_engine::dispatch::reply::UpgradeKind;
use tsubame_engine::dispatch::stream_channel::stream_channel;
use tsubame_engine::message::body::Body;
use tsubame_engine::message::head::Version;
use tsubame_engine::message::response::{status_has_no_body, FinishedHead, ResponseHead};
use tsubame_engine::{Job, Reply};

/// Body bytes allowed to wait for a slow client before `write` blocks.
const STREAM_BUFFER: usize = 256 * 1024;

#[derive(magnus::TypedData)]
#[magnus(class = "Tsubame::Native::Request", free_immediately, size, mark)]
pub struct Request {
    /// The job as the queue handed it over, until the final reply: dropped
    /// then, from the app thread's cache, and not when Ruby's GC frees this
    /// object a few thousand requests later, when every cache line the job
    /// spans (and its connection's and state's reference counts) is a miss
    /// of the sweep. The object the sweep frees is then these few words.
    job: RefCell<Option<Box<Job>>>,
    reply: RefCell<Option<oneshot::Sender<Reply>>>,
    version: Version,
    is_head: bool,
    keep_alive: bool,
    hijacked: Cell<bool>,
    env: Cell<Option<Opaque<RHash>>>,
    seq: u64,
    inline: Option<Arc<tsubame_engine::inline::Inline>>,
}

impl DataTypeFunctions for Request {
    fn mark(&self, marker: &Marker) {
        if let Some(env) = self.env.get() {
            marker.mark(env);
        }
    }
}

/// A request's env and its `rack.input` as built (the app may replace the
/// env's).
pub struct BuiltEnv {
    pub env: RHash,
    pub input: Value,
}

fn arg_error(ruby: &Ruby, message: String) -> Error {
    Error::new(ruby.exception_arg_error(), message)
}

fn already_answered(ruby: &Ruby) -> Error {
    Error::new(ruby.exception_runtime_error(), "response already sent for this request")
}

impl Request {
    pub fn new(mut job: Box<Job>, inline: Option<Arc<tsubame_engine::inline::Inline>>) -> Request {
        // Kept apart from the job: early hints replace it, and it goes with
        // the final reply.
        Request {
            reply: RefCell::new(job.reply.take()),
            version: job.head.version,
            is_head: job.head.is_head(),
            keep_alive: job.keep_alive,
            hijacked: Cell::new(false),
            env: Cell::new(None),
            seq: job.seq,
            job: RefCell::new(Some(job)),
            inline,
        }
    }

    /// Numbers the request for the timeout watchdog (`Server#next_timeout`).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Moves this request's deadline to `seconds` after it arrived (nil
    /// removes it), for the endpoint that legitimately needs longer.
    pub fn set_deadline(ruby: &Ruby, rb_self: &Self, seconds: Option<f64>) -> Result<(), Error> {
        let deadline = match seconds {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
            Some(s) => {
                return Err(arg_error(
                    ruby,
                    format!("deadline must be a positive number of seconds, got {s}"),
                ))
            }
        };
        // Once answered there is no deadline left to move.
        rb_self.with_job(|job| job.state.set_deadline(deadline));
        Ok(())
    }

    /// Seconds left before the deadline (negative once past), or nil (none
    /// set, or the request is answered).
    pub fn deadline(&self) -> Option<f64> {
        self.with_job(|job| {
            let deadline = job.state.deadline()?;
            Some(deadline.as_secs_f64() - job.received_at.elapsed().as_secs_f64())
        })?
    }

    /// `f` on the job while the request has it (until its final reply).
    fn with_job<R>(&self, f: impl FnOnce(&Job) -> R) -> Option<R> {
        self.job.try_borrow().ok()?.as_deref().map(f)
    }

    /// Builds the env on a copy of one of `templates` (the per-server
    /// constant entries, `Native.env_templates`).
    pub fn env(ruby: &Ruby, rb_self: magnus::typed_data::Obj<Self>, templates: RArray) -> Result<RHash, Error> {
        Self::build_env(ruby, rb_self, templates).map(|built| built.env)
    }

    /// `env`, with what the native app loop (`app_loop.rs`) needs besides.
    pub fn build_env(
        ruby: &Ruby,
        rb_self: magnus::typed_data::Obj<Self>,
        templates: RArray,
    ) -> Result<BuiltEnv, Error> {
        // Only Ruby's allocations run while this is borrowed (no app code),
        // and the GC's mark reads `env`, not the job.
        let mut job = rb_self.job.try_borrow_mut().ok();
        let job = match job.as_mut().and_then(|job| job.as_mut()) {
            Some(job) if rb_self.env.get().is_none() => job,
            _ => {
                return Err(Error::new(
                    ruby.exception_runtime_error(),
                    "env already built for this request",
                ))
            }
        };
        let body = std::mem::replace(&mut job.body, Body::Empty);
        let input = crate::input::for_body(ruby, body);
        let env = rack_env::build(ruby, templates, &job.head, &job.conn, input, rb_self.as_value())?;
        rb_self.env.set(Some(env.into()));
        Ok(BuiltEnv { env, input })
    }

    fn send(&self, ruby: &Ruby, reply: Reply) -> Result<(), Error> {
        let sender = self.reply.borrow_mut().take().ok_or_else(|| already_answered(ruby))?;
        // The final reply: the job goes now (see `job`), and before the
        // connection reads on, so its read buffer is free to reuse.
        if !matches!(reply, Reply::Interim { .. }) {
            if let Ok(mut job) = self.job.try_borrow_mut() {
                drop(job.take());
            }
        }
        // Inline: whether this reply runs a turn of the runtime at once,
        // and the clock if the decision read it (the baton's release after
        // a reply that does not drive is timed with the same read).
        let (drive, now) = match (&self.inline, &reply) {
            (None, _) => (false, None),
            // A file body never drives: one turn of `sendfile` writes until
            // the socket is full (megabytes on loopback), work that belongs
            // after the request, at the thread's next drive.
            (Some(_), Reply::File { .. }) => (false, None),
            // A whole response waits for the next drive, unless the last
            // one was a while ago.
            (Some(inline), Reply::Full { .. } | Reply::Shed(_)) => {
                let now = inline.now_ns();
                (inline.drive_due(now), Some(now))
            }
            // A stream's head, a hijack, an upgrade, early hints: more
            // follows from this thread, or it waits for the connection's
            // answer.
            (Some(_), _) => (true, None),
        };
        // A closed receiver means the engine already dropped the connection
        // (a stop that timed out); nothing is left to tell.
        match &self.inline {
            Some(inline) if drive => {
                // The turn of the runtime runs other connections' tasks
                // too: without the GVL, so other Ruby threads run meanwhile.
                let mut parts = Some((sender, reply));
                let (_, raised) = without_gvl(
                    || {
                        if let Some((sender, reply)) = parts.take() {
                            inline.pass(true, None, sender, reply);
                        }
                    },
                    || {},
                );
                // Ruby had an interrupt pending and never ran the closure:
                // the reply still goes, the plain way.
                if let Some((sender, reply)) = parts.take() {
                    let _ = sender.send(reply);
                }
                raised
            }
            Some(inline) => {
                inline.pass(false, now, sender, reply);
                Ok(())
            }
            None => {
                let _ = sender.send(reply);
                Ok(())
            }
        }
    }

    /// Sends the response if it can be sent whole (an Array body, a file
    /// body, or no body at all) and returns true. Otherwise returns a
    /// `Stream` the caller feeds the body into.
    pub fn respond(ruby: &Ruby, rb_self: &Self, status: Value, headers: Value, body: Value) -> Result<Value, Error> {
        release_pinned();
        if let Some(env) = rb_self.env.get() {
            rack_env::note_answered_env(ruby.get_inner(env).len());
        }
        let status = status_code(ruby, status)?;
        let mut head = ResponseHead::new(status).map_err(|e| arg_error(ruby, e.to_string()))?;
        let hijack = add_headers(ruby, &mut head, headers)?;
        let (version, is_head) = (rb_self.version, rb_self.is_head);
        let status = head.status();
        if hijack {
            let finished = head.finish_hijacked();
            return Self::open_stream(ruby, rb_self, status, finished);
        }
        if is_head || status_has_no_body(status) {
            let finished = head.finish_full(0, is_head, rb_self.keep_alive, version);
            let close = !finished.keep_alive;
            rb_self.send(
                ruby,
                Reply::Full {
                    status,
                    data: Bytes::from(finished.bytes),
                    tail: Bytes::new(),
                    body_len: 0,
                    close,
                },
            )?;
            return Ok(ruby.qtrue().as_value());
        }
        if let Some(parts) = whole_parts(body)? {
            let mut total = 0usize;
            with_elements(parts, |items| {
                items.iter().try_for_each(|item| {
                    let part = RString::from_value(*item).ok_or_else(|| {
                        Error::new(ruby.exception_type_error(), "response body parts must be Strings")
                    })?;
                    total += part.len();
                    Ok::<(), Error>(())
                })
            })?;
            let mut finished = head.finish_full(total as u64, false, rb_self.keep_alive, version);
            // One large string (a rendered page, a JSON document) goes out
            // from its own memory; anything else is copied after the head.
            let whole = with_elements(parts, |items| match items {
                [one] if total >= PIN_AT => RString::from_value(*one),
                _ => None,
            });
            let tail = match whole {
                Some(part) => pinned_bytes(part),
                None => {
                    finished.bytes.reserve(total);
                    with_elements(parts, |items| {
                        for item in items {
                            if let Some(part) = RString::from_value(*item) {
                                with_bytes(part, |b| finished.bytes.extend_from_slice(b));
                            }
                        }
                    });
                    Bytes::new()
                }
            };
            let close = !finished.keep_alive;
            rb_self.send(
                ruby,
                Reply::Full {
                    status,
                    data: Bytes::from(finished.bytes),
                    tail,
                    body_len: total as u64,
                    close,
                },
            )?;
            return Ok(ruby.qtrue().as_value());
        }
        if body.respond_to("to_path", false)? {
            // Opened by its bytes: a path need not be valid UTF-8.
            let path: RString = body.funcall("to_path", ())?;
            if let Ok(file) = std::fs::File::open(os_path(path)) {
                if let Ok(meta) = file.metadata() {
                    if meta.is_file() {
                        let len = meta.len();
                        let finished = head.finish_full(len, false, rb_self.keep_alive, version);
                        let close = !finished.keep_alive;
                        rb_self.send(
                            ruby,
                            Reply::File {
                                status,
                                head: Bytes::from(finished.bytes),
                                file,
                                offset: 0,
                                len,
                                close,
                            },
                        )?;
                        return Ok(ruby.qtrue().as_value());
                    }
                }
            }
        }
        let finished = head.finish_stream(false, rb_self.keep_alive, version);
        Self::open_stream(ruby, rb_self, status, finished)
    }

    fn open_stream(ruby: &Ruby, rb_self: &Self, status: u16, finished: FinishedHead) -> Result<Value, Error> {
        let (tx, rx) = stream_channel(STREAM_BUFFER);
        let close = !finished.keep_alive;
        rb_self.send(
            ruby,
            Reply::Stream {
                status,
                head: Bytes::from(finished.bytes),
                chunks: rx,
                framing: finished.framing,
                close,
            },
        )?;
        Ok(ruby.obj_wrap(Stream::new(tx)).as_value())
    }

    /// Full hijack (`env["rack.hijack"].call`): the engine gives up the
    /// socket and the app owns it from here on.
    pub fn call(ruby: &Ruby, rb_self: &Self) -> Result<Value, Error> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rb_self.send(ruby, Reply::Hijack { socket: tx })?;
        // The connection task answers at once; nothing here can hang, so
        // the unblock function has nothing to do.
        let (received, raised) = without_gvl(move || rx.recv(), || {});
        raised?;
        let fd = match received {
            Some(Ok(Ok(fd))) => fd,
            Some(Ok(Err(e))) => return Err(Error::new(ruby.exception_io_error(), format!("hijack failed: {e}"))),
            _ => {
                return Err(Error::new(
                    ruby.exception_io_error(),
                    "hijack failed: connection already closed",
                ))
            }
        };
        // lib/tsubame/serve/hijacked_socket.rb: a BasicSocket whose
        // non-blocking writes give other threads a turn at the GVL.
        let tsubame: RModule = ruby.class_object().const_get("Tsubame")?;
        let socket_class: Value = tsubame.const_get("HijackedSocket")?;
        let io: Value = socket_class.funcall("for_fd", (fd.into_raw_fd(),))?;
        rb_self.hijacked.set(true);
        if let Some(env) = rb_self.env.get() {
            let keys = rack_env::keys(ruby)?;
            ruby.get_inner(env).aset(ruby.get_inner(keys.rack_hijack_io), io)?;
        }
        Ok(io)
    }

    /// `env["rack.early_hints"]`: sends a 103 with `headers` (usually
    /// `link`) ahead of the response. The final reply then travels on a new
    /// channel, so a request that sends no hints pays nothing for this.
    pub fn early_hints(ruby: &Ruby, rb_self: &Self, headers: Value) -> Result<(), Error> {
        let mut head = ResponseHead::new(103).map_err(|e| arg_error(ruby, e.to_string()))?;
        add_headers(ruby, &mut head, headers)?;
        let finished = head.finish_hijacked();
        let (tx, rx) = oneshot::channel();
        // A closed receiver: the connection is gone; the final response
        // will find out the same way.
        rb_self.send(
            ruby,
            Reply::Interim {
                head: Bytes::from(finished.bytes),
                next: rx,
            },
        )?;
        *rb_self.reply.borrow_mut() = Some(tx);
        Ok(())
    }

    pub fn is_hijacked(&self) -> bool {
        self.hijacked.get()
    }

    /// Hands the connection to the engine as an upgraded one (`kind`
    /// :websocket or :sse), registered as `id` (`Server#upgrade_open`).
    pub fn upgrade(ruby: &Ruby, rb_self: &Self, kind: magnus::Symbol, id: u64) -> Result<(), Error> {
        let kind = match kind.name()?.as_ref() {
            "websocket" => UpgradeKind::WebSocket,
            "sse" => UpgradeKind::Sse,
            other => return Err(arg_error(ruby, format!("unknown upgrade {other:?}"))),
        };
        rb_self.send(ruby, Reply::Upgrade { kind, id })
    }

    /// True once a response (or hijack) has been handed to the engine.
    pub fn is_answered(&self) -> bool {
        self.reply.borrow().is_none()
    }
}

/// The body's parts when they are all known now: an Array, or a body that
/// gives one from `to_ary` (Rack's SPEC: its contents are what `each` would
/// yield). Middleware that buffers, such as `Rack::ETag` wrapping the parts
/// in a `Rack::BodyProxy`, answers `to_ary`, and then the response goes out
/// whole with a content-length instead of chunk by chunk.
fn whole_parts(body: Value) -> Result<Option<RArray>, Error> {
    if let Some(parts) = RArray::from_value(body) {
        return Ok(Some(parts));
    }
    if !body.respond_to("to_ary", false)? {
        return Ok(None);
    }
    let parts: Value = body.funcall("to_ary", ())?;
    Ok(RArray::from_value(parts))
}

/// Rack 3 requires an Integer status; Rack 2's SPEC only asks that its
/// `to_i` be at least 100, so a String such as "200" is taken as well.
fn status_code(ruby: &Ruby, status: Value) -> Result<i64, Error> {
    let not_integer = || {
        arg_error(
            ruby,
            format!("response status must be an Integer, got {}", status.inspect()),
        )
    };
    if let Some(text) = RString::from_value(status) {
        let code: Value = text.funcall("to_i", ())?;
        return i64::try_convert(code).map_err(|_| not_integer());
    }
    i64::try_convert(status).map_err(|_| not_integer())
}

/// Copies the app's headers into `head`; returns whether they ask for a
/// partial hijack (`rack.hijack`). Other `rack.` keys are server-private
/// and never sent.
fn add_headers(ruby: &Ruby, head: &mut ResponseHead, headers: Value) -> Result<bool, Error> {
    let headers = RHash::from_value(headers)
        .ok_or_else(|| Error::new(ruby.exception_type_error(), "response headers must be a Hash"))?;
    let mut hijack = false;
    headers.foreach(|name: Value, value: Value| {
        let name = RString::from_value(name).ok_or_else(|| {
            Error::new(
                ruby.exception_type_error(),
                format!("response header names must be Strings, got {}", name.inspect()),
            )
        })?;
        let is_rack_key = with_bytes(name, |n| n.starts_with(b"rack."));
        if is_rack_key {
            hijack |= with_bytes(name, |n| n == b"rack.hijack");
            return Ok(magnus::r_hash::ForEach::Continue);
        }
        if let Some(value) = RString::from_value(value) {
            add_one(ruby, head, name, value)?;
        } else if let Some(values) = RArray::from_value(value) {
            for item in values.into_iter() {
                let item = RString::from_value(item)
                    .ok_or_else(|| Error::new(ruby.exception_type_error(), "response header values must be Strings"))?;
                add_one(ruby, head, name, item)?;
            }
        } else {
            return Err(Error::new(
                ruby.exception_type_error(),
                format!(
                    "response header {} must be a String or an Array of Strings",
                    name.inspect()
                ),
            ));
        }
        Ok(magnus::r_hash::ForEach::Continue)
    })?;
    Ok(hijack)
}

fn add_one(ruby: &Ruby, head: &mut ResponseHead, name: RString, value: RString) -> Result<(), Error> {
    let result = with_bytes(name, |n| with_bytes(value, |v| head.header(n, v)));
    result.map_err(|e| arg_error(ruby, e.to_string()))
}
