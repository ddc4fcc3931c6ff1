//! Path rules. Every door checks paths here, once, before anything reaches
//! the log: a path that fails these checks changes nothing.
//!
//! A valid path is absolute, `/` alone or `/`-separated non-empty segments
//! with no trailing slash; no segment is `.` or `..`; no character is NUL or
//! another control character.

use std::fmt;

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    pub path: String,
    pub reason: &'static str,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.escape_debug(), self.reason)
    }
}

impl std::error::Error for PathError {}

/// Checks `path` against the rules above.
pub fn validate(path: &str) -> Result<(), PathError> {
    let fail = |reason| {
        Err(PathError {
            path: path.to_string(),
            reason,
        })
    };
    if path.is_empty() {
        return fail("path is empty");
    }
    if !path.starts_with('/') {
        return fail("path must start with '/'");
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return fail("path must not end with '/'");
    }
    if path.chars().any(|c| c.is_control()) {
        return fail("path contains a NUL or control character");
    }
    for segment in path[1..].split('/') {
        match segment {
            "" => return fail("path has an empty segment"),
            "." | ".." => return fail("path has a '.' or '..' segment"),
            _ => {}
        }
    }
    Ok(())
}

/// Like [`validate`] for a create's path, which may be sequential: then the
/// server appends a 10-digit suffix, so the path is checked with one, and a
/// trailing `/` (meaning "a child named by its sequence number alone") is
/// allowed, as in ZooKeeper.
pub fn validate_create(path: &str, sequential: bool) -> Result<(), PathError> {
    if path == "/" {
        return Err(PathError {
            path: path.to_string(),
            reason: "the root already exists",
        });
    }
    if sequential {
        return validate(&format!("{path}0")).map_err(|e| PathError {
            path: path.to_string(),
            reason: e.reason,
        });
    }
    validate(path)
}

/// The parent of a valid, non-root path.
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => "/",
    }
}

/// The last segment of a valid path (empty for the root).
pub fn name(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// Joins a parent path and a child name.
pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The proper ancestors of a valid path, nearest first, ending with `/`.
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut cur = path;
    std::iter::from_fn(move || {
        if cur == "/" {
            return None;
        }
        cur = parent(cur);
        Some(cur)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_good_paths() {
        for p in [
            "/",
            "/a",
            "/a/b",
            "/a-b_c.d/e f",
            "/zookeeper",
            "/a/.b",
            "/ünï",
        ] {
            assert_eq!(validate(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn rejects_bad_paths() {
        for p in [
            "", "a", "a/b", "/a/", "//", "/a//b", "/.", "/a/..", "/a/./b", "/a\0b", "/a\nb",
            "/\u{7f}",
        ] {
            assert!(validate(p).is_err(), "{p:?} should be rejected");
        }
    }

    #[test]
    fn error_names_the_path_and_reason() {
        let e = validate("/a//b").unwrap_err();
        assert_eq!(e.to_string(), "/a//b: path has an empty segment");
    }

    #[test]
    fn sequential_create_may_end_with_slash() {
        assert!(validate_create("/a/", true).is_ok());
        assert!(validate_create("/a/", false).is_err());
        assert!(validate_create("/", false).is_err());
        assert!(validate_create("/", true).is_err());
        assert!(validate_create("//", true).is_err());
        assert!(validate_create("/a//", true).is_err());
    }

    #[test]
    fn parent_name_join_ancestors() {
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/a/b/c"), "/a/b");
        assert_eq!(name("/a/b/c"), "c");
        assert_eq!(name("/"), "");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert_eq!(
            ancestors("/a/b/c").collect::<Vec<_>>(),
            vec!["/a/b", "/a", "/"]
        );
        assert_eq!(ancestors("/").count(), 0);
    }
}
