//! The only place Tsubame calls Ruby's C API directly: releasing the GVL
//! around a blocking wait, borrowing the bytes of Ruby strings, and the
//! three hash operations on the per-request hot path (copying the env
//! template, inserting entries, storing values in place); and the few libc calls
//! that have no safe wrapper (descriptor reads and writes, `mallopt`).

use magnus::{Error, RArray, RHash, RString, Value};
use std::ffi::{c_void, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

struct Call<F, R> {
    func: Option<F>,
    result: Option<std::thread::Result<R>>,
}

extern "C" fn run_call<F: FnOnce() -> R, R>(data: *mut c_void) -> *mut c_void {
    // SAFETY: `data` is the `&mut Call<F, R>` that `without_gvl` passed to
    // rb_thread_call_without_gvl, alive for the whole call and touched by no
    // one else meanwhile.
    let call = unsafe { &mut *(data as *mut Call<F, R>) };
    if let Some(func) = call.func.take() {
        // A panic must not unwind into Ruby's C frames.
        call.result = Some(catch_unwind(AssertUnwindSafe(func)));
        crate::gvl_turns::returning();
    }
    std::ptr::null_mut()
}

extern "C" fn run_unblock<U: Fn()>(data: *mut c_void) {
    // SAFETY: `data` is the `&U` that `without_gvl` passed along; Ruby only
    // calls the unblock function while the blocking call is in progress, so
    // the reference is live.
    let unblock = unsafe { &*(data as *const U) };
    let _ = catch_unwind(AssertUnwindSafe(unblock));
}

/// Runs `func` with the GVL released. `unblock` is what Ruby calls (from
/// another thread) when it needs this thread back, for a signal,
/// `Thread#raise` or `Thread#kill`: it must make `func` return soon.
///
/// `func` must not touch any Ruby object. Returns `func`'s result, if it
/// ran to completion, and any exception Ruby raised on the way back in: a
/// pending interrupt can raise after `func` returned, so a caller holding a
/// result it must not lose (a queued request) gets it back either way.
pub fn without_gvl<F, R, U>(func: F, unblock: U) -> (Option<R>, Result<(), Error>)
where
    F: FnOnce() -> R,
    U: Fn(),
{
    let mut call = Call {
        func: Some(func),
        result: None,
    };
    let call_ptr = &mut call as *mut Call<F, R> as *mut c_void;
    let unblock_ptr = &unblock as *const U as *mut c_void;
    // rb_thread_call_without_gvl checks interrupts after re-taking the GVL,
    // and may longjmp out; rb_protect (inside `protect`) turns that into an
    // Err here instead of unwinding through Rust frames.
    let protected = magnus::rb_sys::protect(|| {
        // SAFETY: both function pointers match the C signatures Ruby
        // expects, and both data pointers outlive the call (see above).
        unsafe {
            rb_sys::rb_thread_call_without_gvl(Some(run_call::<F, R>), call_ptr, Some(run_unblock::<U>), unblock_ptr);
        }
        rb_sys::Qnil as rb_sys::VALUE
    });
    // Back with the GVL (or unwinding with it): `func` ran if it left a result.
    if call.result.is_some() {
        crate::gvl_turns::returned();
    }
    let result = match call.result {
        Some(Ok(value)) => Some(value),
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        None => None,
    };
    (result, protected.map(|_| ()))
}

/// Calls `f` with the bytes of a Ruby string.
pub fn with_bytes<T>(s: RString, f: impl FnOnce(&[u8]) -> T) -> T {
    // SAFETY: the slice is used only inside `f`, which cannot reach Ruby
    // (it gets no Ruby handle), so the string can be neither mutated nor
    // collected while borrowed; `s` itself is on the stack, so the GC sees it.
    f(unsafe { s.as_slice() })
}

/// A Ruby string as a filesystem path, taken as bytes whatever its
/// encoding: Unix paths are bytes, and a name may be Latin-1 bytes in an
/// ASCII-8BIT string, or a UTF-8-tagged string that is not valid UTF-8.
pub fn os_path(s: RString) -> PathBuf {
    with_bytes(s, |b| PathBuf::from(OsStr::from_bytes(b)))
}

/// Calls `f` with the elements of a Ruby array.
pub fn with_elements<T>(a: RArray, f: impl FnOnce(&[Value]) -> T) -> T {
    // SAFETY: as for `with_bytes`; callers pass closures that read element
    // values but call no Ruby method that could resize the array.
    f(unsafe { a.as_slice() })
}

type NewHashWithCapacity = unsafe extern "C" fn(std::os::raw::c_long) -> rb_sys::VALUE;

/// Ruby's constructor of a Hash with room for `n` entries: `rb_hash_new_capa`
/// (public since Ruby 3.2) or 3.1's exported `rb_hash_new_with_size`; none
/// on a Ruby that has neither, where the caller falls back to a plain Hash.
/// Looked up by name because 3.1's headers do not declare either.
fn hash_constructor() -> Option<NewHashWithCapacity> {
    static FOUND: std::sync::OnceLock<Option<NewHashWithCapacity>> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        [c"rb_hash_new_capa", c"rb_hash_new_with_size"].iter().find_map(|name| {
            // SAFETY: dlsym with RTLD_DEFAULT only looks a name up among the
            // loaded objects (libruby is one: this extension runs inside it)
            // and returns null when it is absent.
            let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            // SAFETY: both functions take one integer (`long` for
            // rb_hash_new_capa, `st_index_t`, an unsigned long of the same
            // size and passed in the same register, for
            // rb_hash_new_with_size; `n` is small and positive) and return a
            // new Hash VALUE.
            (!found.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, NewHashWithCapacity>(found) })
        })
    })
}

