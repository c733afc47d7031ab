//! Single read(2)/write(2) calls on a descriptor for the fiber scheduler's
//! `io_read`/`io_write` hooks. Ruby 3.1's `read_nonblock` calls the
//! scheduler's `io_read` again, so the hook cannot use Ruby's IO methods.
//!
//! Results: data (a String) or the count written; `nil` at end of file;
//! `false` when the call would block (the fiber then waits in `io_wait`);
//! a negative Integer, -errno, for any other error (what the hook must
//! return to Ruby).

use crate::ffi::{read_fd, with_bytes, write_fd};
use magnus::{prelude::*, IntoValue, RString, Ruby, Value};
use std::io::ErrorKind;

const MAX_READ: usize = 1 << 20;

fn failure(ruby: &Ruby, e: &std::io::Error) -> Value {
    if e.kind() == ErrorKind::WouldBlock {
        ruby.qfalse().as_value()
    } else {
        (-i64::from(e.raw_os_error().unwrap_or(libc::EIO))).into_value_with(ruby)
    }
}

pub fn fd_read(ruby: &Ruby, fd: i32, max: usize) -> Value {
    let mut buf = vec![0u8; max.clamp(1, MAX_READ)];
    loop {
        return match read_fd(fd, &mut buf) {
            Ok(0) => ruby.qnil().as_value(),
            Ok(n) => ruby.str_from_slice(&buf[..n]).as_value(),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => failure(ruby, &e),
        };
    }
}

pub fn fd_write(ruby: &Ruby, fd: i32, data: RString) -> Value {
    loop {
        return match with_bytes(data, |bytes| write_fd(fd, bytes)) {
            Ok(n) => (n as i64).into_value_with(ruby),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => failure(ruby, &e),
        };
    }
}
