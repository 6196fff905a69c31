//! The PodResources consumer of hack/podresources-client (Go, the kubelet's own client of
//! k8s.io/kubelet v0.37.2 `pkg/apis/podresources/v1`), as node-feature-discovery's topology
//! updater and GPU exporters read a node's PodResources socket: built once per target dir
//! ([`crate::go::build`], the shared module cache), run once per call.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use serde_json::Value;

use crate::paths;

/// The client's binary, built into the target dir.
pub fn binary() -> anyhow::Result<PathBuf> {
    let to = paths::target_dir().join("podresources-client");
    let src = paths::repo_root().join("hack/podresources-client");
    crate::go::build(&src, &to, crate::go::Modules::Cached)?;
    Ok(to)
}

/// A call's outcome: the answer as JSON (the proto field names), or the gRPC error the client
/// printed (`Code: message`).
pub fn call(socket: &Path, args: &[&str]) -> anyhow::Result<Result<Value, String>> {
    let out = Command::new(binary()?)
        .arg("-socket")
        .arg(socket)
        .args(args)
        .output()
        .context("running podresources-client")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if out.status.code() != Some(1) {
            bail!("podresources-client {args:?}: {err}");
        }
        return Ok(Err(err));
    }
    let answer = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("podresources-client {args:?}: not JSON"))?;
    Ok(Ok(answer))
}