/// A new Hash with room for `capacity` entries before its table grows.
/// The base env is made this way because `hash_dup` copies a table's
/// capacity too: each request's env then takes its own entries without
/// the table being reallocated and copied on the way (three allocations
/// and three frees per request fewer, in Ruby's malloc).
pub fn hash_with_capacity(ruby: &magnus::Ruby, capacity: usize) -> RHash {
    use magnus::rb_sys::FromRawValue;
    match hash_constructor() {
        Some(new_hash) => {
            // SAFETY: see `hash_constructor`; the GVL is held (called from
            // a Ruby method) and the result is a new, unfrozen Hash.
            let hash = unsafe { Value::from_raw(new_hash(capacity as std::os::raw::c_long)) };
            RHash::from_value(hash).unwrap_or_else(|| ruby.hash_new())
        }
        None => ruby.hash_new(),
    }
}

/// `Hash#dup` without a method dispatch: copies the base env's table.
pub fn hash_dup(ruby: &magnus::Ruby, hash: RHash) -> Result<RHash, Error> {
    use magnus::rb_sys::{AsRawValue, FromRawValue};
    // SAFETY: rb_hash_dup takes a Hash VALUE (`hash` is a live RHash on the
    // stack) and returns a new Hash; the GVL is held, as in any Ruby method.
    let copy = unsafe { Value::from_raw(rb_sys::rb_hash_dup(hash.as_raw())) };
    RHash::from_value(copy).ok_or_else(|| Error::new(ruby.exception_type_error(), "base env is not a Hash"))
}

/// An entry of Ruby's `st_table` (st.c, private; the same from Ruby 2.4,
/// when tables became open-addressed, to 3.4): the key's hash, the key,
/// the value. `fill_in_place` checks every key it expects before it writes
/// a value, so a table laid out otherwise is never written to.
#[repr(C)]
struct StEntry {
    hash: rb_sys::st_index_t,
    key: rb_sys::VALUE,
    record: rb_sys::VALUE,
}

