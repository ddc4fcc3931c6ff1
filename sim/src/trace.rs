//! The run's history: every event as one line, with the simulated time
//! and the node it happened on, in the order it happened. Two runs of one
//! seed must produce the same lines, byte for byte; the lines are what a
//! failing seed prints.

use std::fmt::Write as _;

use crate::time::SimTime;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Trace {
    lines: Vec<String>,
}

impl Trace {
    /// `node` 0: the world itself (a fault, a client).
    pub fn push(&mut self, at: SimTime, node: u64, text: impl AsRef<str>) {
        let mut line = String::with_capacity(48);
        let who = if node == 0 {
            "  --".to_string()
        } else {
            format!("  n{node}")
        };
        let _ = write!(line, "{at}ms{who} {}", text.as_ref());
        self.lines.push(line);
    }

    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The last `n` lines.
    pub fn tail(&self, n: usize) -> &[String] {
        &self.lines[self.lines.len().saturating_sub(n)..]
    }

    /// The lines of one node (and the world's), for reading one node's
    /// history alone.
    pub fn of_node(&self, node: u64) -> Vec<&str> {
        let mine = format!("ms  n{node} ");
        self.lines
            .iter()
            .filter(|l| l.contains(&mine) || l.contains("ms  -- "))
            .map(String::as_str)
            .collect()
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for l in &self.lines {
            out.push_str(l);
            out.push('\n');
        }
        out
    }
}
