//! Finding a decoded path on disk, inside the root and nowhere else.

use std::fs::{File, Metadata};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The public folder's root: its canonical path, and a descriptor for it
/// so names are opened relative to it with the kernel keeping them inside
/// (openat2 RESOLVE_BENEATH, Linux 5.6+): one syscall where a realpath
/// walk takes one per path component.
#[derive(Debug)]
pub(crate) struct Root {
    pub(crate) path: PathBuf,
    dir: Option<OwnedFd>,
    /// Cleared the first time the kernel says it has no openat2 (or a
    /// sandbox forbids it): from then on the realpath walk is used.
    beneath: AtomicBool,
}

impl Root {
    /// `path` must be canonical.
    pub(crate) fn new(path: PathBuf) -> Root {
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&path)
            .ok()
            .map(OwnedFd::from);
        Root {
            beneath: AtomicBool::new(dir.is_some()),
            path,
            dir,
        }
    }

    /// Whether something is at `relative` (a symlink counts as itself): a
    /// hint, checked in full by `locate` before anything is served.
    pub(crate) fn has(&self, relative: &Path) -> bool {
        match &self.dir {
            Some(dir) => crate::sys::exists_under(dir.as_fd(), relative),
            None => std::fs::symlink_metadata(self.path.join(relative)).is_ok(),
        }
    }
}

impl Root {
    /// When the directory `relative` (empty: the root) last changed, and
    /// which directory it is; None if it cannot be looked at. A symlink to
    /// a directory is followed: names come and go in the directory.
    pub(crate) fn dir_stamp(&self, relative: &Path) -> Option<DirStamp> {
        let name = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        match &self.dir {
            Some(dir) => crate::sys::stat_under(dir.as_fd(), name, true).map(|st| DirStamp {
                dev: st.st_dev,
                ino: st.st_ino,
                changed: (st.st_mtime, st.st_mtime_nsec),
            }),
            None => {
                use std::os::unix::fs::MetadataExt;
                let meta = std::fs::metadata(self.path.join(relative)).ok()?;
                Some(DirStamp {
                    dev: meta.dev(),
                    ino: meta.ino(),
                    changed: (meta.mtime(), meta.mtime_nsec()),
                })
            }
        }
    }
}

/// A directory and its modification time (seconds, nanoseconds since the
/// epoch): adding, removing or renaming a name in it changes the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirStamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) changed: (i64, i64),
}

/// What a relative path names under the root.
#[derive(Debug)]
pub(crate) enum Located {
    /// A regular file, open.
    File(File, Metadata),
    Directory,
    /// Nothing there (or nothing this process may read): the app answers.
    Missing,
    /// Something that must not be served: a symlink leading outside the
    /// root, a device, a FIFO, a socket. Answered 404.
    Refused,
}

/// Resolves `relative` (plain names, already checked by `path::parse`)
/// under `root`, which must be canonical. Symlinks are followed and the
/// result must still be inside the root; only a regular file is opened,
/// and it is checked again once open, so a name swapped for a FIFO or
/// a link between the check and the open is not served either.
pub(crate) fn locate(root: &Root, relative: &Path) -> Located {
    if let Some(dir) = root.dir.as_ref().filter(|_| root.beneath.load(Ordering::Relaxed)) {
        let name = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        match crate::sys::open_beneath(dir.as_fd(), name) {
            Ok(file) => return opened(file),
            Err(e) => match e.raw_os_error() {
                // The kernel will not follow it beneath the root: an
                // absolute link (which may still land inside), `..` through
                // a link, a /proc magic link, a loop. Rare; the walk decides
                // as it always did.
                Some(libc::EXDEV | libc::ELOOP) => return walk(&root.path, relative),
                // No openat2 here: walk instead, now and from now on.
                Some(libc::ENOSYS | libc::EPERM | libc::EINVAL | libc::E2BIG) => {
                    root.beneath.store(false, Ordering::Relaxed)
                }
                _ => return Located::Missing,
            },
        }
    }
    walk(&root.path, relative)
}

/// What an opened name is: only a regular file is served. A device node
/// is opened (non-blocking, no controlling tty) before this looks at it;
/// one inside a public folder would have been put there by root.
fn opened(file: File) -> Located {
    match file.metadata() {
        Ok(meta) if meta.is_file() => Located::File(file, meta),
        Ok(meta) if meta.is_dir() => Located::Directory,
        Ok(_) => Located::Refused,
        Err(_) => Located::Missing,
    }
}

/// The same without openat2: resolve every link with realpath, check the
/// result is inside the root, then open it.
fn walk(root: &Path, relative: &Path) -> Located {
    let Ok(real) = std::fs::canonicalize(root.join(relative)) else {
        return Located::Missing;
    };
    if !real.starts_with(root) {
        return Located::Refused;
    }
    let Ok(meta) = std::fs::metadata(&real) else {
        return Located::Missing;
    };
    if meta.is_dir() {
        return Located::Directory;
    }
    if !meta.is_file() {
        return Located::Refused;
    }
    // O_NONBLOCK: opening a FIFO put there since the check must not wait
    // for a writer. O_NOFOLLOW: the canonical name has no links left.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(&real);
    match opened.and_then(|file| file.metadata().map(|meta| (file, meta))) {
        Ok((file, meta)) if meta.is_file() => Located::File(file, meta),
        Ok(_) => Located::Refused,
        Err(_) => Located::Missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_directories_links_and_fifos() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root_path = std::fs::canonicalize(dir.path()).unwrap();
        let root = Root::new(root_path.clone());
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::fs::write(root_path.join("a.txt"), "a").unwrap();
        std::fs::create_dir(root_path.join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root_path.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root_path.join("outdir")).unwrap();
        std::os::unix::fs::symlink(root_path.join("a.txt"), root_path.join("in")).unwrap();
        let fifo = std::ffi::CString::new(root_path.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
        assert!(std::process::Command::new("mkfifo")
            .arg(fifo.to_str().unwrap())
            .status()
            .unwrap()
            .success());
        assert!(matches!(locate(&root, Path::new("a.txt")), Located::File(_, m) if m.len() == 1));
        assert!(matches!(locate(&root, Path::new("in")), Located::File(..)));
        assert!(matches!(locate(&root, Path::new("sub")), Located::Directory));
        assert!(matches!(locate(&root, Path::new("nope")), Located::Missing));
        assert!(matches!(locate(&root, Path::new("out")), Located::Refused));
        assert!(matches!(locate(&root, Path::new("outdir/secret")), Located::Refused));
        assert!(matches!(locate(&root, Path::new("fifo")), Located::Refused));
        assert!(matches!(locate(&root, Path::new("a.txt/x")), Located::Missing));
        assert!(
            matches!(locate(&root, Path::new("")), Located::Directory),
            "the root itself"
        );
        std::os::unix::fs::symlink("a.txt", root_path.join("relative")).unwrap();
        assert!(matches!(locate(&root, Path::new("relative")), Located::File(..)));
        std::os::unix::fs::symlink("../../etc/passwd", root_path.join("sub/up")).unwrap();
        assert!(matches!(
            locate(&root, Path::new("sub/up")),
            Located::Refused | Located::Missing
        ));
        assert!(root.has(Path::new("a.txt")) && root.has(Path::new("out")) && !root.has(Path::new("nope")));
        // The same answers without openat2.
        let walked = Root::new(root_path.clone());
        walked.beneath.store(false, Ordering::Relaxed);
        assert!(matches!(locate(&walked, Path::new("in")), Located::File(..)));
        assert!(matches!(locate(&walked, Path::new("out")), Located::Refused));
    }
}