/// Stores `values` into `hash` by position: the keys must already be
/// there, one after another from entry `first` (a copy of an env template,
/// which holds them with placeholder values). A value set this way costs
/// no hashing of its key, no probe and no insert, which for the fourteen
/// entries every env gets were most of building it. Returns false, having
/// written nothing, when the table does not hold those keys there; the
/// caller then inserts the pairs as usual.
pub fn fill_in_place(hash: RHash, first: usize, keys: &[RString], values: &[Value]) -> bool {
    use magnus::rb_sys::AsRawValue;
    // SAFETY: GVL held (called while building an env, inside a Ruby
    // method); `hash` is a live, unfrozen Hash on the stack. rb_hash_tbl
    // returns its st_table (converting a small array table, which an env
    // copied from a template of 32 or more entries never is) and marks the
    // Hash write-barrier unprotected, which is what makes the stores below
    // without barriers legal: the GC then never assumes it saw every
    // reference the Hash holds. `entries_start..entries_bound` are the
    // table's entries in use; each position is checked to be inside them
    // and to hold the expected key (the same frozen String object) before
    // any value is written, so a layout other than `StEntry`'s, a table
    // rebuilt, or keys in another order write nothing.
    unsafe {
        let table = rb_sys::rb_hash_tbl(hash.as_raw(), c"rack_env".as_ptr(), 0);
        if table.is_null() {
            return false;
        }
        let table = &*table;
        let start = table.entries_start as usize + first;
        if keys.len() != values.len() || start + keys.len() > table.entries_bound as usize || table.entries.is_null() {
            return false;
        }
        let entries = table.entries.cast::<StEntry>().add(start);
        for (i, key) in keys.iter().enumerate() {
            if (*entries.add(i)).key != key.as_raw() {
                return false;
            }
        }
        for (i, value) in values.iter().enumerate() {
            (*entries.add(i)).record = value.as_raw();
        }
    }
    true
}

/// A frozen string with these bytes from Ruby's table of interned strings
/// (binary encoding, as `str_from_slice`): an existing one when the same
/// bytes are still in use by someone, so a value that repeats from request
/// to request (a `Host`, an `Accept`, the client's address) allocates
/// nothing. Unreferenced entries are collected like any string.
pub fn interned_str(bytes: &[u8]) -> Value {
    use magnus::rb_sys::FromRawValue;
    // SAFETY: rb_interned_str copies `len` bytes from `ptr` (a live slice,
    // or a static byte when empty) when it makes a new string and returns
    // a frozen String VALUE; it can
    // raise only NoMemoryError, as any allocation can. GVL held: called
    // while building the env, inside a Ruby method.
    // An empty slice's pointer may be dangling (0x1), and Ruby 3.1 reads
    // through it even for a length of 0: give it a real byte instead.
    let ptr = if bytes.is_empty() {
        c"".as_ptr().cast()
    } else {
        bytes.as_ptr()
    };
    unsafe { Value::from_raw(rb_sys::rb_interned_str(ptr.cast(), bytes.len() as std::os::raw::c_long)) }
}

/// How many `key => value` pairs `EnvPairs` gathers before it inserts them.
const ENV_PAIRS: usize = 32;
/// Up to this many pairs go in one by one (`rb_hash_aset`).
/// `rb_hash_bulk_insert` into a table that already holds entries appends
/// the pairs and then rehashes the whole table (every entry, to drop
/// duplicate keys): for a request with only a header or two (the Host of
/// a load balancer's probe, an API client's) that rehash of some thirty
/// entries was most of the env's cost after the copy (hello at -c50: the
/// env's share of the process's CPU 11.3% -> 8.5%). With a browser's
/// dozen headers one rehash is cheaper than a dozen inserts (13.6% ->
/// 20.0% when every pair went one by one).
const ONE_BY_ONE: usize = 4;

/// The per-request entries of a new env, gathered on the stack and put in
/// the hash with one `rb_hash_bulk_insert` (the C behind `{k => v, ...}`
/// literals; one rehash for all of them), or one by one when they are a
/// few (`ONE_BY_ONE`). A key given twice keeps the place of its first
/// insertion and the value of its last, as with `[]=`, either way.
pub struct EnvPairs {
    /// Raw VALUEs: on this thread's stack (the struct is a local of the
    /// env builder, never boxed), where Ruby's conservative GC sees them,
    /// so the strings made for later entries cannot collect earlier ones.
    raw: [rb_sys::VALUE; 2 * ENV_PAIRS],
    len: usize,
}

impl EnvPairs {
    pub fn new() -> Self {
        EnvPairs {
            raw: [rb_sys::Qnil as rb_sys::VALUE; 2 * ENV_PAIRS],
            len: 0,
        }
    }

    /// Adds `key => value`, inserting what was gathered into `hash` first
    /// if the buffer is full. `key` must be a frozen String (all env keys
    /// are), so the hash keeps it as it is.
    pub fn push(&mut self, hash: RHash, key: RString, value: Value) {
        use magnus::rb_sys::AsRawValue;
        if self.len == self.raw.len() {
            self.insert_into(hash);
        }
        self.raw[self.len] = key.as_raw();
        self.raw[self.len + 1] = value.as_raw();
        self.len += 2;
    }

