//! `warden-sim`: runs seeds, prints each failing seed with its trace, and
//! replays one seed (docs/simulation.md).

use std::process::ExitCode;

use clap::Parser;
use warden_sim::{run, BadModes, FaultMix, Outcome, SimConfig, Subject};

#[derive(Parser, Debug)]
#[command(
    name = "warden-sim",
    about = "Deterministic simulation of a Warden cluster"
)]
struct Args {
    /// Replay this one seed and print its whole trace.
    #[arg(long, conflicts_with_all = ["seeds", "from"])]
    seed: Option<u64>,
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Run each seed twice and say whether the traces are byte-identical.
    #[arg(long)]
    twice: bool,
    /// Nodes (3 to 5); drawn from each seed if not given.
    #[arg(long, value_parser = clap::value_parser!(u64).range(3..=5))]
    nodes: Option<u64>,
    /// Simulated time per seed, in milliseconds.
    #[arg(long, default_value_t = SimConfig::default().duration_ms)]
    duration_ms: u64,
    /// Model clients writing.
    #[arg(long, default_value_t = SimConfig::default().clients)]
    clients: usize,
    /// The faults a run may draw: `all`, `none`, or names separated by
    /// commas: crash, power-loss, partition, one-way, heal, clock, pause,
    /// flap, drop, duplicate, reorder, disk.
    #[arg(long, default_value = "all")]
    faults: String,
    /// Mean simulated time between faults, in milliseconds.
    #[arg(long, default_value_t = SimConfig::default().fault_mean_ms)]
    fault_mean_ms: u64,
    /// Simulate the whole server's core (real cores, register clients on
    /// the native door, histories checked for linearizability) instead
    /// of raft alone.
    #[arg(long)]
    core: bool,
    /// KNOWN-BAD (with --core): linearizable reads without ReadIndex.
    #[arg(long, requires = "core")]
    skip_read_index: bool,
    /// KNOWN-BAD (with --core): ZooKeeper-door writes deduplicated by the
    /// session's last 64 answers only.
    #[arg(long, requires = "core")]
    bounded_dedup: bool,
    /// KNOWN-BAD (with --core): removals in flight kept across a role
    /// change.
    #[arg(long, requires = "core")]
    keep_removals: bool,
    /// Pipelined writers on the ZooKeeper door (with --core).
    #[arg(long, default_value_t = SimConfig::default().pipelines)]
    pipelines: usize,
    /// KNOWN-BAD storage: sync makes nothing durable.
    #[arg(long)]
    skip_fsync: bool,
    /// KNOWN-BAD storage: opened without the synced watermark's checks
    /// (raft subject only).
    #[arg(long, conflicts_with = "core")]
    unchecked_open: bool,
    /// KNOWN-BAD storage: the vote is not persisted (raft subject only).
    #[arg(long, conflicts_with = "core")]
    vote_not_persisted: bool,
    /// Stop at the first failing seed (to find a known-bad mode's budget).
    #[arg(long)]
    stop: bool,
    /// Lines of a failing seed's trace to print (0: all of it).
    #[arg(long, default_value_t = 80)]
    tail: usize,
    /// Print only this node's lines (and the world's) of a trace.
    #[arg(long)]
    node: Option<u64>,
}

fn print_trace(outcome: &Outcome, tail: usize, node: Option<u64>) {
    let lines: Vec<&str> = match node {
        Some(n) => outcome.trace.of_node(n),
        None => outcome.trace.lines().iter().map(String::as_str).collect(),
    };
    let from = if tail == 0 {
        0
    } else {
        lines.len().saturating_sub(tail)
    };
    if from > 0 {
        println!("  ... {from} earlier lines (--tail 0 prints them all)");
    }
    for l in &lines[from..] {
        println!("{l}");
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let faults = match FaultMix::parse(&args.faults) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("--faults: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cfg = SimConfig {
        subject: if args.core {
            Subject::Cores
        } else {
            Subject::Raft
        },
        nodes: args.nodes.map(|n| n as usize),
        duration_ms: args.duration_ms,
        clients: args.clients,
        faults,
        fault_mean_ms: args.fault_mean_ms,
        bad: BadModes {
            skip_fsync: args.skip_fsync,
            vote_not_persisted: args.vote_not_persisted,
            unchecked_open: args.unchecked_open,
            skip_read_index: args.skip_read_index,
            bounded_dedup: args.bounded_dedup,
            keep_removals: args.keep_removals,
        },
        pipelines: args.pipelines,
        ..SimConfig::default()
    };
    // raft's assertions are caught and reported as violations, with the
    // seed; the default hook would print each one's backtrace note too.
    std::panic::set_hook(Box::new(|_| {}));

    let (from, count, replay) = match args.seed {
        Some(s) => (s, 1, true),
        None => (args.from, args.seeds, false),
    };
    let mut failed = 0u64;
    let mut differed = 0u64;
    let mut ran = 0u64;
    for seed in from..from.saturating_add(count) {
        ran += 1;
        let outcome = run(seed, &cfg);
        if args.twice {
            let again = run(seed, &cfg);
            let same = again.trace == outcome.trace;
            if !same {
                differed += 1;
            }
            println!(
                "seed {seed}: traces {} ({} lines)",
                if same { "byte-identical" } else { "DIFFER" },
                outcome.trace.len()
            );
        }
        if replay {
            print_trace(&outcome, 0, args.node);
        }
        match &outcome.violation {
            Some(v) => {
                failed += 1;
                println!("seed {seed}: FAILED: {v}");
                if !replay {
                    print_trace(&outcome, args.tail, args.node);
                    println!("  replay: warden-sim --seed {seed} (with the same options)");
                }
            }
            None if replay => println!(
                "seed {seed}: ok ({} events, {} writes acknowledged, {} crashes)",
                outcome.stats.events, outcome.stats.acked, outcome.stats.crashes
            ),
            None => {}
        }
        if args.stop && failed > 0 {
            break;
        }
    }
    println!(
        "{ran} seeds from {from}: {failed} failed{}",
        if args.twice {
            format!(", {differed} with differing traces")
        } else {
            String::new()
        }
    );
    if failed > 0 || differed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
