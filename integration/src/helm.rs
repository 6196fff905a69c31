//! topolet installed the way operators install it: the image of `hack/build-image.sh` imported
//! into the stack's containerd with `ctr`, and the Helm chart `deploy/helm/topolet` installed,
//! upgraded, rolled back and uninstalled with the `helm` of `hack/install-kube.sh`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context};

use crate::cluster::Cluster;
use crate::paths;
use crate::stack::Stack;

/// An image tarball `hack/build-image.sh` wrote (its `key=value` lines).
#[derive(Debug, Clone)]
pub struct Image {
    pub tarball: PathBuf,
    /// The tarball's size in bytes.
    pub size: u64,
    /// The compressed layer's size in bytes.
    pub layer_size: u64,
    /// `localhost/topolet:<tag>`.
    pub name: String,
    /// The manifest's digest (`sha256:…`).
    pub digest: String,
    /// What the binary reports (`topolet --version`).
    pub version: String,
}

impl Image {
    /// The tag part of the name (the chart's `image.tag`).
    pub fn tag(&self) -> &str {
        self.name.rsplit_once(':').map(|(_, t)| t).unwrap_or("")
    }
}

/// The commit an image is built from: its revision annotation and its `created` time
/// (`TOPOLET_REVISION`, `SOURCE_DATE_EPOCH` of `hack/build-image.sh`). Read once, so that the
/// images of one test are of one commit even when the checkout changes meanwhile.
#[derive(Debug, Clone)]
pub struct Provenance {
    pub revision: String,
    pub epoch: String,
}

impl Provenance {
    /// The checkout's HEAD (`+dirty` with uncommitted changes) and its commit date.
    pub fn of_checkout() -> anyhow::Result<Provenance> {
        let git = |args: &[&str]| -> anyhow::Result<std::process::Output> {
            Command::new("git")
                .arg("-C")
                .arg(paths::repo_root())
                .args(args)
                .output()
                .with_context(|| format!("running git {}", args.join(" ")))
        };
        let head = git(&["rev-parse", "HEAD"])?;
        ensure!(head.status.success(), "git rev-parse HEAD failed");
        let mut revision = String::from_utf8_lossy(&head.stdout).trim().to_string();
        if !git(&["diff", "--quiet", "HEAD", "--"])?.status.success() {
            revision.push_str("+dirty");
        }
        let epoch = git(&["log", "-1", "--format=%ct"])?;
        ensure!(epoch.status.success(), "git log -1 failed");
        Ok(Provenance {
            revision,
            epoch: String::from_utf8_lossy(&epoch.stdout).trim().to_string(),
        })
    }
}

/// Builds the image of `bin` from commit `from` into `out` with `hack/build-image.sh`.
pub fn build_image(bin: &Path, from: &Provenance, out: &Path) -> anyhow::Result<Image> {
    let script = paths::repo_root().join("hack/build-image.sh");
    let o = Command::new(&script)
        .arg(out)
        .env("TOPOLET_BIN", bin)
        .env("TOPOLET_REVISION", &from.revision)
        .env("SOURCE_DATE_EPOCH", &from.epoch)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(
        o.status.success(),
        "hack/build-image.sh {} failed ({}):\n{}",
        out.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let kv: BTreeMap<String, String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let get = |k: &str| {
        kv.get(k)
            .cloned()
            .with_context(|| format!("hack/build-image.sh printed no {k}=: {kv:?}"))
    };
    Ok(Image {
        tarball: PathBuf::from(get("tarball")?),
        size: get("size")?.parse().context("size=")?,
        layer_size: get("layer_size")?.parse().context("layer_size=")?,
        name: get("name")?,
        digest: get("digest")?,
        version: get("version")?,
    })
}

/// Imports `image` into the stack's containerd (namespace `k8s.io`, where the CRI finds it) and
/// checks that the CRI lists it under its name.
pub fn import_image(stack: &Stack, image: &Image) -> anyhow::Result<()> {
    let o = stack
        .command("ctr")
        .args(["-n", "k8s.io", "images", "import"])
        .arg(&image.tarball)
        .output()
        .context("running ctr images import")?;
    ensure!(
        o.status.success(),
        "ctr images import {} failed ({}): {}",
        image.tarball.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    stack
        .cri()
        .run(&["inspecti", &image.name])
        .with_context(|| format!("the CRI does not list {} after the import", image.name))?;
    Ok(())
}

/// The topolet binary of the upgrade image: the same source built with another version string
/// (`TOPOLET_VERSION`, read at compile time by the binary's crate, plugin/src/main.rs). `TOPOLET_NEXT_BIN` when set
/// (hack/test.sh builds it once); else built here into `target/helm/topolet-next`, and the
/// ordinary binary built again after it, so that `target/debug/topolet` is what it was.
pub fn upgrade_binary(version: &str) -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("TOPOLET_NEXT_BIN") {
        let bin = PathBuf::from(bin);
        ensure!(
            bin.is_file(),
            "TOPOLET_NEXT_BIN={} is not a file",
            bin.display()
        );
        return Ok(bin);
    }
    let cargo = std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cargo"));
    let build = |version: Option<&str>| -> anyhow::Result<()> {
        let mut cmd = Command::new(&cargo);
        cmd.args(["build", "-p", "topolet", "--bin", "topolet"])
            .current_dir(paths::repo_root());
        for (name, _) in std::env::vars_os() {
            if crate::topolet::is_set_by_cargo_for_this_test(&name) {
                cmd.env_remove(&name);
            }
        }
        match version {
            Some(v) => cmd.env("TOPOLET_VERSION", v),
            None => cmd.env_remove("TOPOLET_VERSION"),
        };
        let o = cmd.output().context("running cargo build -p topolet")?;
        ensure!(
            o.status.success(),
            "cargo build -p topolet (TOPOLET_VERSION={version:?}) failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        Ok(())
    };
    build(Some(version))?;
    let built = paths::target_dir().join("debug/topolet");
    let next = paths::target_dir().join("helm/topolet-next");
    std::fs::create_dir_all(next.parent().context("target/helm")?)?;
    std::fs::copy(&built, &next)
        .with_context(|| format!("copying {} to {}", built.display(), next.display()))?;
    build(None)?;
    Ok(next)
}

/// `helm` against the cluster, with its cache, configuration and data under `home` (nothing
/// written to the user's home).
pub struct Helm {
    bin: PathBuf,
    home: PathBuf,
    kubeconfig: String,
}

impl Helm {
    pub fn new(cluster: &Cluster, home: &Path) -> anyhow::Result<Helm> {
        let bin = paths::repo_root().join(".deps/bin/helm");
        ensure!(
            bin.is_file(),
            "{} is missing: run hack/install-kube.sh",
            bin.display()
        );
        std::fs::create_dir_all(home).with_context(|| format!("creating {}", home.display()))?;
        Ok(Helm {
            bin,
            home: home.to_path_buf(),
            kubeconfig: cluster.env("KUBECONFIG")?.to_string(),
        })
    }

    /// The chart's directory.
    pub fn chart() -> PathBuf {
        paths::repo_root().join("deploy/helm/topolet")
    }

    /// Runs `helm ARGS`; its stdout, or an error with its stderr.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let o = self.command(args).output().context("running helm")?;
        if !o.status.success() {
            bail!(
                "helm {} failed ({}): {}",
                args.join(" "),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"));
        cmd
    }
}
