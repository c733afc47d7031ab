//! `rack.input`: the request body, already read whole by the engine, as a
//! rewindable IO-like object (memory or the spooled temp file).

use bytes::Bytes;
use magnus::prelude::*;
use magnus::{Error, RString, Ruby, Value};
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read, Seek, SeekFrom};
use tsubame_engine::message::body::Body;

trait Source: BufRead + Seek + Send {}
impl<T: BufRead + Seek + Send> Source for T {}

#[magnus::wrap(class = "Tsubame::Native::Input", free_immediately, size)]
pub struct Input {
    source: RefCell<Box<dyn Source>>,
    len: u64,
}

fn io_error(ruby: &Ruby, err: std::io::Error) -> Error {
    Error::new(ruby.exception_io_error(), format!("reading request body: {err}"))
}

impl Input {
    pub fn new(body: Body) -> Input {
        let len = body.len();
        let source: Box<dyn Source> = match body {
            Body::Empty => Box::new(Cursor::new(Bytes::new())),
            Body::Memory(bytes) => Box::new(Cursor::new(bytes)),
            Body::File { file, .. } => Box::new(BufReader::<File>::with_capacity(64 * 1024, file)),
        };
        Input {
            source: RefCell::new(source),
            len,
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
        let mut source = rb_self.source.borrow_mut();
        let mut data = Vec::new();
        match length {
            None => {
                source.read_to_end(&mut data).map_err(|e| io_error(ruby, e))?;
            }
            Some(len) => {
                data.reserve(len.min(1 << 20));
                (&mut *source)
                    .take(len as u64)
                    .read_to_end(&mut data)
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
            .source
            .borrow_mut()
            .read_until(b'\n', &mut line)
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
            .source
            .borrow_mut()
            .seek(SeekFrom::Start(0))
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
        if let Ok(mut source) = self.source.try_borrow_mut() {
            *source = Box::new(Cursor::new(Bytes::new()));
        }
    }
}
