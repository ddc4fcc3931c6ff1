//! An attacker's test suite: each attack on a trust boundary, tried against
//! real `warden` processes the way an attacker would, once against a server
//! started with defaults and once against one with authentication set up.
//! Each attack must fail with a clear error to the caller and change
//! nothing; each test here was shown red on the code before its fix (the
//! commit that added it says so).
//!
//! One binary for all of them (one link in CI); one module per boundary.

mod authority;
mod floods;
mod gateway;
mod peers;
mod quorum;
