//! Multi: several writes (and version checks) applied atomically, all or
//! none.
//!
//! This file turns [`Op`]s into wire `MultiOp`s (checking each path and its
//! data first, so a bad op is reported by its index without a round trip)
//! and turns the server's per-op results back into [`OpResult`]s, or into
//! one [`Error::Multi`] naming the op that failed. The server reports a
//! failure as: the failing op with its code, the ops before it `OK`, the ops
//! after it `RUNTIME_INCONSISTENCY`; nothing applied.

use warden_protocol::{pb, ErrorCode};

use crate::error::{decode_code, Error, Result};
use crate::types::{check_create_path, check_data, check_path, CreateOptions, Stat};

/// One operation of a multi.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create {
        path: String,
        data: Vec<u8>,
        options: CreateOptions,
    },
    /// `version: None` deletes whatever the version.
    Delete { path: String, version: Option<i32> },
    SetData {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    /// Fails the multi unless the node exists (with this version, if given).
    Check { path: String, version: Option<i32> },
}

impl Op {
    pub fn create(
        path: impl Into<String>,
        data: impl Into<Vec<u8>>,
        options: CreateOptions,
    ) -> Self {
        Op::Create {
            path: path.into(),
            data: data.into(),
            options,
        }
    }

    pub fn delete(path: impl Into<String>, version: Option<i32>) -> Self {
        Op::Delete {
            path: path.into(),
            version,
        }
    }

    pub fn set_data(
        path: impl Into<String>,
        data: impl Into<Vec<u8>>,
        version: Option<i32>,
    ) -> Self {
        Op::SetData {
            path: path.into(),
            data: data.into(),
            version,
        }
    }

    pub fn check(path: impl Into<String>, version: Option<i32>) -> Self {
        Op::Check {
            path: path.into(),
            version,
        }
    }

    /// The path this op names.
    pub fn path(&self) -> &str {
        match self {
            Op::Create { path, .. }
            | Op::Delete { path, .. }
            | Op::SetData { path, .. }
            | Op::Check { path, .. } => path,
        }
    }
}

/// The outcome of one op of a successful multi, in op order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// The created path (with its sequence suffix, if any) and its stat.
    Create {
        path: String,
        stat: Stat,
    },
    Delete,
    SetData {
        stat: Stat,
    },
    Check,
}

/// Builds a wire `CreateRequest` after checking path, data and options.
pub(crate) fn create_request(
    path: &str,
    data: &[u8],
    options: &CreateOptions,
) -> Result<pb::CreateRequest> {
    check_create_path(path, options.sequential)?;
    check_data(path, data)?;
    let ttl_ms = options.validate(path)?;
    Ok(pb::CreateRequest {
        path: path.to_string(),
        data: data.to_vec(),
        acl: options.acl.clone(),
        ephemeral: options.ephemeral,
        sequential: options.sequential,
        container: options.container,
        ttl_ms,
        data_null: false,
    })
}

/// Checks every op and encodes the multi. A bad op becomes an
/// [`Error::Multi`] carrying its index.
pub(crate) fn encode(ops: &[Op]) -> Result<pb::MultiRequest> {
    let mut encoded = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        let wire = encode_one(op).map_err(|e| Error::Multi {
            index,
            code: e.code(),
            path: op.path().to_string(),
            message: match e {
                Error::Api { message, .. } => message,
                other => other.to_string(),
            },
        })?;
        encoded.push(pb::MultiOp { op: Some(wire) });
    }
    Ok(pb::MultiRequest { ops: encoded })
}

fn encode_one(op: &Op) -> Result<pb::multi_op::Op> {
    Ok(match op {
        Op::Create {
            path,
            data,
            options,
        } => pb::multi_op::Op::Create(create_request(path, data, options)?),
        Op::Delete { path, version } => {
            check_path(path)?;
            pb::multi_op::Op::Delete(pb::DeleteRequest {
                path: path.clone(),
                version: *version,
            })
        }
        Op::SetData {
            path,
            data,
            version,
        } => {
            check_path(path)?;
            check_data(path, data)?;
            pb::multi_op::Op::SetData(pb::SetDataRequest {
                path: path.clone(),
                data: data.clone(),
                version: *version,
                ttl_ms: 0,
                data_null: false,
            })
        }
        Op::Check { path, version } => {
            check_path(path)?;
            pb::multi_op::Op::Check(pb::CheckRequest {
                path: path.clone(),
                version: *version,
            })
        }
    })
}

