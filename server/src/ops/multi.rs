//! multi: check / create / delete / set_data, all or nothing.

use warden_protocol::pb::{self, multi_op::Op as MOp, response::Result as Res, ErrorCode};

use super::{check_path, check_version, create, delete, set_data, Failure};
use crate::proto::{
    multi_txn_op::Op as TOp, txn::Kind, AuthId, CheckTxn, MultiTxn, MultiTxnOp, Txn,
};
use crate::tree::{MultiOutcome, OpOutcome};

/// Most ops in one multi.
pub const MULTI_OPS_MAX: usize = 1000;

pub(super) fn plan(r: pb::MultiRequest, session_id: u64, ids: &[AuthId]) -> Result<Txn, Failure> {
    if r.ops.len() > MULTI_OPS_MAX {
        return Err(Failure::new(
            ErrorCode::BadArguments,
            format!(
                "multi of {} ops exceeds the limit of {MULTI_OPS_MAX}",
                r.ops.len()
            ),
        ));
    }
    let mut ops = Vec::with_capacity(r.ops.len());
    for (i, op) in r.ops.into_iter().enumerate() {
        let op = match op.op {
            Some(MOp::Create(c)) => TOp::Create(create::validate(&c, session_id, ids)?),
            Some(MOp::Delete(d)) => TOp::Delete(delete::validate(&d)?),
            Some(MOp::SetData(s)) => TOp::SetData(set_data::validate(&s)?),
            Some(MOp::Check(c)) => {
                check_path(&c.path)?;
                check_version(c.version, &c.path)?;
                TOp::Check(CheckTxn {
                    path: c.path,
                    version: c.version,
                })
            }
            None => {
                return Err(Failure::new(
                    ErrorCode::BadArguments,
                    format!("multi op {i} is empty"),
                ))
            }
        };
        ops.push(MultiTxnOp { op: Some(op) });
    }
    Ok(Txn {
        kind: Some(Kind::Multi(MultiTxn { ops })),
        ..Default::default()
    })
}

/// A multi's answer. On failure the response carries the failed op's code
/// and a result per op (ZooKeeper's shape), so clients can tell which op
/// failed.
pub(super) fn response(outcome: &MultiOutcome, txn: &Txn) -> Result<Option<Res>, Failure> {
    let count = match &txn.kind {
        Some(Kind::Multi(m)) => m.ops.len(),
        _ => 0,
    };
    match outcome {
        MultiOutcome::Ok(ops) => {
            let results = ops
                .iter()
                .map(|op| {
                    let result = match op {
                        OpOutcome::Create { path, stat } => {
                            Some(pb::multi_op_result::Result::Create(pb::CreateResponse {
                                path: path.clone(),
                                stat: Some(*stat),
                            }))
                        }
                        OpOutcome::SetData { stat } => {
                            Some(pb::multi_op_result::Result::SetData(pb::StatResponse {
                                stat: Some(*stat),
                            }))
                        }
                        OpOutcome::Delete | OpOutcome::Check => None,
                    };
                    pb::MultiOpResult {
                        error: ErrorCode::Ok as i32,
                        message: String::new(),
                        result,
                    }
                })
                .collect();
            Ok(Some(Res::Multi(pb::MultiResponse { results })))
        }
        &MultiOutcome::Failed { index, ref error } => {
            let detail = if error.code == ErrorCode::NoAuth {
                let perm = super::acl::write_perm(txn, Some(index));
                super::acl::no_auth(&error.path, perm, super::acl::txn_ids(txn)).message
            } else {
                error.path.clone()
            };
            let results = failed_results(count.max(index + 1), index, error.code, &detail);
            let mut f = Failure::new(error.code, format!("op {index}: {detail}"));
            f.detail = Some(Box::new(Res::Multi(results)));
            Err(f)
        }
    }
}

/// The per-op results of a failed multi of `count` ops.
fn failed_results(count: usize, index: usize, code: ErrorCode, path: &str) -> pb::MultiResponse {
    let results = (0..count)
        .map(|i| {
            let (error, message) = match i.cmp(&index) {
                std::cmp::Ordering::Less => (ErrorCode::Ok, String::new()),
                std::cmp::Ordering::Equal => (code, path.to_string()),
                std::cmp::Ordering::Greater => (ErrorCode::RuntimeInconsistency, String::new()),
            };
            pb::MultiOpResult {
                error: error as i32,
                message,
                result: None,
            }
        })
        .collect();
    pb::MultiResponse { results }
}
