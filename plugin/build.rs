//! Build script: the kubelet's PodResources v1 gRPC types (`proto/podresources/v1/api.proto`,
//! vendored from k8s.io/kubelet v0.37.2) compiled by protox, a pure-Rust protobuf compiler (no
//! system `protoc`), and turned into prost messages plus a tonic client and server by
//! tonic-prost-build, into `OUT_DIR/v1.rs` (`topolet::kubelet::api` includes it). The server is
//! generated for the tests' fake kubelet; no transport helpers (the client dials its own channel).

use std::io;

fn main() -> io::Result<()> {
    let proto = "proto/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    println!("cargo:rerun-if-changed=build.rs");
    let fds = protox::compile([proto], ["proto/podresources/v1"])
        .map_err(|e| io::Error::other(format!("{proto}: {e}")))?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .compile_fds(fds)
}
