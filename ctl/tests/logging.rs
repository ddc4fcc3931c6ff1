//! wardenctl's logging flags: quiet by default (stderr empty on success),
//! the client library's lines with `--log-level debug`, JSON lines only
//! with `--log-format json`.

mod common;

use common::{ok_stdout, wardenctl, WardenServer};

#[test]
fn logs_are_off_unless_asked_and_json_when_asked() {
    let server = WardenServer::start();
    let out = wardenctl(&server.addr, &["ls", "/"]);
    ok_stdout(&out);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = wardenctl(
        &server.addr,
        &["--log-level", "debug", "--log-format", "json", "ls", "/"],
    );
    ok_stdout(&out);
    let stderr = String::from_utf8(out.stderr).unwrap();
    let mut lines = 0;
    for line in stderr.lines() {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
        assert!(event["level"].is_string(), "{line}");
        lines += 1;
    }
    assert!(lines > 0, "debug asked for, nothing logged");

    // The flags may come after the subcommand too (they are global), and
    // text is the default format.
    let out = wardenctl(&server.addr, &["ls", "/", "--log-level", "debug"]);
    ok_stdout(&out);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("INFO") || stderr.contains("DEBUG"),
        "{stderr}"
    );
    assert!(!stderr.starts_with('{'), "{stderr}");
}
