//! Compiles the server's log/snapshot formats (`proto/txn.proto`), reusing
//! the wire types (`Stat`, `Acl`) from warden-protocol.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/txn.proto");
    println!("cargo:rerun-if-changed=../protocol/proto/warden.proto");
    let fds = protox::compile(["txn.proto"], ["proto", "../protocol/proto"])?;
    prost_build::Config::new()
        .extern_path(".warden.v1", "::warden_protocol::pb")
        .compile_fds(fds)?;
    Ok(())
}
