//! Helpers over [`ErrorCode`]: stable names for users and tools.

use crate::pb::ErrorCode;

impl ErrorCode {
    /// The CamelCase name users see, e.g. `NoNode` (as in `error: NoNode: /a`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Ok => "Ok",
            ErrorCode::NoNode => "NoNode",
            ErrorCode::NodeExists => "NodeExists",
            ErrorCode::BadVersion => "BadVersion",
            ErrorCode::NotEmpty => "NotEmpty",
            ErrorCode::NoChildrenForEphemerals => "NoChildrenForEphemerals",
            ErrorCode::InvalidPath => "InvalidPath",
            ErrorCode::DataTooLarge => "DataTooLarge",
            ErrorCode::BadArguments => "BadArguments",
            ErrorCode::SessionExpired => "SessionExpired",
            ErrorCode::SessionMoved => "SessionMoved",
            ErrorCode::ConnectionLoss => "ConnectionLoss",
            ErrorCode::OperationTimeout => "OperationTimeout",
            ErrorCode::MarshallingError => "MarshallingError",
            ErrorCode::NotReady => "NotReady",
            ErrorCode::ServerBehind => "ServerBehind",
            ErrorCode::RuntimeInconsistency => "RuntimeInconsistency",
            ErrorCode::NoAuth => "NoAuth",
            ErrorCode::InvalidAcl => "InvalidAcl",
            ErrorCode::Unimplemented => "Unimplemented",
            ErrorCode::SystemError => "SystemError",
            ErrorCode::NoWatcher => "NoWatcher",
            ErrorCode::Throttled => "Throttled",
            ErrorCode::AuthFailed => "AuthFailed",
            ErrorCode::LimitExceeded => "LimitExceeded",
            ErrorCode::NotReadOnly => "NotReadOnly",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
