//! Which request methods reach the app (Puma's `supported_http_methods`).
//! Anything else is answered 501 by the engine, before the app sees it.

use crate::message::head::KNOWN_METHODS;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MethodPolicy {
    /// The engine's own list (`KNOWN_METHODS`), checked by the parser.
    #[default]
    Known,
    /// Any method that is a valid token, as Puma's `:any` (and Puma 5).
    Any,
    /// Exactly these methods, compared case-sensitively (RFC 9110 §9.1).
    Only(Vec<Vec<u8>>),
}

impl MethodPolicy {
    pub fn allows(&self, method: &[u8]) -> bool {
        match self {
            MethodPolicy::Known => KNOWN_METHODS.contains(&method),
            MethodPolicy::Any => true,
            MethodPolicy::Only(list) => list.iter().any(|m| m == method),
        }
    }

    /// Whether the HTTP/1 parser may leave the method to `allows` (the
    /// parser itself only knows the default list).
    pub fn parser_checks(&self) -> bool {
        matches!(self, MethodPolicy::Known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_is_the_default_list() {
        assert!(MethodPolicy::Known.allows(b"GET"));
        assert!(MethodPolicy::Known.allows(b"PROPFIND"));
        assert!(!MethodPolicy::Known.allows(b"BREW"));
    }

    #[test]
    fn any_allows_every_method() {
        assert!(MethodPolicy::Any.allows(b"BREW"));
    }

    #[test]
    fn only_allows_the_list_exactly() {
        let only = MethodPolicy::Only(vec![b"GET".to_vec(), b"PURGE".to_vec()]);
        assert!(only.allows(b"PURGE"));
        assert!(only.allows(b"GET"));
        assert!(!only.allows(b"POST"));
        assert!(!only.allows(b"get"));
    }
}
