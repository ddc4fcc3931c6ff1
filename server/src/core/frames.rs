//! The frames the core sends to clients.

use warden_protocol::pb::{self, response::Result as Res, SessionState};

use crate::ops::Failure;

pub fn connect(resp: pb::ConnectResponse) -> pb::ServerFrame {
    pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::Connect(resp)),
    }
}

pub fn of_response(response: pb::Response) -> pb::ServerFrame {
    pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::Response(response)),
    }
}

pub fn response(xid: u64, zxid: u64, result: Result<Option<Res>, Failure>) -> pb::ServerFrame {
    of_response(crate::ops::response(xid, zxid, result))
}

pub fn error(xid: u64, zxid: u64, f: Failure) -> pb::ServerFrame {
    response(xid, zxid, Err(f))
}

/// The same answer, for the request `xid` (a retry carries the xid of the
/// original, but the frame is addressed to whoever waits now).
pub fn with_xid(mut frame: pb::ServerFrame, xid: u64) -> pb::ServerFrame {
    if let Some(pb::server_frame::Kind::Response(r)) = &mut frame.kind {
        r.xid = xid;
    }
    frame
}

pub fn event(event: pb::WatchEvent) -> pb::ServerFrame {
    pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::WatchEvent(event)),
    }
}

pub fn session_event(state: SessionState, message: &str) -> pb::ServerFrame {
    pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::SessionEvent(pb::SessionEvent {
            state: state as i32,
            message: message.to_string(),
        })),
    }
}
