//! Compiles `proto/warden.proto` with protox (pure Rust), so no system
//! `protoc` is needed to build Warden.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/warden.proto");
    let fds = protox::compile(["warden.proto"], ["proto"])?;
    prost_build::Config::new()
        .file_descriptor_set_path(
            std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("warden_descriptor.bin"),
        )
        .compile_fds(fds)?;
    Ok(())
}
