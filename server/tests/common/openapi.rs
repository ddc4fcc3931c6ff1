//! Holding answers against the served OpenAPI document with
//! `tests/openapi/check_answers.py`, in a venv of pinned validators from
//! PyPI (`target/openapi-venv`, made on first use by `testkit::python`).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::http::request;

/// Pinned validators (openapi-schema-validator comes with the first; it is
/// pinned because the check script uses it directly).
const OPENAPI_SPEC_VALIDATOR: &str = "openapi-spec-validator==0.9.0";
const OPENAPI_SCHEMA_VALIDATOR: &str = "openapi-schema-validator==0.9.0";

/// Validates the document `http` serves, then holds each of `answers`
/// against it: `{"method", "path", "status", "body"}` (the path as the
/// document's template) against that operation's answer schema, or
/// `{"schema", "body"}` against `components/schemas/<schema>`.
pub fn hold(http: &str, answers: Vec<Value>) {
    let venv = warden_testkit::python::venv(
        "openapi-venv",
        &[OPENAPI_SPEC_VALIDATOR, OPENAPI_SCHEMA_VALIDATOR],
    );
    let (status, doc) = request(http, "GET", "/api/v1/openapi.json", None);
    assert_eq!(status, 200, "{doc}");
    let dir = tempfile::tempdir().unwrap();
    let doc_path = dir.path().join("openapi.json");
    let answers_path = dir.path().join("answers.json");
    std::fs::write(&doc_path, doc).unwrap();
    let count = answers.len();
    std::fs::write(&answers_path, Value::from(answers).to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi/check_answers.py");
    let out = Command::new(venv.join("bin/python"))
        .arg(script)
        .arg(&doc_path)
        .arg(&answers_path)
        .output()
        .expect("run check_answers.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "answers against the OpenAPI document:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), format!("ok: {count} answers"), "{stdout}");
}
