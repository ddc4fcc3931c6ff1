//! The recipes' error type.

use warden_client::ErrorCode;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The service refused or failed an operation.
    #[error(transparent)]
    Client(#[from] warden_client::Error),
    /// A lease, token or holder check failed: the caller does not hold
    /// what it claims to (stale token, wrong client id, lost lease).
    #[error("NotHolder: {0}")]
    NotHolder(String),
    /// The recipe's znodes are not in the shape it expects (someone else
    /// wrote there).
    #[error("Corrupt: {0}")]
    Corrupt(String),
    /// Arguments that make no sense (zero permits, empty name, ...).
    #[error("BadArguments: {0}")]
    BadArguments(String),
}

impl Error {
    /// The protocol code this error stands for.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Client(e) => e.code(),
            Error::NotHolder(_) => ErrorCode::BadVersion,
            Error::Corrupt(_) => ErrorCode::SystemError,
            Error::BadArguments(_) => ErrorCode::BadArguments,
        }
    }
}
