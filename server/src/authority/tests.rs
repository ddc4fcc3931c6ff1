//! The decisions, one rule at a time; the doors' use of them is tested
//! with real processes (`server/tests/attacks/authority.rs`).

use std::net::IpAddr;

use warden_protocol::auth::digest_id;

use super::*;
use crate::auth::AuthConfig;
use crate::opmetrics::OpMetrics;

const LOCAL: &str = "127.0.0.1";
const MAPPED_LOCAL: &str = "::ffff:127.0.0.1";
const REMOTE: &str = "10.1.2.3";

fn authority(super_digest: bool, whitelist: Whitelist) -> (Authority, OpMetrics) {
    let digest = digest_id("admin:root-pw").unwrap();
    let auth = AuthConfig::new(super_digest.then_some(digest.as_str()), None).unwrap();
    let metrics = OpMetrics::new();
    (Authority::new(&auth, whitelist, &metrics), metrics)
}

/// The identities a caller at `addr` holds after authenticating with
/// `credentials` against a server with `--super-digest admin:root-pw`
/// (or none).
fn ids(addr: &str, credentials: Option<&str>, super_digest: bool) -> Vec<AuthId> {
    let digest = digest_id("admin:root-pw").unwrap();
    let auth = AuthConfig::new(super_digest.then_some(digest.as_str()), None).unwrap();
    let mut ids = crate::auth::connection_ids(
        format!("{addr}:5000")
            .parse()
            .unwrap_or_else(|_| format!("[{addr}]:5000").parse().unwrap()),
        None,
    );
    if let Some(c) = credentials {
        ids.extend(auth.authenticate("digest", c.as_bytes()).unwrap());
    }
    ids
}

fn decide(a: &Authority, action: Action, addr: &str, ids: &[AuthId]) -> Result<(), Refusal> {
    let addr: IpAddr = addr.parse().unwrap();
    a.decide(action, &Caller { ids, addr })
}

const ADMIN_ACTIONS: [Action; 3] = [
    Action::MembershipChange,
    Action::Backup,
    Action::AdminCommand(Word::Dump),
];

#[test]
fn without_a_super_user_only_this_host_is_the_admin() {
    let (a, _) = authority(false, Whitelist::default());
    for action in ADMIN_ACTIONS {
        for local in [LOCAL, MAPPED_LOCAL, "::1"] {
            assert_eq!(decide(&a, action, local, &ids(local, None, false)), Ok(()));
        }
        // From another host, with or without credentials: refused, and
        // told how to configure an admin.
        for credentials in [None, Some("bob:pw"), Some("admin:root-pw")] {
            let refused = decide(&a, action, REMOTE, &ids(REMOTE, credentials, false))
                .expect_err("a remote caller of a server with no admin");
            assert!(matches!(refused, Refusal::NoAdmin { .. }), "{refused:?}");
            let said = refused.to_string();
            assert!(said.contains("--super-digest"), "{said}");
            assert!(said.contains("warden digest"), "{said}");
            assert!(said.contains(REMOTE), "{said}");
            assert!(!refused.wants_credentials());
        }
    }
}

#[test]
fn with_a_super_user_only_the_super_user_is_the_admin() {
    let (a, _) = authority(true, Whitelist::default());
    for action in ADMIN_ACTIONS {
        for addr in [LOCAL, REMOTE] {
            assert_eq!(
                decide(&a, action, addr, &ids(addr, Some("admin:root-pw"), true)),
                Ok(()),
                "{action:?} from {addr}"
            );
            // Loopback is no admin once one is configured.
            let anonymous = decide(&a, action, addr, &ids(addr, None, true)).unwrap_err();
            assert!(anonymous.wants_credentials(), "{anonymous:?}");
            assert!(anonymous.to_string().contains("super user"), "{anonymous}");
            let bob = decide(&a, action, addr, &ids(addr, Some("bob:pw"), true)).unwrap_err();
            assert!(!bob.wants_credentials(), "{bob:?}");
            // Who asked is named.
            assert!(bob.to_string().contains("digest:bob:"), "{bob}");
        }
    }
    // An x509 identity is no credential of the super user.
    let x509 = crate::auth::connection_ids("10.1.2.3:1".parse().unwrap(), Some("CN=admin"));
    let refused = decide(&a, Action::Backup, REMOTE, &x509).unwrap_err();
    assert!(refused.wants_credentials(), "{refused:?}");
}

