//! `Native::Server#serve`: an app thread's loop when nothing in Ruby has
//! to run around each request (no request timeout, thread hooks,
//! `max_io_threads` gate, early hints or X-Sendfile). Takes a request,
//! builds its env, calls the app and sends a plain response without
//! running Ruby code of the server's own: at hello-world rates the Ruby
//! loop's method calls, hash lookups and ensure blocks were a tenth of the
//! process's CPU per request.
//!
//! Anything else goes to the Ruby handler (`Tsubame::Server`), which does
//! what its own loop does from that point on, so both loops answer alike:
//! - `complete(request, env, input, status, headers, body, error)`: the app
//!   raised, or its response is not plain (a body other than an Array, a
//!   `rack.hijack` or `rack.protocol` header, headers other than a Hash, a
//!   hijacked request, `rack.upgrade`), or sending it raised;
//! - `complete_result(request, env, input, result)`: the app returned
//!   something other than an Array;
//! - `after_response(request, env, input, status, headers, body, nil)`:
//!   the response went, but `rack.response_finished` callbacks wait.

use crate::input::Input;
use crate::rack_env::{keys, Keys};
use crate::request::Request;
use crate::server::Server;
use magnus::class::Class as _;
use magnus::error::ErrorType;
use magnus::rb_sys::AsRawValue;
use magnus::typed_data::Obj;
use magnus::value::{LazyId, OpaqueId, ReprValue};
use magnus::ArgList;
use magnus::{Error, RArray, RHash, Ruby, TryConvert, Value};

static CALL: LazyId = LazyId::new("call");
static COMPLETE: LazyId = LazyId::new("complete");
static COMPLETE_RESULT: LazyId = LazyId::new("complete_result");
static AFTER_RESPONSE: LazyId = LazyId::new("after_response");

/// Runs until the server stops (`next_request` gives nil). Returns an
/// error only when Ruby unwinds the thread (kill, a `throw`), never for
/// what the app raises.
pub fn serve(ruby: &Ruby, rb_self: &Server, app: Value, templates: RArray, handler: Value) -> Result<(), Error> {
    while let Some(request) = Server::next_request(ruby, rb_self)? {
        let request = ruby.obj_wrap(request);
        serve_one(ruby, request, app, templates, handler)?;
    }
    Ok(())
}

fn serve_one(ruby: &Ruby, request: Obj<Request>, app: Value, templates: RArray, handler: Value) -> Result<(), Error> {
    let built = Request::build_env(ruby, request, templates)?;
    let (env, input) = (built.env, built.input);
    let result: Value = match app.funcall(*CALL, (env,)) {
        Ok(result) => result,
        Err(e) => {
            let error = raised(e)?;
            let nil = ruby.qnil().as_value();
            return call(handler, *COMPLETE, (request, env, input, nil, nil, nil, error));
        }
    };
    let Some(triple) = RArray::from_value(result).filter(|a| a.len() == 3) else {
        return call(handler, *COMPLETE_RESULT, (request, env, input, result));
    };
    let (status, headers, body): (Value, Value, Value) = (triple.entry(0)?, triple.entry(1)?, triple.entry(2)?);
    let k = keys(ruby)?;
    if !is_plain(ruby, k, &request, env, headers, body) {
        let nil = ruby.qnil().as_value();
        return call(handler, *COMPLETE, (request, env, input, status, headers, body, nil));
    }
    if let Err(e) = Request::respond(ruby, &request, status, headers, body) {
        let error = raised(e)?;
        return call(handler, *COMPLETE, (request, env, input, status, headers, body, error));
    }
    // An Array has no `close`; what is left of the Ruby loop's ensure is
    // the callbacks and the input.
    let finished: Option<Value> = env.get(ruby.get_inner(k.rack_response_finished));
    if finished.is_some_and(|f| RArray::from_value(f).is_none_or(|a| !a.is_empty())) {
        let nil = ruby.qnil().as_value();
        return call(
            handler,
            *AFTER_RESPONSE,
            (request, env, input, status, headers, body, nil),
        );
    }
    if let Ok(input) = Obj::<Input>::try_convert(input) {
        input.release();
    }
    Ok(())
}

/// A response the Ruby loop would send with nothing but `respond` and
/// nothing to close: an Array body (exactly Array, so no `close`), headers
/// exactly a Hash (raw lookups mean what `[]` means) without `rack.hijack`
/// or `rack.protocol`, no `rack.upgrade` taken, the socket not hijacked.
fn is_plain(ruby: &Ruby, k: &Keys, request: &Request, env: RHash, headers: Value, body: Value) -> bool {
    if request.is_hijacked() || !is_exactly(body, ruby.class_array().as_value()) {
        return false;
    }
    let Some(headers) = RHash::from_value(headers).filter(|h| is_exactly(h.as_value(), ruby.class_hash().as_value()))
    else {
        return false;
    };
    let truthy = |v: Option<Value>| v.is_some_and(|v| v.to_bool());
    !truthy(env.get(ruby.get_inner(k.rack_upgrade)))
        && !truthy(headers.get(ruby.get_inner(k.rack_hijack)))
        && !truthy(headers.get(ruby.get_inner(k.rack_protocol)))
}

/// A call into the Ruby handler; what it returns means nothing here.
fn call<A: ArgList>(handler: Value, method: OpaqueId, args: A) -> Result<(), Error> {
    handler.funcall::<_, _, Value>(method, args).map(drop)
}

fn is_exactly(value: Value, class: Value) -> bool {
    value.class().as_value().as_raw() == class.as_raw()
}

/// The exception a Ruby call raised (made into one when the error came
/// from Rust as a class and a message), or the error itself when Ruby is
/// unwinding for another reason (a kill, `throw`), which must go on.
fn raised(e: Error) -> Result<Value, Error> {
    match e.error_type() {
        ErrorType::Exception(exception) => Ok(exception.as_value()),
        ErrorType::Error(class, message) => Ok(class.new_instance((message.as_ref(),))?.as_value()),
        ErrorType::Jump(_) => Err(e),
    }
}