    /// Inserts the gathered pairs into `hash` and empties the buffer.
    pub fn insert_into(&mut self, hash: RHash) {
        use magnus::rb_sys::AsRawValue;
        if self.len == 0 {
            return;
        }
        // SAFETY: `raw[..len]` holds `len / 2` key/value pairs of live
        // VALUEs (they are on the stack, see `raw`). rb_hash_aset and
        // rb_hash_bulk_insert raise only for a frozen hash or a key whose
        // #hash raises: the env was just made by `hash_dup` and is not
        // frozen, and its keys are frozen Strings (kept as they are, not
        // copied), hashed in C with no method call, so no exception can
        // longjmp through this frame. Both set the write barriers for the
        // entries themselves. GVL held: called from a Ruby method.
        unsafe {
            if self.len / 2 <= ONE_BY_ONE {
                for pair in self.raw[..self.len].chunks_exact(2) {
                    rb_sys::rb_hash_aset(hash.as_raw(), pair[0], pair[1]);
                }
            } else {
                rb_sys::rb_hash_bulk_insert(self.len as std::os::raw::c_long, self.raw.as_ptr(), hash.as_raw());
            }
        }
        self.len = 0;
    }
}

impl Default for EnvPairs {
    fn default() -> Self {
        Self::new()
    }
}

/// read(2) into `buf`, for the fiber scheduler's `io_read` hook: Ruby's
/// own reads would call that hook again.
pub fn read_fd(fd: i32, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: `buf` is a writable slice we own and read(2) writes at most
    // `buf.len()` bytes into it. `fd` is only a number to the kernel: a
    // closed or foreign one fails with EBADF, it cannot corrupt memory.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// write(2) from `buf`, for the fiber scheduler's `io_write` hook.
pub fn write_fd(fd: i32, buf: &[u8]) -> std::io::Result<usize> {
    // SAFETY: `buf` is a readable slice of `buf.len()` bytes; write(2) only
    // reads it. See `read_fd` about `fd`.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// Caps glibc's malloc arenas (Ruby's own allocations; Rust's go to
/// mimalloc). By default every thread that allocates may get an arena of
/// its own, up to 8 per core, and each keeps its high-water mark: a server's
/// Ruby threads, which run one at a time under the GVL anyway, make RSS
/// creep for no gain.
#[cfg(target_env = "gnu")]
pub fn limit_malloc_arenas(max: i32) {
    // SAFETY: mallopt only changes an allocator setting; M_ARENA_MAX may be
    // set at any time and applies to arenas created afterwards.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, max);
    }
}

#[cfg(not(target_env = "gnu"))]
pub fn limit_malloc_arenas(_max: i32) {}

/// Keeps glibc from handing memory back to the OS while requests run:
/// blocks up to `mmap_max` come from the heap, and the heap's top is given
/// back only past `trim_max` free (the idle trim, `idle_memory_trim`, gives
/// it all back once the server is quiet). With glibc's own thresholds a
/// 1 MiB upload read in 64 KiB strings could shrink the heap with `brk` as
/// the strings were freed and fault it back in for the next request:
/// whether it did changed from one process to the next with where the heap
/// happened to end, and a process that did served 0.7-0.8× the uploads.
#[cfg(target_env = "gnu")]
pub fn keep_malloc_heap(mmap_max: i32, trim_max: i32) {
    // SAFETY: mallopt only changes allocator settings, which may be set at
    // any time and apply to later allocations and frees.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap_max);
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim_max);
    }
}

#[cfg(not(target_env = "gnu"))]
pub fn keep_malloc_heap(_mmap_max: i32, _trim_max: i32) {}

