//! The engine's only `unsafe` code: the few OS calls that neither std nor
//! tokio offers as safe functions. Every function here is safe to call;
//! the comment at each `unsafe` block says why the call inside is sound.
//! The rest of the crate is compiled with `deny(unsafe_code)`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::net::TcpListener {}
    impl Sealed for std::os::unix::net::UnixListener {}
    impl Sealed for std::os::unix::net::UnixDatagram {}
}

/// A listener that owns its descriptor and reports that same descriptor
/// until it is dropped: what tokio's `AsyncFd` registration requires.
/// Sealed, so only std's own listener types qualify.
pub trait OwnedListener: AsRawFd + sealed::Sealed {}
impl OwnedListener for std::net::TcpListener {}
impl OwnedListener for std::os::unix::net::UnixListener {}
/// The hand-off socket a WebSocket worker reads (`handoff.rs`): not a
/// listener, but it owns its descriptor just the same.
impl OwnedListener for std::os::unix::net::UnixDatagram {}

/// Registers `listener` with the current tokio reactor for readability.
/// Needs a runtime context.
pub(crate) fn register_readable<L: OwnedListener>(listener: L) -> io::Result<AsyncFd<L>> {
    // SAFETY: `L` is a std listener (the trait is sealed): it owns its
    // descriptor, which stays open and the same until the listener is
    // dropped, and the AsyncFd owns the listener, so the registration never
    // outlives the descriptor.
    unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) }.map_err(io::Error::from)
}

/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC: the new connection comes
/// out ready for tokio, where std's accept needs a further ioctl per
/// connection to make it non-blocking (a thousand connections arriving at
/// once pay it a thousand times). Returns the descriptor and the peer's
/// address.
pub(crate) fn accept_nonblocking<L: OwnedListener>(listener: &L) -> io::Result<(OwnedFd, socket2::SockAddr)> {
    let listening = listener.as_raw_fd();
    // SAFETY: `try_init` hands accept4 a zeroed sockaddr_storage and its
    // size; accept4 writes at most that many bytes and the actual length,
    // which is what `try_init` requires of the closure.
    let (fd, peer) = unsafe {
        socket2::SockAddr::try_init(|storage, len| {
            let fd = libc::accept4(listening, storage.cast(), len, libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(fd)
            }
        })
    }?;
    // SAFETY: accept4 succeeded, so `fd` is a new open descriptor that
    // nothing else owns.
    Ok((unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }, peer))
}

/// What `getrusage` says of this process (`RUSAGE_SELF`) or of the calling
/// thread (`RUSAGE_THREAD`): the CPU time used so far (user and system),
/// and how many times the kernel took a core while it could still run
/// (involuntary context switches). Zero if it cannot be read.
pub(crate) fn usage(who: libc::c_int) -> (std::time::Duration, u64) {
    // SAFETY: a zeroed rusage is a valid value of that plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is handed, which lives on
    // this frame for the whole call.
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return (std::time::Duration::ZERO, 0);
    }
    let time = |t: libc::timeval| {
        std::time::Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + std::time::Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    let cpu = time(usage.ru_utime) + time(usage.ru_stime);
    (cpu, u64::try_from(usage.ru_nivcsw).unwrap_or(0))
}

