//! Finding a decoded path on disk, inside the root and nowhere else.

use std::fs::{File, Metadata};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

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
pub(crate) fn locate(root: &Path, relative: &Path) -> Located {
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
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("outdir")).unwrap();
        std::os::unix::fs::symlink(root.join("a.txt"), root.join("in")).unwrap();
        let fifo = std::ffi::CString::new(root.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
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
    }
}
