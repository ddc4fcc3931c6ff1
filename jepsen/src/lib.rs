//! Warden Jepsen-style fault-injection suite. (Lands with issue 7.)