/// Asks glibc to return the free memory in its arenas to the OS
/// (`malloc_trim(0)`); true if any was. Elsewhere a no-op.
#[cfg(target_env = "gnu")]
pub(crate) fn release_free_heap() -> bool {
    // SAFETY: malloc_trim takes each arena's lock while it works, so it is
    // safe while other threads allocate and free.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(target_env = "gnu"))]
pub(crate) fn release_free_heap() -> bool {
    false
}

/// A new descriptor for whatever the inherited descriptor `fd` refers to,
/// or EBADF if `fd` is not open.
pub(crate) fn duplicate(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl(F_GETFD) only reads the descriptor's flags; it fails
    // with EBADF, touching nothing, when fd is not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just checked to be open, and the borrow ends within
    // this call (the duplicate is a new descriptor), before anything here
    // could close it.
    unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
}

/// Blocks every signal on the calling thread.
pub(crate) fn block_all_signals() {
    // SAFETY: sigfillset initialises the set it is given, and
    // pthread_sigmask only changes the calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// The soft limit on open descriptors, if the kernel tells it.
pub(crate) fn open_files_soft_limit() -> Option<u64> {
    // SAFETY: getrlimit writes into the struct it is given and nothing
    // else; a zeroed rlimit is a valid value of that plain C struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        (libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0).then_some(limit.rlim_cur)
    }
}

/// sendfile(2): copies up to `count` bytes of `file`, from `*offset`, to
/// the socket `out` inside the kernel, and advances `*offset` by the bytes
/// sent. Returns that count; 0 means the file ends at `*offset` (it is
/// shorter than the caller thought). A non-blocking socket that is full
/// gives `WouldBlock`. The file's own position is not used or moved.
pub(crate) fn sendfile(out: BorrowedFd<'_>, file: BorrowedFd<'_>, offset: &mut u64, count: usize) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(*offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // Linux sends at most 0x7ffff000 bytes a call anyway.
    let count = count.min(0x7fff_f000);
    // SAFETY: both descriptors are borrowed, so they stay open for the
    // call; `off` is a live local that sendfile reads and updates and
    // nothing else aliases; sendfile touches no other memory of ours.
    let n = unsafe { libc::sendfile(out.as_raw_fd(), file.as_raw_fd(), &mut off, count) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    *offset = off as u64;
    Ok(n as usize)
}

/// send(2) with MSG_MORE: queues `buf` on the socket `out` without pushing
/// it, so the bytes that follow (a file's, by sendfile) share its packets.
/// The next write without the flag pushes everything. Returns how many
/// bytes the socket took; a full non-blocking socket gives `WouldBlock`.
pub(crate) fn send_more(out: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the descriptor is borrowed, so it stays open for the call;
    // send reads exactly `buf.len()` bytes from `buf`, a live slice, and
    // writes no memory of ours. MSG_NOSIGNAL turns a closed peer into
    // EPIPE instead of a SIGPIPE.
    let n = unsafe {
        libc::send(
            out.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_MORE | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// sendmsg(2) of `bufs`, in order, to the socket `fd` without waiting:
/// MSG_DONTWAIT makes a full socket answer `WouldBlock` (whether or not the
/// descriptor is in non-blocking mode) and MSG_NOSIGNAL makes a closed
/// peer answer EPIPE instead of raising SIGPIPE. Returns how many bytes
/// the socket took, which may be fewer than all (the caller keeps the
/// rest). For a thread outside the runtime that writes to a socket a task
/// owns: the caller must know `fd` is still that socket (see
/// `upgrade/registry.rs`, which only holds it while the session runs).
pub fn send_nonblocking(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // An iovec array longer than IOV_MAX is refused by the kernel; callers
    // pass two or three pieces.
    let count = bufs.len().min(1024);
    // SAFETY: `msghdr` is a plain C struct, for which all zeroes is a valid
    // value (no address, no control data). IoSlice is ABI-compatible with
    // iovec on Unix (std guarantees it), so `msg_iov` points at `count`
    // live iovecs, each describing a slice borrowed for this call; sendmsg
    // only reads those bytes (the `*mut` is the C signature's, nothing is
    // written through it) and writes no memory of ours. A descriptor that
    // is not, or no longer, a socket gives EBADF or ENOTSOCK, not undefined
    // behaviour: the call is sound whatever `fd` is, and which socket it
    // reaches is the caller's business (see above).
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = count as _;
        libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// sendmsg(2) of one datagram, `payload`, carrying the descriptor `fd`
/// (SCM_RIGHTS), on the UNIX datagram socket `socket`, without waiting: a
/// full socket answers `WouldBlock`. The receiving process gets its own
/// descriptor for the same open socket (`handoff.rs`). `fd` is passed
/// as a number: the kernel looks it up, and one that is not open gives
/// EBADF.
pub(crate) fn send_with_fd(socket: BorrowedFd<'_>, fd: RawFd, payload: &[u8]) -> io::Result<()> {
    let space = cmsg_space(1);
    let mut control = control_buffer(space);
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let msg = msghdr_over(&mut iov, &mut control, space);
    // SAFETY: `msg` points at `iov`, which describes `payload` (a live
    // slice that sendmsg only reads; the `*mut` is the C signature's), and
    // at `control`, a live buffer of CMSG_SPACE(sizeof(int)) bytes aligned
    // for cmsghdr: CMSG_FIRSTHDR of a msghdr with that control length is
    // non-null and points at its start, and CMSG_DATA leaves room for
    // exactly one int, written unaligned. The socket is borrowed, so it
    // stays open for the call.
    let n = unsafe {
        let header = libc::CMSG_FIRSTHDR(&msg);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), fd);
        libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != payload.len() {
        // A datagram goes whole or not at all; anything else is a bug.
        return Err(io::ErrorKind::WriteZero.into());
    }
    Ok(())
}

/// recvmsg(2) of one datagram from the UNIX datagram socket `socket` into
/// `buf`, without waiting, with the descriptor it carries if any (made
/// close-on-exec). Returns the datagram's length and the descriptor. A
/// datagram longer than `buf` gives `InvalidData` (its descriptor, if
/// any, is closed); so does one with more than one descriptor, all of
/// which are closed.
pub(crate) fn recv_with_fd(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    // Room for a few descriptors, so a sender that passes more than one
    // is seen (and its descriptors closed) rather than silently cut.
    let space = cmsg_space(4);
    let mut control = control_buffer(space);
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut msg = msghdr_over(&mut iov, &mut control, space);
    // SAFETY: `msg` points at `iov`, over `buf` (live; recvmsg writes at
    // most its length into it), and at `control`, `space` live bytes
    // aligned for cmsghdr. After the call the kernel has set
    // msg_controllen to the bytes it wrote, and CMSG_FIRSTHDR/CMSG_NXTHDR
    // walk only headers within it; each SCM_RIGHTS header's data holds
    // (cmsg_len - CMSG_LEN(0)) / sizeof(int) descriptors the kernel just
    // installed in this process, owned by nobody else, read unaligned.
    let (n, flags) = unsafe {
        let n = libc::recvmsg(
            socket.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        );
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                let count = ((*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    fds.push(<OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
        (n as usize, msg.msg_flags)
    };
    if flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 || fds.len() > 1 {
        return Err(io::ErrorKind::InvalidData.into());
    }
    Ok((n, fds.pop()))
}

/// CMSG_SPACE for `fds` descriptors.
fn cmsg_space(fds: usize) -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    unsafe { libc::CMSG_SPACE((fds * std::mem::size_of::<RawFd>()) as u32) as usize }
}

/// A zeroed control buffer of at least `len` bytes, in u64 words so that
/// it is aligned for `cmsghdr` (a Vec<u8> promises no alignment).
fn control_buffer(len: usize) -> Vec<u64> {
    vec![0u64; len.div_ceil(8)]
}

/// A msghdr over one iovec and the first `control_len` bytes of
/// `control`, for sendmsg and recvmsg. It only holds pointers: the caller
/// keeps both alive, and in place, while the kernel uses them.
fn msghdr_over(iov: &mut libc::iovec, control: &mut [u64], control_len: usize) -> libc::msghdr {
    // SAFETY: msghdr is a plain C struct; all zeroes (no address, no
    // iovecs, no control data) is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control_len.min(control.len() * 8) as _;
    msg
}

/// openat2(2) of `path` under the directory `dir` with RESOLVE_BENEATH
/// and RESOLVE_NO_MAGICLINKS: the kernel refuses (EXDEV, ELOOP) any
/// resolution that would leave `dir`, through `..`, an absolute path or a
/// symlink, so the public folder needs no realpath walk of its own. Opens
/// read-only, non-blocking (a FIFO never waits for a writer) and
/// close-on-exec. ENOSYS on kernels before 5.6 (the caller falls back).
pub(crate) fn open_beneath(dir: BorrowedFd<'_>, path: &std::path::Path) -> io::Result<std::fs::File> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput)?;
    // Zeroed, then filled: the kernel refuses unknown non-zero fields.
    // SAFETY: open_how is three u64 fields; all zeroes is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `path` is a NUL-terminated string and `how` a valid open_how
    // of the size passed, both alive for the call; the descriptor returned
    // is new and owned by nobody else, so `File` may take it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above: `fd` is a fresh descriptor only this call owns.
    Ok(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd as RawFd) })
}

/// Whether `path` names anything under `dir` (fstatat without following a
/// final symlink): a cheap hint, with the walk starting at `dir` instead
/// of `/`.
pub(crate) fn exists_under(dir: BorrowedFd<'_>, path: &std::path::Path) -> bool {
    stat_under(dir, path, false).is_some()
}

/// `fstatat` of `path` beneath `dir`; a final symlink is followed only
/// when `follow` says so (those before it always are).
pub(crate) fn stat_under(dir: BorrowedFd<'_>, path: &std::path::Path, follow: bool) -> Option<libc::stat> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `path` is NUL-terminated and `stat` points to writable
    // memory of the right type, both alive for the call; the result is
    // only read when the call succeeded, which fills it.
    unsafe {
        (libc::fstatat(
            dir.as_raw_fd(),
            path.as_ptr(),
            stat.as_mut_ptr(),
            if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW },
        ) == 0)
            .then(|| stat.assume_init())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn send_more_holds_the_head_until_the_body_follows() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut client, _) = listener.accept().unwrap();
        assert_eq!(send_more(server.as_fd(), b"HTTP/1.1 200 OK\r\n\r\n").unwrap(), 19);
        std::thread::sleep(std::time::Duration::from_millis(20));
        client.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        let held = client.read(&mut buf);
        assert_eq!(
            held.map_err(|e| e.kind()),
            Err(io::ErrorKind::WouldBlock),
            "the head went out alone"
        );
        (&server).write_all(b"body").unwrap();
        client.set_nonblocking(false).unwrap();
        let n = client.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"HTTP/1.1 200 OK\r\n\r\nbody");
    }

    #[test]
    fn send_nonblocking_sends_pieces_in_order_and_never_waits() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let pieces = [io::IoSlice::new(b"\x81\x05"), io::IoSlice::new(b"hello")];
        assert_eq!(send_nonblocking(a.as_raw_fd(), &pieces).unwrap(), 7);
        let mut buf = [0u8; 16];
        let n = b.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"\x81\x05hello");
        // The socket is in blocking mode; the call still returns once the
        // buffer is full instead of waiting for the peer to read.
        let big = vec![7u8; 64 * 1024];
        let mut total = 0;
        let full = loop {
            match send_nonblocking(a.as_raw_fd(), &[io::IoSlice::new(&big)]) {
                Ok(n) => total += n,
                Err(e) => break e,
            }
            assert!(total < 64 << 20, "a socket buffer never filled");
        };
        assert_eq!(full.kind(), io::ErrorKind::WouldBlock);
        assert!(total > 0);
        drop(b);
        let closed = send_nonblocking(a.as_raw_fd(), &[io::IoSlice::new(b"x")]).unwrap_err();
        assert_eq!(
            closed.kind(),
            io::ErrorKind::BrokenPipe,
            "EPIPE, and no SIGPIPE killed the test"
        );
    }

    #[test]
    fn sendfile_copies_a_range_and_reports_the_end_of_the_file() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"0123456789").unwrap();
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut offset = 3;
        assert_eq!(sendfile(a.as_fd(), file.as_fd(), &mut offset, 4).unwrap(), 4);
        assert_eq!(offset, 7);
        assert_eq!(sendfile(a.as_fd(), file.as_fd(), &mut offset, 100).unwrap(), 3);
        assert_eq!(sendfile(a.as_fd(), file.as_fd(), &mut offset, 100).unwrap(), 0);
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"3456789");
    }
}
