//! Compiles `proto/warden.proto` with protox (pure Rust), so no system
//! `protoc` is needed to build Warden; with the `grpc` feature also
//! `proto/lock.proto`, the gRPC lock service, through tonic's codegen.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/warden.proto");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(["warden.proto"], ["proto"])?;
    prost_build::Config::new()
        .file_descriptor_set_path(out.join("warden_descriptor.bin"))
        .compile_fds(fds)?;
    #[cfg(feature = "grpc")]
    {
        use prost::Message as _;
        println!("cargo:rerun-if-changed=proto/lock.proto");
        let fds = protox::compile(["lock.proto"], ["proto"])?;
        // The descriptors, for the server's reflection service.
        std::fs::write(out.join("lock_descriptor.bin"), fds.encode_to_vec())?;
        tonic_prost_build::configure().compile_fds(fds)?;
    }
    Ok(())
}
