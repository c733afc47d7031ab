//! `Tsubame::Native::Stream`: the writable end of a streamed response, used
//! for `each` bodies, Rack 3 streaming bodies (`call(stream)`) and partial
//! hijack. Writes block (GVL released) only when the client is slower than
//! the app.

use crate::errors::client_disconnected;
use crate::ffi::{with_bytes, without_gvl};
use bytes::Bytes;
use magnus::{Error, RString, Ruby, Value};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use tsubame_engine::stream_channel::{SendError, StreamSender};
use tsubame_engine::StreamMsg;

#[magnus::wrap(class = "Tsubame::Native::Stream", free_immediately, size)]
pub struct Stream {
    tx: RefCell<Option<StreamSender>>,
}

impl Stream {
    pub fn new(tx: StreamSender) -> Stream {
        Stream {
            tx: RefCell::new(Some(tx)),
        }
    }

    fn send(ruby: &Ruby, rb_self: &Self, msg: StreamMsg) -> Result<(), Error> {
        let tx_ref = rb_self.tx.borrow();
        let Some(tx) = tx_ref.as_ref() else {
            return Err(Error::new(ruby.exception_io_error(), "stream is closed"));
        };
        let mut msg = msg;
        loop {
            let outcome = if tx.has_room() {
                // Fast path: no GVL release when nothing will block.
                tx.send(msg, &AtomicBool::new(false))
            } else {
                let flag = AtomicBool::new(false);
                let (sent, raised) = without_gvl(
                    || tx.send(msg, &flag),
                    || {
                        flag.store(true, Ordering::Release);
                        tx.wake();
                    },
                );
                raised?;
                match sent {
                    Some(result) => result,
                    None => return Err(Error::new(ruby.exception_io_error(), "stream write interrupted")),
                }
            };
            match outcome {
                Ok(()) => return Ok(()),
                Err(SendError::Closed) => {
                    drop(tx_ref);
                    rb_self.tx.borrow_mut().take();
                    return Err(Error::new(client_disconnected(ruby), "client disconnected"));
                }
                Err(SendError::Interrupted(back)) => {
                    ruby.thread_check_ints()?;
                    msg = back;
                }
            }
        }
    }

    pub fn write(ruby: &Ruby, rb_self: &Self, chunk: Value) -> Result<usize, Error> {
        let chunk = RString::try_convert_str(ruby, chunk)?;
        let data = with_bytes(chunk, Bytes::copy_from_slice);
        let len = data.len();
        if len > 0 {
            Self::send(ruby, rb_self, StreamMsg::Data(data))?;
        }
        Ok(len)
    }

    /// Ends the body normally (the engine writes the last chunk).
    pub fn close(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        if rb_self.tx.borrow().is_none() {
            return Ok(());
        }
        let result = Self::send(ruby, rb_self, StreamMsg::End);
        rb_self.tx.borrow_mut().take();
        match result {
            Err(e) if e.is_kind_of(client_disconnected(ruby)) => Ok(()),
            other => other,
        }
    }

    /// Ends the body as failed: the client sees the connection close before
    /// the body is complete, never a truncated body dressed as a whole one.
    pub fn abort(&self) {
        self.tx.borrow_mut().take();
    }

    pub fn is_closed(&self) -> bool {
        self.tx.borrow().as_ref().is_none_or(StreamSender::is_closed)
    }
}

trait StrConvert {
    fn try_convert_str(ruby: &Ruby, value: Value) -> Result<RString, Error>;
}

impl StrConvert for RString {
    fn try_convert_str(ruby: &Ruby, value: Value) -> Result<RString, Error> {
        RString::from_value(value)
            .ok_or_else(|| Error::new(ruby.exception_type_error(), "response body chunks must be Strings"))
    }
}
