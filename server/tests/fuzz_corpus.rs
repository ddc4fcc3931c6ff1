//! Replays the fuzz targets' seed corpus (`fuzz/corpus/<target>/`) through
//! the same code the fuzz targets run (`warden_server::fuzzing`), so the
//! decoders are exercised on stable on every `cargo test`, without nightly
//! or cargo-fuzz. The crashing inputs the fuzzers found live as regression
//! tests beside the code they broke.
//!
//! `WARDEN_WRITE_FUZZ_SEEDS=1 cargo test -p warden-server --test fuzz_corpus`
//! rewrites the generated seeds from real encodings (see fuzz/README.md).

use std::path::PathBuf;

use warden_server::fuzzing;

const TARGETS: [&str; 5] = [
    "native_frame",
    "zk_jute",
    "peer_frame",
    "snapshot",
    "http_json",
];

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus")
}

#[test]
fn generated_seeds_run_clean_and_are_committed() {
    // The seeds are encodings of a real tree: the sample requests applied.
    let tree = fuzzing::base_tree();
    for path in ["/app/config", "/app/locks", "/app/ttl"] {
        assert!(tree.stat(path).is_some(), "sample tree lacks {path}");
    }
    let (children, _) = tree.children("/app").expect("/app");
    assert!(
        children.iter().any(|c| c.starts_with("seq-")),
        "no sequential node among {children:?}"
    );
    assert_eq!(tree.ephemerals(0x5eed).len(), 1, "the sample lock node");
    let seeds = fuzzing::seeds();
    let write = std::env::var_os("WARDEN_WRITE_FUZZ_SEEDS").is_some();
    for (target, name, bytes) in &seeds {
        let run = fuzzing::target(target).expect("seed for a known target");
        run(bytes);
        let file = corpus_dir().join(target).join(name);
        if write {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, bytes).unwrap();
        } else {
            assert!(
                file.exists(),
                "seed {} is not committed; run with WARDEN_WRITE_FUZZ_SEEDS=1",
                file.display()
            );
        }
    }
    for target in TARGETS {
        assert!(
            seeds.iter().filter(|(t, _, _)| *t == target).count() >= 2,
            "{target} has fewer than two seeds"
        );
    }
}

#[test]
fn committed_corpus_replays_without_a_panic() {
    let mut replayed = 0;
    for target in TARGETS {
        let run = fuzzing::target(target).expect("known target");
        let dir = corpus_dir().join(target);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        assert!(!files.is_empty(), "{} is empty", dir.display());
        for file in files {
            let bytes = std::fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| run(&bytes));
            assert!(outcome.is_ok(), "{target} panicked on {}", file.display());
            replayed += 1;
        }
    }
    assert!(replayed >= 20, "only {replayed} corpus files");
}
