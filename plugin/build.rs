//! Build script: the gRPC types topolet speaks, generated from the upstream `.proto` files of the
//! Kubernetes version under test (vendored in `plugin/proto/`), compiled by protox, a pure-Rust
//! protobuf compiler (no system `protoc`), and turned into prost messages plus tonic code by
//! tonic-prost-build, into `OUT_DIR`:
//!
//! - `v1.rs`: the kubelet's PodResources v1 (`proto/podresources/v1/api.proto`, k8s.io/kubelet
//!   v0.37.2), client and server (`topolet::kubelet::api`: the client asks the kubelet, the
//!   server is the re-export and the tests' fake kubelet);
//! - `runtime.v1.rs`: the CRI (`proto/cri/runtime/v1/api.proto`, k8s.io/cri-api v0.37.2),
//!   clients only (`topolet::pressure::cri`).
//!
//! No transport helpers: the clients dial their own channels.

use std::io;

fn compile(proto: &str, include: &str, server: bool) -> io::Result<()> {
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], [include])
        .map_err(|e| io::Error::other(format!("{proto}: {e}")))?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(server)
        .build_transport(false)
        .compile_fds(fds)
}

fn main() -> io::Result<()> {
    println!("cargo:rerun-if-changed=build.rs");
    compile(
        "proto/podresources/v1/api.proto",
        "proto/podresources/v1",
        true,
    )?;
    compile(
        "proto/cri/runtime/v1/api.proto",
        "proto/cri/runtime/v1",
        false,
    )
}
