//! The test device plugin of hack/device-plugin (Go, k8s.io/kubelet v0.37.2's device-plugin API)
//! beside the cluster's real kubelet: built once per target dir with `go build` (`GO`, else `go`
//! on PATH, else /usr/local/go/bin/go; the module cache `$TOPOLET_CACHE/go` that
//! hack/install-kube.sh fills, read-only go.mod), started against the kubelet's registration
//! socket, stopped on drop ([`Program`]).

use std::path::PathBuf;
use std::process::Command;

use crate::cluster::Cluster;
use crate::go::Program;
use crate::paths;

/// The device plugin's binary, built into the target dir (Go's build cache makes a rebuild of
/// an unchanged source quick).
///
/// `TOPOLET_DEVICE_PLUGIN`: a binary built beforehand (hack/guest.sh builds it on the host for the QEMU
/// guests, which have no Go toolchain), used as it is.
pub fn binary() -> anyhow::Result<PathBuf> {
    if let Some(prebuilt) = std::env::var_os("TOPOLET_DEVICE_PLUGIN") {
        return Ok(PathBuf::from(prebuilt));
    }
    let to = paths::target_dir().join("device-plugin");
    let src = paths::repo_root().join("hack/device-plugin");
    crate::go::build(&src, &to, crate::go::Modules::Cached)?;
    Ok(to)
}

/// Starts the plugin against `cluster`'s kubelet: `resource`, `count` devices, each on NUMA
/// node `numa`. Returns at once: wait for the node's allocatable to show the resource.
pub fn start(cluster: &Cluster, resource: &str, count: u32, numa: u32) -> anyhow::Result<Program> {
    let bin = binary()?;
    // The kubelet's /var/lib/kubelet is DIR/var-lib-kubelet (hack/kube-node.sh).
    let socket = cluster
        .dir()
        .join("var-lib-kubelet/device-plugins/kubelet.sock");
    let mut cmd = Command::new(&bin);
    cmd.arg("-kubelet-socket")
        .arg(&socket)
        .args(["-resource", resource])
        .args(["-count", &count.to_string()])
        .args(["-numa", &numa.to_string()]);
    Program::spawn(&mut cmd, cluster.dir().join("device-plugin.log"))
}
