//! The test DRA driver of hack/dra-driver (Go, k8s.io/dynamic-resource-allocation v0.37.2's
//! kubelet plugin library) beside the cluster's real kubelet: built with `go build` as the
//! device plugin is (`crate::go`, the module cache hack/install-kube.sh fills, read-only
//! go.mod), started against the kubelet's plugin registry (`DIR/kubelet/plugins_registry`, its
//! `--root-dir` being `DIR/kubelet`, hack/kube-node.sh) with the admin's kubeconfig (it
//! publishes the node's ResourceSlice and reads the claims it prepares), stopped on drop
//! ([`Program`]: SIGTERM first, so the library unregisters its sockets).

use std::path::PathBuf;
use std::process::Command;

use crate::cluster::Cluster;
use crate::go::Program;
use crate::paths;

/// The driver's name, and the DeviceClass the tests select its devices with.
pub const DRIVER: &str = "topolet.test";

/// The driver's binary, built into the target dir.
///
/// `TOPOLET_DRA_DRIVER`: a binary built beforehand (hack/guest.sh builds it on the host for the QEMU
/// guests, which have no Go toolchain), used as it is.
pub fn binary() -> anyhow::Result<PathBuf> {
    if let Some(prebuilt) = std::env::var_os("TOPOLET_DRA_DRIVER") {
        return Ok(PathBuf::from(prebuilt));
    }
    let to = paths::target_dir().join("dra-driver");
    let src = paths::repo_root().join("hack/dra-driver");
    crate::go::build(&src, &to, crate::go::Modules::Cached)?;
    Ok(to)
}

/// Starts the driver against `cluster`'s kubelet: `count` devices, each with
/// `resource.kubernetes.io/numaNode` = `numa`. Returns at once: wait for its ResourceSlice.
pub fn start(cluster: &Cluster, count: u32, numa: u32) -> anyhow::Result<Program> {
    let bin = binary()?;
    let root = cluster.dir().join("kubelet");
    let mut cmd = Command::new(&bin);
    cmd.arg("-kubeconfig")
        .arg(cluster.env("KUBECONFIG")?)
        .args(["-node", cluster.node_name()])
        .args(["-driver", DRIVER])
        .arg("-registry-dir")
        .arg(root.join("plugins_registry"))
        .arg("-plugin-dir")
        .arg(root.join("plugins").join(DRIVER))
        .args(["-count", &count.to_string()])
        .args(["-numa", &numa.to_string()]);
    Program::spawn(&mut cmd, cluster.dir().join("dra-driver.log"))
}

/// Whether the API holds a ResourceSlice of [`DRIVER`] for `cluster`'s node (read with
/// `kubectl`, as a user would check it).
pub fn slice_published(cluster: &Cluster) -> anyhow::Result<bool> {
    let selector = format!("spec.nodeName={}", cluster.node_name());
    let drivers = cluster.kubectl(&[
        "get",
        "resourceslices",
        "--field-selector",
        &selector,
        "-o",
        "jsonpath={.items[*].spec.driver}",
    ])?;
    Ok(drivers.split_whitespace().any(|d| d == DRIVER))
}
