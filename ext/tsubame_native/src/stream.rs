//! `Tsubame::Native::Stream`: the writable end of a streamed response, used
//! for `each` bodies, Rack 3 streaming bodies (`call(stream)`) and partial
//! hijack. Writes block (GVL released) only when the client is slower than
//! the app.

use crate::errors::client_disconnected;
use crate::ffi::{with_bytes, without_gvl};
use crate::selector::Selector;
use bytes::Bytes;
use magnus::typed_data::Obj;
use magnus::{prelude::*, Error, RClass, RString, Ruby, Value};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use tsubame_engine::dispatch::stream_channel::{SendError, StreamSender, TrySendError};
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

    fn send(ruby: &Ruby, obj: Obj<Self>, msg: StreamMsg) -> Result<(), Error> {
        let rb_self: &Self = &obj;
        let mut msg = msg;
        loop {
            let tx_ref = rb_self.tx.borrow();
            let Some(tx) = tx_ref.as_ref() else {
                return Err(Error::new(ruby.exception_io_error(), "stream is closed"));
            };
            // Fast path, one lock: no GVL release when nothing will block.
            msg = match tx.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed) => {
                    drop(tx_ref);
                    rb_self.tx.borrow_mut().take();
                    return Err(Error::new(client_disconnected(ruby), "client disconnected"));
                }
                Err(TrySendError::Full(back)) => back,
            };
            let outcome = if let Some(scheduler) = fiber_scheduler(ruby)? {
                // On a fiber: park it in the scheduler until the engine
                // makes room, instead of stalling every fiber of the loop.
                drop(tx_ref);
                let _: Value = scheduler.funcall("wait_stream_room", (obj,))?;
                continue;
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
                    drop(tx_ref);
                    ruby.thread_check_ints()?;
                    msg = back;
                }
            }
        }
    }

    /// Whether a write would go through without waiting (or fail at once
    /// because the client is gone).
    pub fn has_room(&self) -> bool {
        self.tx.borrow().as_ref().is_none_or(StreamSender::has_room)
    }

    /// Wakes `selector` whenever the engine makes room (nil: stop).
    pub fn notify_room(&self, selector: Option<&Selector>) {
        if let Some(tx) = self.tx.borrow().as_ref() {
            tx.set_room_waker(selector.map(Selector::waker));
        }
    }

    pub fn write(ruby: &Ruby, rb_self: Obj<Self>, chunk: Value) -> Result<usize, Error> {
        let chunk = RString::try_convert_str(ruby, chunk)?;
        let data = with_bytes(chunk, Bytes::copy_from_slice);
        let len = data.len();
        if len > 0 {
            Self::send(ruby, rb_self, StreamMsg::Data(data))?;
        }
        Ok(len)
    }

    /// Ends the body normally (the engine writes the last chunk).
    pub fn close(ruby: &Ruby, rb_self: Obj<Self>) -> Result<(), Error> {
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

/// The Tsubame fiber scheduler running the current fiber, if it is a
/// non-blocking one; asked only when a write would have to wait.
fn fiber_scheduler(ruby: &Ruby) -> Result<Option<Value>, Error> {
    let fiber: RClass = ruby.class_object().const_get("Fiber")?;
    let current: Value = fiber.funcall("current", ())?;
    let blocking: bool = current.funcall("blocking?", ())?;
    if blocking {
        return Ok(None);
    }
    let scheduler: Value = fiber.funcall("scheduler", ())?;
    if !scheduler.is_nil() && scheduler.respond_to("wait_stream_room", false)? {
        Ok(Some(scheduler))
    } else {
        Ok(None)
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
