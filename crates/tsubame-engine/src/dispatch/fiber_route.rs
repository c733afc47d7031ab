//! Which requests run on the Ruby fiber loop instead of the thread pool
//! (`fiber_paths`): path prefixes, and Ruby regexps translated to the
//! `regex` crate's syntax. A pattern that cannot be translated fails the
//! boot: silently sending a route to the wrong pool would be worse.

use regex::bytes::RegexSet;
use std::fmt;

/// One `fiber_paths` entry as the configuration gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FiberPath {
    /// Matches a path that starts with this string.
    Prefix(String),
    /// A Ruby `Regexp#source` with its `i`, `x`, `m` options.
    Pattern {
        source: String,
        ignore_case: bool,
        extended: bool,
        multiline: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    pub source: String,
    pub reason: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fiber_paths pattern /{}/ is not supported: {}",
            self.source, self.reason
        )
    }
}

impl std::error::Error for PatternError {}

/// The compiled routes; with no entries at all every request goes to fibers.
#[derive(Debug, Clone)]
pub struct FiberRoutes {
    prefixes: Vec<Vec<u8>>,
    patterns: Option<RegexSet>,
}

impl FiberPath {
    /// Ruby's `^`/`$` always match at line ends and its `m` is the dot
    /// matching a newline, so the flags map to `(?m)` always and `(?s)`.
    fn translated(&self) -> Option<String> {
        match self {
            FiberPath::Prefix(_) => None,
            FiberPath::Pattern {
                source,
                ignore_case,
                extended,
                multiline,
            } => {
                let mut flags = String::from("m");
                if *ignore_case {
                    flags.push('i');
                }
                if *extended {
                    flags.push('x');
                }
                if *multiline {
                    flags.push('s');
                }
                Some(format!("(?{flags}){source}"))
            }
        }
    }
}

/// Checks one pattern alone, so a config file can name the line it is on.
pub fn check_pattern(path: &FiberPath) -> Result<(), PatternError> {
    FiberRoutes::compile(std::slice::from_ref(path)).map(|_| ())
}

impl FiberRoutes {
    pub fn compile(paths: &[FiberPath]) -> Result<FiberRoutes, PatternError> {
        let mut prefixes = Vec::new();
        let mut sources = Vec::new();
        for path in paths {
            match path {
                FiberPath::Prefix(prefix) => prefixes.push(prefix.as_bytes().to_vec()),
                pattern => {
                    let translated = pattern.translated().unwrap_or_default();
                    // Compiled alone first so the error names the pattern.
                    if let Err(e) = regex::bytes::Regex::new(&translated) {
                        let source = match pattern {
                            FiberPath::Pattern { source, .. } => source.clone(),
                            FiberPath::Prefix(p) => p.clone(),
                        };
                        return Err(PatternError {
                            source,
                            reason: e.to_string().lines().last().unwrap_or("invalid").trim().to_string(),
                        });
                    }
                    sources.push(translated);
                }
            }
        }
        let patterns = if sources.is_empty() {
            None
        } else {
            Some(RegexSet::new(&sources).map_err(|e| PatternError {
                source: sources.join(" | "),
                reason: e.to_string(),
            })?)
        };
        Ok(FiberRoutes { prefixes, patterns })
    }

    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty() && self.patterns.is_none()
    }

    /// `target` is the request target as sent; only its path is matched.
    pub fn matches(&self, target: &[u8]) -> bool {
        if self.is_empty() {
            return true;
        }
        let path = match memchr::memchr(b'?', target) {
            Some(end) => &target[..end],
            None => target,
        };
        self.prefixes.iter().any(|p| path.starts_with(p))
            || self.patterns.as_ref().is_some_and(|set| set.is_match(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(source: &str) -> FiberPath {
        FiberPath::Pattern {
            source: source.into(),
            ignore_case: false,
            extended: false,
            multiline: false,
        }
    }

    #[test]
    fn prefixes_and_patterns_match_the_path_only() {
        let routes = FiberRoutes::compile(&[
            FiberPath::Prefix("/io/".into()),
            pattern(r"\A/api/v\d+/slow\z"),
            FiberPath::Pattern {
                source: "^/UP".into(),
                ignore_case: true,
                extended: false,
                multiline: false,
            },
        ])
        .unwrap();
        assert!(routes.matches(b"/io/sleep?x=1"));
        assert!(!routes.matches(b"/cpu?/io/"));
        assert!(routes.matches(b"/api/v2/slow?q"));
        assert!(!routes.matches(b"/api/v2/slower"));
        assert!(routes.matches(b"/upstream"));
        assert!(!routes.matches(b"/"));
    }

    #[test]
    fn no_entries_means_every_request() {
        let routes = FiberRoutes::compile(&[]).unwrap();
        assert!(routes.is_empty());
        assert!(routes.matches(b"/anything"));
    }

    #[test]
    fn ruby_only_syntax_is_refused_with_the_pattern_named() {
        let err = check_pattern(&pattern(r"\A/(?=io)")).unwrap_err();
        assert_eq!(err.source, r"\A/(?=io)");
        assert!(err.to_string().contains("fiber_paths pattern"), "{err}");
        assert!(check_pattern(&pattern(r"/io/\d+")).is_ok());
    }
}
