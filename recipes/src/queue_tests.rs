//! Unit tests of the contender queue (names, ordering, sweeps).

use super::*;

#[test]
fn names_parse() {
    let m = parse_member("_c_0123abcd-WRITE-0000000042", "_c_").unwrap();
    assert_eq!(
        (m.id.as_str(), m.kind.as_str(), m.seq),
        ("0123abcd", "WRITE-", 42)
    );
    let m = parse_member("_c_ab-lock-0000000003", "_c_").unwrap();
    assert_eq!((m.kind.as_str(), m.seq), ("lock-", 3));
    let m = parse_member("lease-ffff-0000000007", "lease-").unwrap();
    assert_eq!((m.id.as_str(), m.kind.as_str(), m.seq), ("ffff", "", 7));
    assert_eq!(parse_member("ready", "_c_"), None);
    assert_eq!(parse_member("_c_ab-READ-12", "_c_"), None);
    assert_eq!(parse_member("c-12-0000000042", "lease-"), None);
    assert_eq!(parse_member("lease--0000000001", "lease-"), None);
}

#[test]
fn members_sort_by_sequence_not_by_id_and_keep_their_kinds() {
    let children = vec![
        "_c_ff-READ-0000000003".to_string(),
        "_c_00-WRITE-0000000007".to_string(),
        "_c_aa-READ-0000000001".to_string(),
        "_c_bb-lock-0000000002".to_string(),
        "ready".to_string(),
    ];
    let names = |kinds: &[&str]| -> Vec<String> {
        sorted_members(&children, "_c_", kinds)
            .into_iter()
            .map(|m| m.name)
            .collect()
    };
    assert_eq!(
        names(&["READ-", "WRITE-"]),
        vec![
            "_c_aa-READ-0000000001",
            "_c_ff-READ-0000000003",
            "_c_00-WRITE-0000000007"
        ]
    );
    assert_eq!(names(&["WRITE-"]), vec!["_c_00-WRITE-0000000007"]);
    assert_eq!(names(&["lock-"]), vec!["_c_bb-lock-0000000002"]);
}

#[test]
fn sweeps_keep_our_lowest_member_and_delete_the_others() {
    let children: Vec<String> = [
        "_c_ab-lock-0000000003",
        "_c_cd-lock-0000000004",
        "_c_ab-lock-0000000005",
        "_c_abc-lock-0000000006",
    ]
    .map(String::from)
    .to_vec();
    let members = sorted_members(&children, "_c_", &["lock-"]);
    let names = |v: Vec<&Member>| v.into_iter().map(|m| m.name.clone()).collect::<Vec<_>>();
    // A lost create of ours committed before our retry: adopt it (the
    // earlier place), delete the retry's member.
    let (adopt, delete) = sweep_plan(&members, "ab", "_c_ab-lock-0000000005").unwrap();
    assert_eq!(adopt.unwrap().name, "_c_ab-lock-0000000003");
    assert_eq!(names(delete), vec!["_c_ab-lock-0000000005"]);
    // Already on the lowest: only the later one goes.
    let (adopt, delete) = sweep_plan(&members, "ab", "_c_ab-lock-0000000003").unwrap();
    assert!(adopt.is_none());
    assert_eq!(names(delete), vec!["_c_ab-lock-0000000005"]);
    // Alone (an id that is a prefix of another is not the same id).
    assert!(sweep_plan(&members, "cd", "_c_cd-lock-0000000004").is_none());
    assert!(sweep_plan(&members, "ee", "").is_none());
}

#[test]
fn paths_and_pauses() {
    assert_eq!(parent_of("/a"), "/");
    assert_eq!(parent_of("/a/b/c"), "/a/b");
    assert_eq!(join_path("/", "a"), "/a");
    assert_eq!(join_path("/leases", "a"), "/leases/a");
    assert_eq!(retry_pause(0), RETRY_PAUSE_MIN);
    assert_eq!(retry_pause(30), RETRY_PAUSE_MAX);
}

#[test]
fn waits() {
    assert!(Wait::No.expired());
    assert!(!Wait::Forever.expired());
    assert!(Wait::Until(Instant::now()).expired());
    assert_eq!(Wait::Forever.deadline(), None);
}
