//! `rack.input`: the request body, already read whole by the engine, as a
//! rewindable IO-like object (memory or the spooled temp file).

use bytes::Bytes;
use magnus::prelude::*;
use magnus::value::Opaque;
use magnus::{gc, Error, RString, Ruby, Value};
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read, Seek, SeekFrom};
use std::sync::OnceLock;
use tsubame_engine::message::body::Body;

trait Source: BufRead + Seek + Send {}
impl<T: BufRead + Seek + Send> Source for T {}

#[magnus::wrap(class = "Tsubame::Native::Input", free_immediately, size)]
pub struct Input {
    /// `None` for a request without a body: one such `Input` serves every
    /// bodyless request (`Server#empty_input`), so a GET allocates no input
    /// object; with nothing to read it has no state to share.
    source: Option<RefCell<Box<dyn Source>>>,
    len: u64,
}

/// `rack.input` for a request: its own object when it has a body, the one
/// shared empty `Input` (made on first use, kept for good) when it has none.
pub fn for_body(ruby: &Ruby, body: Body) -> Value {
    static EMPTY: OnceLock<Opaque<Value>> = OnceLock::new();
    match body {
        Body::Empty => {
            let empty = EMPTY.get_or_init(|| {
                let obj = ruby.obj_wrap(Input::empty()).as_value();
                gc::register_mark_object(obj);
                Opaque::from(obj)
            });
            ruby.get_inner(*empty)
        }
        body => ruby.obj_wrap(Input::new(body)).as_value(),
    }
}

fn io_error(ruby: &Ruby, err: std::io::Error) -> Error {
    Error::new(ruby.exception_io_error(), format!("reading request body: {err}"))
}

impl Input {
    pub fn new(body: Body) -> Input {
        let len = body.len();
        let source: Box<dyn Source> = match body {
            Body::Empty => return Input::empty(),
            Body::Memory(bytes) => Box::new(Cursor::new(bytes)),
            Body::File { file, .. } => Box::new(BufReader::<File>::with_capacity(64 * 1024, file)),
        };
        Input {
            source: Some(RefCell::new(source)),
            len,
        }
    }

    pub fn empty() -> Input {
        Input { source: None, len: 0 }
    }

    /// Runs `f` on the body, or on an empty reader for a bodyless request.
    /// The borrow ends before the caller touches Ruby again, so no Ruby
    /// call made meanwhile can find the body borrowed.
    fn with_source<T>(&self, f: impl FnOnce(&mut dyn Source) -> std::io::Result<T>) -> std::io::Result<T> {
        match &self.source {
            Some(source) => match source.try_borrow_mut() {
                Ok(mut source) => f(&mut **source),
                Err(_) => Err(std::io::Error::other("rack.input is being read by another call")),
            },
            None => f(&mut Cursor::new(&[][..])),
        }
    }

    /// IO#read semantics: no length reads to the end ("" at EOF); a length
    /// reads at most that many bytes (nil at EOF); a buffer is filled in
    /// place.
    pub fn read(ruby: &Ruby, rb_self: &Self, args: &[Value]) -> Result<Option<RString>, Error> {
        let args =
            magnus::scan_args::scan_args::<(), (Option<Option<usize>>, Option<Option<RString>>), (), (), (), ()>(args)?;
        let (length, buffer) = args.optional;
        let length = length.flatten();
        let buffer = buffer.flatten();
        let mut data = Vec::new();
        match length {
            None => {
                rb_self
                    .with_source(|source| source.read_to_end(&mut data))
                    .map_err(|e| io_error(ruby, e))?;
            }
            Some(len) => {
                data.reserve(len.min(1 << 20));
                rb_self
                    .with_source(|source| source.take(len as u64).read_to_end(&mut data))
                    .map_err(|e| io_error(ruby, e))?;
                if data.is_empty() && len > 0 {
                    if let Some(buf) = buffer {
                        let _: Value = buf.funcall("clear", ())?;
                    }
                    return Ok(None);
                }
            }
        }
        match buffer {
            Some(buf) => {
                let _: Value = buf.funcall("replace", (ruby.str_from_slice(&data),))?;
                Ok(Some(buf))
            }
            None => Ok(Some(ruby.str_from_slice(&data))),
        }
    }

    pub fn gets(ruby: &Ruby, rb_self: &Self) -> Result<Option<RString>, Error> {
        let mut line = Vec::new();
        let n = rb_self
            .with_source(|source| source.read_until(b'\n', &mut line))
            .map_err(|e| io_error(ruby, e))?;
        Ok((n > 0).then(|| ruby.str_from_slice(&line)))
    }

    pub fn each(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        while let Some(line) = Self::gets(ruby, rb_self)? {
            let _: Value = ruby.yield_value(line)?;
        }
        Ok(())
    }

    pub fn rewind(ruby: &Ruby, rb_self: &Self) -> Result<i64, Error> {
        rb_self
            .with_source(|source| source.seek(SeekFrom::Start(0)))
            .map_err(|e| io_error(ruby, e))?;
        Ok(0)
    }

    pub fn size(&self) -> u64 {
        self.len
    }

    /// Rack 3 lets servers ignore close on the input; the memory or file
    /// is released when the object is collected.
    pub fn close(&self) {}

    /// Drops the body once its request is answered (the server calls it,
    /// never the app): a spooled body's temp file holds disk space and a
    /// descriptor, and waiting for the GC to collect this object would
    /// let a burst of uploads fill the disk or run out of descriptors.
    /// Reads after this see an empty body.
    pub fn release(&self) {
        if let Some(Ok(mut source)) = self.source.as_ref().map(RefCell::try_borrow_mut) {
            *source = Box::new(Cursor::new(Bytes::new()));
        }
    }
}
