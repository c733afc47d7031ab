//! `rack.upgrade` as Ruby sees it (lib/tsubame/serve/upgrades.rb): ids for
//! new connections, the events the handler threads run, and the writes,
//! closes and subscriptions of the connection objects. A write goes to an
//! idle plain socket with one non-blocking send, else it is queued for the
//! connection's task (`upgrade/registry.rs`), so none of these waits on a
//! socket.

use crate::ffi::{with_bytes, without_gvl};
use crate::server::Server;
use bytes::Bytes;
use magnus::{prelude::*, Error, RArray, RString, Ruby};
use std::sync::atomic::{AtomicBool, Ordering};
use tsubame_engine::upgrade::{EventKind, Out, Popped};

/// Registers a connection about to be upgraded; its id.
pub fn open(rb_self: &Server, wants_drained: bool) -> u64 {
    let engine = &rb_self.engine;
    let (id, out) = engine.upgrades().open(engine.upgrade_max_pending());
    out.set_wants_drained(wants_drained);
    id
}

/// The next event as `[id, kind, data]` (`kind` one of :open, :message,
/// :drained, :shutdown, :close; data a String for :message), or nil once
/// the server has stopped and every connection is gone. Waits with the
/// GVL released.
pub fn next_event(ruby: &Ruby, rb_self: &Server) -> Result<Option<RArray>, Error> {
    let events = rb_self.engine.upgrade_events();
    let spin = rb_self.engine.handoff_spin();
    loop {
        let interrupted = AtomicBool::new(false);
        let (popped, raised) = without_gvl(
            || events.pop_wait(&interrupted, spin),
            || {
                interrupted.store(true, Ordering::Release);
                events.wake_all();
            },
        );
        if let Err(e) = raised {
            // Ruby is unwinding the thread: an event taken goes back.
            if let Some(Popped::Event(event)) = popped {
                events.push(event);
            }
            return Err(e);
        }
        let event = match popped {
            Some(Popped::Event(event)) => event,
            Some(Popped::Closed) => return Ok(None),
            Some(Popped::Interrupted) | None => {
                ruby.thread_check_ints()?;
                continue;
            }
        };
        let (kind, data) = match event.kind {
            EventKind::Open => ("open", None),
            EventKind::Message { text } => ("message", Some(message_string(ruby, event.data, text))),
            EventKind::Drained => ("drained", None),
            EventKind::Shutdown => ("shutdown", None),
            EventKind::Close => ("close", None),
        };
        let data = data.map_or_else(|| ruby.qnil().as_value(), |s| s.as_value());
        return Ok(Some(ruby.ary_new_from_values(&[
            ruby.integer_from_u64(event.id).as_value(),
            ruby.to_symbol(kind).as_value(),
            data,
        ])));
    }
}

/// A message for the handler: text as UTF-8 (the engine has checked it),
/// binary as ASCII-8BIT.
fn message_string(ruby: &Ruby, data: Option<Bytes>, text: bool) -> RString {
    let data = data.unwrap_or_default();
    match std::str::from_utf8(&data) {
        Ok(s) if text => ruby.str_new(s),
        _ => ruby.str_from_slice(&data),
    }
}

/// The handler has finished connection `id`'s event: the connection may
/// hand over its next one.
pub fn event_done(rb_self: &Server, id: u64) {
    if let Some(out) = rb_self.engine.upgrades().get(id) {
        rb_self.engine.upgrade_events().done();
        out.event_done();
    }
}

/// Sends or queues `data` on connection `id` (a text frame when `text`); false if
/// the connection is closed or its client has stopped reading.
pub fn write(rb_self: &Server, id: u64, data: RString, text: bool) -> bool {
    let Some(out) = rb_self.engine.upgrades().get(id) else {
        return false;
    };
    let bytes = with_bytes(data, Bytes::copy_from_slice);
    out.push(if text { Out::Text(bytes) } else { Out::Binary(bytes) })
        .is_ok()
}

/// Starts closing connection `id` (a WebSocket close frame with `code`).
pub fn close(rb_self: &Server, id: u64, code: u16) -> bool {
    rb_self
        .engine
        .upgrades()
        .get(id)
        .is_some_and(|out| out.push(Out::Close(code)).is_ok())
}

/// Bytes written and not yet sent, or nil once the connection is gone.
pub fn pending(rb_self: &Server, id: u64) -> Option<usize> {
    rb_self.engine.upgrades().get(id).map(|out| out.pending())
}

pub fn is_open(rb_self: &Server, id: u64) -> bool {
    rb_self.engine.upgrades().get(id).is_some_and(|out| out.is_open())
}

pub fn subscribe(rb_self: &Server, id: u64, channel: RString) -> bool {
    let channel = with_bytes(channel, Bytes::copy_from_slice);
    rb_self.engine.upgrades().subscribe(id, channel)
}

pub fn unsubscribe(rb_self: &Server, id: u64, channel: RString) -> bool {
    with_bytes(channel, |channel| rb_self.engine.upgrades().unsubscribe(id, channel))
}

/// Sends or queues `message` on every connection of this process subscribed to
/// `channel`; how many took it. The fan-out runs with the GVL released: an
/// idle subscriber gets its frame by a send from this thread (some 10 µs
/// of kernel TCP each), and 10,000 of them would otherwise hold every
/// other Ruby thread for 100 ms. The sends never wait, so nothing needs
/// interrupting.
pub fn publish(rb_self: &Server, channel: RString, message: RString, text: bool) -> usize {
    let bytes = with_bytes(message, Bytes::copy_from_slice);
    let out = if text { Out::Text(bytes) } else { Out::Binary(bytes) };
    let channel = with_bytes(channel, Bytes::copy_from_slice);
    let upgrades = rb_self.engine.upgrades();
    let (taken, _) = without_gvl(|| upgrades.publish(&channel, out), || {});
    taken.unwrap_or(0)
}

/// Upgraded connections open now.
pub fn count(rb_self: &Server) -> usize {
    rb_self.engine.upgrades().len()
}
