//! The partitions the `partition` nemesis picks from (grudges): which
//! directed links each one cuts.

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};

use crate::cluster::Cluster;

/// The partitions the nemesis picks from.
pub const GRUDGES: [&str; 4] = ["halves", "isolate-leader", "majorities-ring", "bridge"];

/// Picks a partition (seeded): its name and the directed links to cut.
pub(super) async fn partition(c: &mut Cluster, rng: &mut StdRng) -> (String, Vec<(u64, u64)>) {
    let mut ids = c.ids();
    ids.shuffle(rng);
    let grudge = *GRUDGES.choose(rng).expect("grudges");
    let leader = if grudge == "isolate-leader" {
        c.leader().await
    } else {
        None
    };
    (grudge.to_string(), cuts(grudge, &ids, leader))
}

/// The directed links `(from, to)` a grudge cuts, for nodes `ids` (in the
/// shuffled order the grudge is laid out in):
/// - `halves`: the first n/2 nodes against the rest;
/// - `isolate-leader`: the leader (or the first node) against the rest;
/// - `majorities-ring`: each node hears only from itself and the n/2 nodes
///   after it in the ring, so everyone sees a majority, no two the same one;
/// - `bridge`: two halves that hear from each other only through one
///   bridging node (the first), which is in both.
pub fn cuts(grudge: &str, ids: &[u64], leader: Option<u64>) -> Vec<(u64, u64)> {
    let n = ids.len();
    let both_ways = |a: &[u64], b: &[u64]| {
        let mut v = Vec::new();
        for &x in a {
            for &y in b {
                v.push((x, y));
                v.push((y, x));
            }
        }
        v
    };
    let v = match grudge {
        "halves" => {
            let (a, b) = ids.split_at(n / 2);
            both_ways(a, b)
        }
        "isolate-leader" => {
            let leader = leader.unwrap_or(ids[0]);
            let rest: Vec<u64> = ids.iter().copied().filter(|&i| i != leader).collect();
            both_ways(&[leader], &rest)
        }
        "majorities-ring" => {
            let mut v = Vec::new();
            for (i, &to) in ids.iter().enumerate() {
                let visible: Vec<u64> = (0..=n / 2).map(|k| ids[(i + k) % n]).collect();
                for &from in ids {
                    if !visible.contains(&from) {
                        v.push((from, to));
                    }
                }
            }
            v
        }
        "bridge" => {
            let rest = &ids[1..];
            let (a, b) = rest.split_at(rest.len() / 2);
            both_ways(a, b)
        }
        other => panic!("unknown grudge {other}"),
    };
    sorted(v)
}

fn sorted(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hears(cuts: &[(u64, u64)], ids: &[u64], to: u64) -> usize {
        ids.iter()
            .filter(|&&f| f == to || !cuts.contains(&(f, to)))
            .count()
    }

    #[test]
    fn grudges_cut_what_they_say() {
        let ids = [3, 1, 5, 2, 4];
        let halves = cuts("halves", &ids, None);
        assert!(halves.contains(&(3, 5)) && halves.contains(&(5, 3)));
        assert!(!halves.contains(&(3, 1)));
        assert_eq!(halves.len(), 2 * 2 * 3);

        let iso = cuts("isolate-leader", &ids, Some(2));
        assert_eq!(iso.len(), 8);
        assert!(iso.iter().all(|&(a, b)| a == 2 || b == 2));

        let ring = cuts("majorities-ring", &ids, None);
        for &id in &ids {
            assert_eq!(hears(&ring, &ids, id), 3, "node {id} hears a bare majority");
        }

        let bridge = cuts("bridge", &ids, None);
        assert!(
            bridge.iter().all(|&(a, b)| a != 3 && b != 3),
            "the bridge keeps its links"
        );
        assert!(bridge.contains(&(1, 2)) && bridge.contains(&(4, 5)));
        assert!(!bridge.contains(&(1, 5)));
    }
}
