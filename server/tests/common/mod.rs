//! Helpers shared by the server's integration tests.

#![allow(dead_code)]

pub mod http;
pub mod openapi;
pub mod push;
