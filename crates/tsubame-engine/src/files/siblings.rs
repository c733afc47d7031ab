//! Which precompressed siblings (`name.br`, `.zst`, `.gz`) a file has,
//! remembered per file while its directory stays as it was.
//!
//! Looking for them costs one `fstatat` per coding on every request, to
//! decide `Vary` even when the client accepts no encoding. A sibling can
//! only appear or go away by a name being added, removed or renamed in the
//! file's directory, and each of those sets the directory's modification
//! time, so one `fstatat` of the directory says whether an earlier answer
//! still holds. Timestamps are coarse (the kernel's tick), so two changes
//! within one tick can leave the same time: an answer is kept only for a
//! directory last changed over `SETTLED` ago, whose next change must carry
//! a later time.

use super::encoding::{Coding, CODINGS};
use super::locate::{DirStamp, Root};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long ago a directory must have changed for its answers to be kept.
const SETTLED: Duration = Duration::from_secs(2);

/// Answers kept at most; past it the table starts again empty (a folder
/// of more names than this pays the probes as before).
const MAX_KEPT: usize = 16_384;

#[derive(Debug, Default)]
pub(crate) struct Siblings {
    kept: Mutex<HashMap<PathBuf, (DirStamp, Found)>>,
}

impl Siblings {
    /// The codings `relative` (a file under `root`) has a sibling for.
    pub(crate) fn of(&self, root: &Root, relative: &Path) -> Found {
        let dir = relative.parent().unwrap_or(Path::new(""));
        let Some(stamp) = root.dir_stamp(dir).filter(settled) else {
            return probe(root, relative);
        };
        if let Ok(kept) = self.kept.lock() {
            if let Some((kept_stamp, codings)) = kept.get(relative) {
                if *kept_stamp == stamp {
                    return *codings;
                }
            }
        }
        let codings = probe(root, relative);
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
            kept.insert(relative.to_path_buf(), (stamp, codings));
        }
        codings
    }
}

fn settled(stamp: &DirStamp) -> bool {
    let (secs, nanos) = stamp.changed;
    let Ok(secs) = u64::try_from(secs) else {
        return false;
    };
    let changed = UNIX_EPOCH + Duration::new(secs, u32::try_from(nanos).unwrap_or(0));
    // A time in the future (a clock set back) is not settled either.
    SystemTime::now()
        .duration_since(changed)
        .is_ok_and(|ago| ago >= SETTLED)
}

/// The codings a file has siblings for, in `CODINGS` order: at most three,
/// so they are kept and handed out by value, with no allocation per request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found {
    codings: [Coding; CODINGS.len()],
    len: usize,
}

impl Found {
    pub(crate) fn as_slice(&self) -> &[Coding] {
        &self.codings[..self.len]
    }
}

/// One `fstatat` per coding, from the root; the chosen sibling is then
/// resolved and checked in full before it is served.
fn probe(root: &Root, relative: &Path) -> Found {
    let mut found = Found {
        codings: CODINGS,
        len: 0,
    };
    for coding in CODINGS {
        let mut name = relative.as_os_str().to_os_string();
        name.push(coding.suffix());
        if root.has(Path::new(&name)) {
            found.codings[found.len] = coding;
            found.len += 1;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File, FileTimes};

    /// Sets a directory's modification time to a fixed moment long ago.
    fn set_changed(path: &Path) {
        let when = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let dir = File::open(path).unwrap();
        dir.set_times(FileTimes::new().set_modified(when)).unwrap();
    }

    #[test]
    fn a_settled_directory_is_probed_once_and_a_change_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = fs::canonicalize(dir.path()).unwrap();
        let assets = root_path.join("assets");
        fs::create_dir(&assets).unwrap();
        fs::write(assets.join("app.css"), "a").unwrap();
        fs::write(assets.join("app.css.gz"), "g").unwrap();
        set_changed(&assets);
        let root = Root::new(root_path.clone());
        let siblings = Siblings::default();
        let name = Path::new("assets/app.css");
        assert_eq!(siblings.of(&root, name).as_slice(), [Coding::Gzip]);

        // The answer is kept: a sibling removed with the directory's time
        // put back (which no real change can do) is not noticed.
        fs::remove_file(assets.join("app.css.gz")).unwrap();
        set_changed(&assets);
        assert_eq!(siblings.of(&root, name).as_slice(), [Coding::Gzip]);

        // A real change sets the directory's time, so it is seen at once.
        fs::write(assets.join("app.css.br"), "b").unwrap();
        assert_eq!(siblings.of(&root, name).as_slice(), [Coding::Br]);
        fs::remove_file(assets.join("app.css.br")).unwrap();
        assert!(siblings.of(&root, name).as_slice().is_empty());
    }

    #[test]
    fn a_linked_directory_is_watched_through_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = fs::canonicalize(dir.path()).unwrap();
        let real = root_path.join("real");
        fs::create_dir(&real).unwrap();
        fs::write(real.join("app.js"), "a").unwrap();
        std::os::unix::fs::symlink(&real, root_path.join("link")).unwrap();
        set_changed(&real);
        // The link itself settled too, so only following it finds the change.
        let touched = std::process::Command::new("touch")
            .args(["-h", "-d", "@1700000000"])
            .arg(root_path.join("link"))
            .status()
            .unwrap();
        assert!(touched.success());
        let root = Root::new(root_path.clone());
        let siblings = Siblings::default();
        let name = Path::new("link/app.js");
        assert!(siblings.of(&root, name).as_slice().is_empty());
        fs::write(real.join("app.js.gz"), "g").unwrap();
        assert_eq!(siblings.of(&root, name).as_slice(), [Coding::Gzip]);
    }

    #[test]
    fn a_directory_changed_just_now_is_probed_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = fs::canonicalize(dir.path()).unwrap();
        fs::write(root_path.join("a.js"), "a").unwrap();
        let root = Root::new(root_path.clone());
        let siblings = Siblings::default();
        assert!(siblings.of(&root, Path::new("a.js")).as_slice().is_empty());
        fs::write(root_path.join("a.js.zst"), "z").unwrap();
        assert_eq!(siblings.of(&root, Path::new("a.js")).as_slice(), [Coding::Zstd]);
        assert!(
            siblings.kept.lock().unwrap().is_empty(),
            "nothing kept for a fresh directory"
        );
    }
}