#[test]
fn four_letter_words_follow_the_whitelist_and_nothing_else() {
    let (a, _) = authority(false, Whitelist::default());
    for p in WORD_POLICIES {
        let got = decide(
            &a,
            Action::FourLetterWord(p.word),
            LOCAL,
            &ids(LOCAL, None, false),
        );
        if p.default {
            assert_eq!(got, Ok(()), "{:?}", p.word);
        } else {
            // Not even from this host: a word carries no identity.
            let name = word_name(p.word);
            assert_eq!(
                got.unwrap_err().to_string(),
                format!("{name} is not executed because it is not in the whitelist.")
            );
        }
    }
    let (all, _) = authority(true, Whitelist::parse("*").unwrap());
    for (word, _, _) in WORDS {
        assert_eq!(
            decide(&all, Action::FourLetterWord(word), REMOTE, &[]),
            Ok(())
        );
    }
    let (none, _) = authority(false, Whitelist::parse("").unwrap());
    assert!(decide(&none, Action::FourLetterWord(Word::Ruok), LOCAL, &[]).is_err());
}

#[test]
fn admin_server_commands_off_the_whitelist_are_the_admins() {
    let (a, _) = authority(true, Whitelist::parse("ruok, mntr").unwrap());
    let anon = ids(REMOTE, None, true);
    assert_eq!(
        decide(&a, Action::AdminCommand(Word::Mntr), REMOTE, &anon),
        Ok(())
    );
    assert!(decide(&a, Action::AdminCommand(Word::Srvr), REMOTE, &anon).is_err());
    for word in [Word::Srst, Word::Crst, Word::Cons, Word::Stat] {
        let refused = decide(&a, Action::AdminCommand(word), REMOTE, &anon).unwrap_err();
        assert!(refused.wants_credentials(), "{refused:?}");
        assert!(refused.to_string().contains(word.command()), "{refused}");
        let admin = ids(REMOTE, Some("admin:root-pw"), true);
        assert_eq!(
            decide(&a, Action::AdminCommand(word), REMOTE, &admin),
            Ok(())
        );
    }
}

#[test]
fn the_default_whitelist_shows_no_session_client_or_path_and_changes_nothing() {
    let on: Vec<&str> = WORD_POLICIES
        .iter()
        .filter(|p| p.default)
        .map(|p| word_name(p.word))
        .collect();
    assert_eq!(
        on,
        ["ruok", "srvr", "mntr", "isro", "conf", "envi", "dirs", "wchs", "hash"]
    );
    for p in WORD_POLICIES {
        // What each default-off word does, as ask() tells the core.
        let ask = p.word.ask();
        let reveals_or_changes = ask.connections
            || ask.sessions
            || ask.reset_server
            || ask.reset_connections
            || matches!(p.word, Word::Wchc | Word::Wchp);
        assert_eq!(p.default, !reveals_or_changes, "{:?}", p.word);
    }
    // Every word has exactly one policy.
    for (word, _, _) in WORDS {
        assert_eq!(WORD_POLICIES.iter().filter(|p| p.word == word).count(), 1);
    }
}

#[test]
fn the_whitelist_reads_zookeepers_syntax_and_names_a_typo() {
    let w = Whitelist::parse(" srvr ,ruok,,srvr").unwrap();
    assert!(w.allows(Word::Srvr) && w.allows(Word::Ruok));
    assert!(!w.allows(Word::Mntr));
    let star = Whitelist::parse("ruok, *").unwrap();
    assert!(WORDS.iter().all(|(word, _, _)| star.allows(*word)));
    let typo = Whitelist::parse("ruok,mntrr").unwrap_err();
    assert!(
        typo.contains("\"mntrr\" is not a four-letter word"),
        "{typo}"
    );
    assert!(Whitelist::parse("RUOK").is_err());
}

#[test]
fn metrics_are_everyones() {
    let (a, _) = authority(true, Whitelist::parse("").unwrap());
    assert_eq!(decide(&a, Action::Metrics, REMOTE, &[]), Ok(()));
}

#[test]
fn refusals_are_counted_by_action_and_door() {
    let (a, metrics) = authority(true, Whitelist::default());
    let anon = ids(REMOTE, None, true);
    let caller = Caller {
        ids: &anon,
        addr: REMOTE.parse().unwrap(),
    };
    let refusals = &metrics.authority_refusals;
    assert!(a
        .check(Action::MembershipChange, Door::Native, &caller)
        .is_err());
    assert!(a
        .check(Action::MembershipChange, Door::Native, &caller)
        .is_err());
    assert!(a
        .check(Action::FourLetterWord(Word::Dump), Door::ZooKeeper, &caller)
        .is_err());
    assert!(a.check(Action::Metrics, Door::Http, &caller).is_ok());
    assert_eq!(refusals.get(Action::MembershipChange, Door::Native), 2);
    assert_eq!(refusals.get(Action::MembershipChange, Door::ZooKeeper), 0);
    assert_eq!(
        refusals.get(Action::FourLetterWord(Word::Dump), Door::ZooKeeper),
        1
    );
    assert_eq!(refusals.get(Action::Metrics, Door::Http), 0);
    // Exported under one name, labelled.
    let mut registry = prometheus_client::registry::Registry::default();
    refusals.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"authority_refusals_total{action="membership_change",door="native"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"authority_refusals_total{action="4lw_dump",door="zookeeper"} 1"#),
        "{text}"
    );
}