/// Returns the calling thread's mimalloc cache (freed pages kept for
/// reuse, and blocks other threads freed) to the OS.
pub fn collect_allocator_cache() {
    // SAFETY: mi_collect only releases memory mimalloc itself holds free;
    // it is safe on any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// A large response body is sent from the app's own string instead of
/// being copied after the head (a 100 KiB body was 12% of the process's
/// CPU in that copy). The engine's `Bytes` for it points into a frozen
/// string that shares the app's buffer; the string is kept alive in a
/// slot of one Ruby array, which the GC always marks, until the engine
/// drops the `Bytes` (on its own thread, without the GVL): the drop only
/// queues the slot, and the next Ruby thread to send a response clears it.
pub fn pinned_bytes(s: RString) -> bytes::Bytes {
    use magnus::rb_sys::{AsRawValue, FromRawValue};
    release_pinned();
    // SAFETY: rb_str_new_frozen takes a live String (on this stack) and
    // returns a frozen one with the same bytes: the string itself if it is
    // frozen already, otherwise a new one that takes over its buffer, the
    // original then sharing it (a later change to the original copies
    // first, leaving this buffer as it is). A frozen string's bytes never
    // change, and only bodies of `PIN_AT` bytes and more come here, which
    // Ruby never embeds in the object, so the buffer does not move even if
    // GC.compact moves the object. GVL held: called from `respond`.
    let frozen = unsafe { rb_sys::rb_str_new_frozen(s.as_raw()) };
    let mut pins = lock(&PINS);
    let array = *pins.array.get_or_insert_with(|| {
        // SAFETY: a new Array, registered so the GC marks it (and so every
        // pinned string) for the life of the process. GVL held.
        unsafe {
            let array = rb_sys::rb_ary_new();
            rb_sys::rb_gc_register_mark_object(array);
            array
        }
    });
    let slot = pins.free.pop().unwrap_or_else(|| {
        pins.next += 1;
        pins.next - 1
    });
    // SAFETY: `array` is the registered Array and `frozen` a live String;
    // storing it there keeps it reachable until `release_pinned` clears the
    // slot. rb_ary_store grows the array as needed. GVL held.
    unsafe { rb_sys::rb_ary_store(array, slot as std::os::raw::c_long, frozen) };
    drop(pins);
    // SAFETY: `frozen` is a String (see above); its pointer and length stay
    // valid while it is alive and frozen, which the slot guarantees until
    // `PinnedSlice` is dropped.
    let (ptr, len) = match RString::from_value(unsafe { Value::from_raw(frozen) }) {
        Some(frozen) => {
            let text = unsafe { frozen.as_slice() };
            (text.as_ptr(), text.len())
        }
        None => (std::ptr::null(), 0),
    };
    bytes::Bytes::from_owner(PinnedSlice { ptr, len, slot })
}

/// Bodies shorter than this are copied: pinning costs a slot, a lock and
/// often an object, which only pays for itself past a few pages.
pub const PIN_AT: usize = 16 * 1024;

struct Pins {
    /// The registered Array's VALUE, made on first use.
    array: Option<rb_sys::VALUE>,
    free: Vec<usize>,
    next: usize,
}

static PINS: std::sync::Mutex<Pins> = std::sync::Mutex::new(Pins {
    array: None,
    free: Vec::new(),
    next: 0,
});
/// Slots whose bytes the engine is done with, queued by any thread.
static RELEASED: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
/// How many slots `RELEASED` holds, read without the lock on every reply.
static RELEASED_COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Clears the slots of bodies the engine has finished sending, so their
/// strings can be collected. Called with the GVL held, on every reply.
pub fn release_pinned() {
    use std::sync::atomic::Ordering;
    if RELEASED_COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let released = std::mem::take(&mut *lock(&RELEASED));
    RELEASED_COUNT.fetch_sub(released.len(), Ordering::AcqRel);
    let mut pins = lock(&PINS);
    let Some(array) = pins.array else {
        return;
    };
    for slot in released {
        // SAFETY: `array` is the registered Array; storing nil in a slot
        // below its length drops the reference. GVL held (see above).
        unsafe { rb_sys::rb_ary_store(array, slot as std::os::raw::c_long, rb_sys::Qnil as rb_sys::VALUE) };
        pins.free.push(slot);
    }
}

/// The engine's view of a pinned body.
struct PinnedSlice {
    ptr: *const u8,
    len: usize,
    slot: usize,
}

// SAFETY: the bytes behind `ptr` belong to a frozen Ruby string that the
// slot keeps alive until this is dropped, and nothing writes to them
// (see `pinned_bytes`), so reading them from another thread is sound;
// dropping touches no Ruby object, only the queue of released slots.
unsafe impl Send for PinnedSlice {}

impl AsRef<[u8]> for PinnedSlice {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: see `unsafe impl Send`: `ptr..ptr + len` is the live,
        // unchanging buffer of the pinned string.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for PinnedSlice {
    fn drop(&mut self) {
        lock(&RELEASED).push(self.slot);
        RELEASED_COUNT.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}
