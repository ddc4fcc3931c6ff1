//! The ZooKeeper lock recipe's pure part: given the lock node's children
//! and the name of our own ephemeral-sequential node, do we hold the lock,
//! or whom do we wait for?
//!
//! Contenders create `<tag>-lock-<sequence>` under the lock node (the tag
//! names the client, so that after a lost reply a client can find and
//! remove a node it made without knowing its name, as Curator's
//! "protected" mode does). The lowest sequence holds the lock; every other
//! contender watches only the node just before its own (its predecessor),
//! so a release wakes one waiter, not all of them.

/// Where one contender stands in a lock's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// Ours is the lowest sequence: we hold the lock.
    Holds,
    /// Wait until this child (our predecessor) is gone, then look again.
    WaitOn(String),
    /// Our node is not among the children (our session lost it).
    Gone,
}

/// The prefix of client `tag`'s lock nodes.
pub fn node_prefix(tag: &str) -> String {
    format!("{tag}-lock-")
}

/// The sequence number a sequential node's name ends with (the digits
/// after its last `-`), or `None` if it has none.
pub fn sequence_of(name: &str) -> Option<i64> {
    let (_, digits) = name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Our turn, given the lock node's children and our node's name. Children
/// without a sequence number are not contenders and are ignored.
pub fn turn(children: &[String], mine: &str) -> Turn {
    let Some(my_seq) = sequence_of(mine) else {
        return Turn::Gone;
    };
    if !children.iter().any(|c| c == mine) {
        return Turn::Gone;
    }
    let predecessor = children
        .iter()
        .filter_map(|c| sequence_of(c).map(|s| (s, c)))
        .filter(|(s, _)| *s < my_seq)
        .max_by_key(|(s, _)| *s);
    match predecessor {
        None => Turn::Holds,
        Some((_, c)) => Turn::WaitOn(c.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sequence_is_the_trailing_number() {
        assert_eq!(sequence_of("c3-lock-0000000042"), Some(42));
        assert_eq!(sequence_of("lock-0000000000"), Some(0));
        assert_eq!(sequence_of("lock-"), None);
        assert_eq!(sequence_of("readme"), None);
        assert_eq!(sequence_of("lock-12a"), None);
    }

    #[test]
    fn lowest_holds_regardless_of_tag_and_order() {
        let children = names(&[
            "c2-lock-0000000007",
            "c9-lock-0000000003",
            "c1-lock-0000000005",
        ]);
        assert_eq!(turn(&children, "c9-lock-0000000003"), Turn::Holds);
        // Sorted by sequence, not by name: c1's predecessor is c9's node.
        assert_eq!(
            turn(&children, "c1-lock-0000000005"),
            Turn::WaitOn("c9-lock-0000000003".into())
        );
        assert_eq!(
            turn(&children, "c2-lock-0000000007"),
            Turn::WaitOn("c1-lock-0000000005".into())
        );
    }

    #[test]
    fn missing_node_is_gone_and_strangers_are_ignored() {
        let children = names(&["c1-lock-0000000005", "config"]);
        assert_eq!(turn(&children, "c2-lock-0000000004"), Turn::Gone);
        assert_eq!(turn(&children, "c1-lock-0000000005"), Turn::Holds);
        assert_eq!(turn(&children, "config"), Turn::Gone);
    }
}