/// Turns the server's answer into per-op results, or the error of the op
/// that failed. `top_code`/`top_message` are the response's own error,
/// which a server may also set when an op fails.
pub(crate) fn decode(
    ops: &[Op],
    top_code: ErrorCode,
    top_message: &str,
    response: Option<pb::MultiResponse>,
) -> Result<Vec<OpResult>> {
    let results = response.map(|r| r.results).unwrap_or_default();
    // The op that failed is the first whose code is neither OK nor the
    // "not executed because another failed" filler.
    let failed = results.iter().enumerate().find(|(_, r)| {
        !matches!(
            decode_code(r.error),
            ErrorCode::Ok | ErrorCode::RuntimeInconsistency
        )
    });
    if let Some((index, r)) = failed {
        return Err(Error::Multi {
            index,
            code: decode_code(r.error),
            path: ops
                .get(index)
                .map(|op| op.path().to_string())
                .unwrap_or_default(),
            message: r.message.clone(),
        });
    }
    if top_code != ErrorCode::Ok {
        // A failure the server did not pin on one op.
        return Err(Error::api(top_code, "", top_message));
    }
    if results.len() != ops.len() {
        return Err(Error::api(
            ErrorCode::MarshallingError,
            "",
            format!(
                "multi of {} ops answered with {} results",
                ops.len(),
                results.len()
            ),
        ));
    }
    ops.iter()
        .zip(results)
        .map(|(op, r)| decode_one(op, r))
        .collect()
}

fn decode_one(op: &Op, r: pb::MultiOpResult) -> Result<OpResult> {
    let malformed = || {
        Error::api(
            ErrorCode::MarshallingError,
            op.path(),
            "multi result does not match its op",
        )
    };
    Ok(match (op, r.result) {
        (Op::Create { .. }, Some(pb::multi_op_result::Result::Create(c))) => OpResult::Create {
            path: c.path,
            stat: c.stat.ok_or_else(malformed)?,
        },
        (Op::SetData { .. }, Some(pb::multi_op_result::Result::SetData(s))) => OpResult::SetData {
            stat: s.stat.ok_or_else(malformed)?,
        },
        (Op::Delete { .. }, _) => OpResult::Delete,
        (Op::Check { .. }, _) => OpResult::Check,
        _ => return Err(malformed()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(code: ErrorCode) -> pb::MultiOpResult {
        pb::MultiOpResult {
            error: code as i32,
            message: String::new(),
            result: None,
        }
    }

    fn ops() -> Vec<Op> {
        vec![
            Op::create("/a", b"1".to_vec(), CreateOptions::default()),
            Op::check("/b", Some(3)),
            Op::set_data("/c", b"x".to_vec(), None),
            Op::delete("/d", None),
        ]
    }

    #[test]
    fn bad_op_is_reported_by_index_before_sending() {
        let mut ops = ops();
        ops[2] = Op::delete("c/", None);
        let err = encode(&ops).unwrap_err();
        assert_eq!(
            err,
            Error::Multi {
                index: 2,
                code: ErrorCode::InvalidPath,
                path: "c/".into(),
                message: "path must start with '/'".into()
            }
        );
        assert!(err.to_string().starts_with("InvalidPath: c/ (op 2"));
    }

    #[test]
    fn encodes_every_kind() {
        let req = encode(&ops()).unwrap();
        assert_eq!(req.ops.len(), 4);
        assert!(matches!(
            req.ops[1].op,
            Some(pb::multi_op::Op::Check(pb::CheckRequest {
                version: Some(3),
                ..
            }))
        ));
    }

    #[test]
    fn failure_names_the_first_real_failure() {
        let resp = pb::MultiResponse {
            results: vec![
                result(ErrorCode::Ok),
                result(ErrorCode::BadVersion),
                result(ErrorCode::RuntimeInconsistency),
                result(ErrorCode::RuntimeInconsistency),
            ],
        };
        let err = decode(&ops(), ErrorCode::BadVersion, "", Some(resp)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::BadVersion);
        assert!(matches!(err, Error::Multi { index: 1, ref path, .. } if path == "/b"));
        assert_eq!(err.to_string(), "BadVersion: /b (op 1 of the multi)");
    }

    #[test]
    fn success_decodes_per_op_results() {
        let stat = Stat {
            czxid: 9,
            ..Default::default()
        };
        let resp = pb::MultiResponse {
            results: vec![
                pb::MultiOpResult {
                    result: Some(pb::multi_op_result::Result::Create(pb::CreateResponse {
                        path: "/a".into(),
                        stat: Some(stat),
                    })),
                    ..result(ErrorCode::Ok)
                },
                result(ErrorCode::Ok),
                pb::MultiOpResult {
                    result: Some(pb::multi_op_result::Result::SetData(pb::StatResponse {
                        stat: Some(stat),
                    })),
                    ..result(ErrorCode::Ok)
                },
                result(ErrorCode::Ok),
            ],
        };
        let got = decode(&ops(), ErrorCode::Ok, "", Some(resp)).unwrap();
        assert_eq!(
            got,
            vec![
                OpResult::Create {
                    path: "/a".into(),
                    stat
                },
                OpResult::Check,
                OpResult::SetData { stat },
                OpResult::Delete
            ]
        );
    }

    #[test]
    fn short_answer_is_a_marshalling_error() {
        let resp = pb::MultiResponse {
            results: vec![result(ErrorCode::Ok)],
        };
        let err = decode(&ops(), ErrorCode::Ok, "", Some(resp)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::MarshallingError);
    }
}
