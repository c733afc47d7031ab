//! The public folder (`public_dir`): static files answered by the engine
//! before a request reaches the app. GET and HEAD only; a name that is not
//! in the folder goes on to the app. One concern per file: `path.rs`
//! decodes and refuses request paths, `locate.rs` finds them on disk
//! inside the root, `conditional.rs` has the validators and 304s,
//! `range.rs` the byte ranges, `encoding.rs` the precompressed siblings
//! (`siblings.rs` remembers which a file has),
//! `content_type.rs` the types, `reply.rs` builds the responses.

mod conditional;
mod content_type;
pub(crate) mod encoding;
mod locate;
mod path;
mod range;
mod reply;
mod siblings;

use crate::dispatch::reply::Reply;
use crate::message::head::RequestHead;
use locate::Located;
use path::PathError;
use regex::Regex;
use std::path::{Path, PathBuf};

/// The public folder as configured, ready to answer.
#[derive(Debug)]
pub struct Public {
    /// Canonical, so a resolved name can be checked to be inside it; with
    /// a descriptor to open names beneath it.
    root: locate::Root,
    index: bool,
    /// File names (the last segment) that get `Cache-Control: public,
    /// max-age=31536000, immutable`.
    immutable: Option<Regex>,
    siblings: siblings::Siblings,
}

/// Why the public folder could not be set up.
#[derive(Debug)]
pub enum PublicError {
    Root(PathBuf, std::io::Error),
    NotADirectory(PathBuf),
    Pattern(String),
}

impl std::fmt::Display for PublicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PublicError::Root(dir, e) => write!(f, "public_dir {}: {e}", dir.display()),
            PublicError::NotADirectory(dir) => write!(f, "public_dir {}: not a directory", dir.display()),
            PublicError::Pattern(e) => write!(f, "public_immutable: {e}"),
        }
    }
}

impl std::error::Error for PublicError {}

impl Public {
    pub fn new(dir: &Path, index: bool, immutable: Option<&str>) -> Result<Public, PublicError> {
        let root = std::fs::canonicalize(dir).map_err(|e| PublicError::Root(dir.to_path_buf(), e))?;
        if !root.is_dir() {
            return Err(PublicError::NotADirectory(dir.to_path_buf()));
        }
        let immutable = immutable
            .map(Regex::new)
            .transpose()
            .map_err(|e| PublicError::Pattern(e.to_string()))?;
        Ok(Public {
            root: locate::Root::new(root),
            index,
            immutable,
            siblings: siblings::Siblings::default(),
        })
    }

    /// The reply for `head` if the public folder answers it; None sends the
    /// request on to the app.
    pub(crate) fn answer(&self, head: &RequestHead, keep_alive: bool) -> Option<Reply> {
        let method = &head.method[..];
        if method != b"GET" && method != b"HEAD" {
            return None;
        }
        let request = reply::Request::new(head, keep_alive);
        let parsed = match path::parse(&head.path) {
            Ok(parsed) => parsed,
            Err(PathError::NotMine) => return None,
            Err(PathError::Malformed) => return request.refusal(400),
            Err(PathError::Refused) => return request.refusal(404),
        };
        let mut relative: PathBuf = parsed.segments.iter().collect();
        let (file, meta) = match locate::locate(&self.root, &relative) {
            Located::File(..) if parsed.trailing_slash => return None,
            Located::File(file, meta) => (file, meta),
            Located::Directory if self.index && parsed.trailing_slash => {
                relative.push("index.html");
                match locate::locate(&self.root, &relative) {
                    Located::File(file, meta) => (file, meta),
                    Located::Refused => return request.refusal(404),
                    Located::Directory | Located::Missing => return None,
                }
            }
            Located::Directory | Located::Missing => return None,
            Located::Refused => return request.refusal(404),
        };
        let name = relative
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let immutable = self.immutable.as_ref().is_some_and(|re| re.is_match(&name));
        let found = self.siblings.of(&self.root, &relative);
        let available = found.as_slice();
        let mut chosen = reply::Chosen {
            file,
            meta,
            content_type: content_type::for_name(&name),
            immutable,
            encoding: None,
            vary: !available.is_empty(),
        };
        if let Some(coding) = encoding::choose(request.header(b"accept-encoding"), available) {
            let mut sibling = relative.into_os_string();
            sibling.push(coding.suffix());
            // Checked like any other name; if it went away meanwhile, the
            // file itself is served.
            if let Located::File(file, meta) = locate::locate(&self.root, Path::new(&sibling)) {
                chosen.file = file;
                chosen.meta = meta;
                chosen.encoding = Some(coding);
            }
        }
        request.serve(chosen)
    }
}
