//! A connection that speaks TLS or not: what every door and the peer
//! transport read and write, so their code is the same either way. The
//! type is the client's own (the server's lock gateway is a client too).

pub use warden_client::Stream;
