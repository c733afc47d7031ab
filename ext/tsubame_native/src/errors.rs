//! Ruby exception classes raised by the native code. Defined at load time
//! (lib/tsubame/errors.rb defines the same names; whichever loads first
//! creates them, the other reopens them).

use magnus::value::Opaque;
use magnus::{prelude::*, Error, ExceptionClass, Ruby};
use std::sync::OnceLock;

static CLIENT_DISCONNECTED: OnceLock<Opaque<ExceptionClass>> = OnceLock::new();
static BIND_ERROR: OnceLock<Opaque<ExceptionClass>> = OnceLock::new();

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let tsubame = ruby.define_module("Tsubame")?;
    let disconnected = tsubame.define_error("ClientDisconnected", ruby.exception_io_error())?;
    let base = tsubame.define_error("Error", ruby.exception_standard_error())?;
    let bind = tsubame.define_error("BindError", base)?;
    let _ = CLIENT_DISCONNECTED.set(disconnected.into());
    let _ = BIND_ERROR.set(bind.into());
    Ok(())
}

pub fn client_disconnected(ruby: &Ruby) -> ExceptionClass {
    CLIENT_DISCONNECTED
        .get()
        .map_or_else(|| ruby.exception_io_error(), |c| ruby.get_inner(*c))
}

pub fn bind_error(ruby: &Ruby) -> ExceptionClass {
    BIND_ERROR
        .get()
        .map_or_else(|| ruby.exception_runtime_error(), |c| ruby.get_inner(*c))
}
