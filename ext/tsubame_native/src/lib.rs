//! The Ruby binding: thin wrappers that move requests between the engine
//! (crates/tsubame-engine) and Ruby threads. All `unsafe` lives in `ffi`.

mod app_loop;
mod errors;
mod ffi;
mod gvl_turns;
mod input;
mod listeners;
mod metrics;
mod rack_env;
mod raw_io;
mod request;
mod selector;
mod self_signed;
mod server;
mod stream;
mod upgrade;

use magnus::{function, method, prelude::*, Error, Ruby};

/// Requests are allocated on the I/O thread and freed on a Ruby thread;
/// mimalloc handles that cross-thread free far more cheaply than glibc's
/// arenas. Only Rust allocations use it: Ruby keeps its own malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The usual production setting for Ruby servers (docs/RELIABILITY.md).
const DEFAULT_MALLOC_ARENAS: i32 = 2;

/// Blocks below this come from glibc's heap, not a mapping of their own
/// (`ffi::keep_malloc_heap`).
const MALLOC_MMAP_THRESHOLD: i32 = 4 << 20;

/// The free memory at the heap's top glibc keeps while requests run.
const MALLOC_TRIM_THRESHOLD: i32 = 64 << 20;

#[magnus::init]
fn init(ruby: &Ruby) -> Result<(), Error> {
    // Before the server starts its threads (and a cluster forks its
    // workers), unless the operator chose a value: glibc read theirs.
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        ffi::limit_malloc_arenas(DEFAULT_MALLOC_ARENAS);
    }
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() && std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_none() {
        ffi::keep_malloc_heap(MALLOC_MMAP_THRESHOLD, MALLOC_TRIM_THRESHOLD);
    }
    errors::init(ruby)?;
    rack_env::init(ruby);
    let native = ruby.define_module("Tsubame")?.define_module("Native")?;

    native.define_module_function("bind_listeners", function!(listeners::bind_listeners, 2))?;
    native.define_module_function("seed_tls_tickets", function!(listeners::seed_tls_tickets, 0))?;
    native.define_module_function("fiber_path_error", function!(server::fiber_path_error, 1))?;
    native.define_module_function("rack3=", function!(rack_env::set_rack3, 1))?;
    native.define_module_function("env_templates", function!(rack_env::env_templates, 1))?;
    native.define_module_function("env_in_place_misses", function!(rack_env::in_place_misses, 0))?;
    native.define_module_function("pass_gvl?", function!(gvl_turns::pass_due, 0))?;
    native.define_module_function("fd_read", function!(raw_io::fd_read, 2))?;
    native.define_module_function("fd_write", function!(raw_io::fd_write, 2))?;
    native.define_module_function("write_self_signed", function!(self_signed::write_self_signed, 2))?;

    let server = native.define_class("Server", ruby.class_object())?;
    server.define_singleton_method("new", function!(server::Server::new, 1))?;
    server.define_method("addresses", method!(server::Server::addresses, 0))?;
    server.define_method("start", method!(server::Server::start, 0))?;
    server.define_method("stop", method!(server::Server::stop, 0))?;
    server.define_method("enter_lame_duck", method!(server::Server::enter_lame_duck, 0))?;
    server.define_method("handoff=", method!(server::Server::set_handoff, 1))?;
    server.define_method("next_request", method!(server::Server::next_request, 0))?;
    server.define_method("serve", method!(app_loop::serve, 3))?;
    server.define_method("wait", method!(server::Server::wait, 0))?;
    server.define_method("stats", method!(server::Server::stats, 0))?;
    server.define_method("metrics", method!(metrics::metrics, 0))?;
    server.define_method("reopen_access_log", method!(metrics::reopen_access_log, 0))?;
    server.define_method("next_timeout", method!(server::Server::next_timeout, 0))?;
    server.define_method("report_stuck_thread", method!(server::Server::report_stuck_thread, 0))?;
    server.define_method("trim_memory", method!(server::Server::trim_memory, 0))?;
    server.define_method("next_fiber_request", method!(server::Server::next_fiber_request, 0))?;
    server.define_method("fiber_finished", method!(server::Server::fiber_finished, 0))?;

    let selector = native.define_class("Selector", ruby.class_object())?;
    selector.define_singleton_method("new", function!(selector::Selector::new, 0))?;
    selector.define_method("watch", method!(selector::Selector::watch, 2))?;
    selector.define_method("unwatch", method!(selector::Selector::unwatch, 1))?;
    selector.define_method("select", method!(selector::Selector::select, 1))?;
    selector.define_method("wakeup", method!(selector::Selector::wakeup, 0))?;
    selector.define_method("attach", method!(server::attach_selector, 1))?;
    server.define_method("reload_tls", method!(server::Server::reload_tls, 0))?;
    server.define_method("upgrade_open", method!(upgrade::open, 1))?;
    server.define_method("next_upgrade_event", method!(upgrade::next_event, 0))?;
    server.define_method("upgrade_event_done", method!(upgrade::event_done, 1))?;
    server.define_method("upgrade_write", method!(upgrade::write, 3))?;
    server.define_method("upgrade_close", method!(upgrade::close, 2))?;
    server.define_method("upgrade_pending", method!(upgrade::pending, 1))?;
    server.define_method("upgrade_open?", method!(upgrade::is_open, 1))?;
    server.define_method("upgrade_subscribe", method!(upgrade::subscribe, 2))?;
    server.define_method("upgrade_unsubscribe", method!(upgrade::unsubscribe, 2))?;
    server.define_method("publish", method!(upgrade::publish, 3))?;
    server.define_method("upgrade_count", method!(upgrade::count, 0))?;

    let request = native.define_class("Request", ruby.class_object())?;
    request.define_method("env", method!(request::Request::env, 1))?;
    request.define_method("respond", method!(request::Request::respond, 3))?;
    request.define_method("call", method!(request::Request::call, 0))?;
    request.define_method("early_hints", method!(request::Request::early_hints, 1))?;
    request.define_method("hijacked?", method!(request::Request::is_hijacked, 0))?;
    request.define_method("answered?", method!(request::Request::is_answered, 0))?;
    request.define_method("seq", method!(request::Request::seq, 0))?;
    request.define_method("deadline=", method!(request::Request::set_deadline, 1))?;
    request.define_method("deadline", method!(request::Request::deadline, 0))?;
    request.define_method("upgrade", method!(request::Request::upgrade, 2))?;

    let stream = native.define_class("Stream", ruby.class_object())?;
    stream.define_method("write", method!(stream::Stream::write, 1))?;
    stream.define_method("close", method!(stream::Stream::close, 0))?;
    stream.define_method("abort", method!(stream::Stream::abort, 0))?;
    stream.define_method("closed?", method!(stream::Stream::is_closed, 0))?;
    stream.define_method("room?", method!(stream::Stream::has_room, 0))?;
    stream.define_method("notify_room", method!(stream::Stream::notify_room, 1))?;

    let input = native.define_class("Input", ruby.class_object())?;
    input.define_method("read", method!(input::Input::read, -1))?;
    input.define_method("gets", method!(input::Input::gets, 0))?;
    input.define_method("each", method!(input::Input::each, 0))?;
    input.define_method("rewind", method!(input::Input::rewind, 0))?;
    input.define_method("size", method!(input::Input::size, 0))?;
    input.define_method("close", method!(input::Input::close, 0))?;
    input.define_method("release", method!(input::Input::release, 0))?;
    Ok(())
}
