//! CRI calls through `crictl` (one process per call, JSON in and out), against a [`Stack`].

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

use crate::kube::{ContainerSpec, PodSpec};
use crate::stack::Stack;

/// crictl bound to one stack.
pub struct Cri<'a> {
    stack: &'a Stack,
}

/// A created container and where it lives.
#[derive(Debug, Clone)]
pub struct Created {
    pub id: String,
    pub pod_id: String,
    /// The pod's cgroup parent: the container's cgroup is `<cgroup_parent>/<id>`.
    pub cgroup_parent: String,
    /// How long CreateContainer took (crictl process included).
    pub create_time: Duration,
}

/// How many times [`Cri::run`] makes a call whose connection never came up.
pub const CONNECT_ATTEMPTS: usize = 3;

/// True when crictl's `stderr` says the gRPC connection to the runtime never came up, so no
/// request was sent: `Unavailable` with a transport-level connection error (the dial or the
/// HTTP/2 preface failed).
fn never_connected(stderr: &str) -> bool {
    stderr.contains("code = Unavailable desc = connection error")
}

impl Stack {
    /// CRI calls against this stack.
    pub fn cri(&self) -> Cri<'_> {
        Cri::new(self)
    }
}

impl<'a> Cri<'a> {
    pub fn new(stack: &'a Stack) -> Cri<'a> {
        Cri { stack }
    }

    /// The stack this talks to.
    pub fn stack(&self) -> &'a Stack {
        self.stack
    }

    fn spec_dir(&self) -> anyhow::Result<PathBuf> {
        let d = self.stack.dir().join("specs");
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(d)
    }

    fn write_spec(&self, name: &str, v: &Value) -> anyhow::Result<PathBuf> {
        let p = self.spec_dir()?.join(name);
        let text = serde_json::to_string_pretty(v).context("serialising a CRI config")?;
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    }

    /// Runs `crictl ARGS` and returns its output whatever the exit status.
    pub fn run_raw(&self, args: &[&str]) -> anyhow::Result<Output> {
        self.stack
            .command("crictl")
            .args(args)
            .output()
            .with_context(|| format!("running crictl {}", args.join(" ")))
    }

    /// Runs `crictl ARGS`; fails with stderr if it fails; returns trimmed stdout. A call whose
    /// connection never came up (gRPC `Unavailable` with a connection error: no request reached
    /// containerd, so nothing changed) is made again, up to [`CONNECT_ATTEMPTS`] times in all:
    /// on a guest under software emulation and a loaded host, crictl's dial can miss gRPC's
    /// connect deadline while containerd is healthy.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut out = self.run_raw(args)?;
        for _ in 1..CONNECT_ATTEMPTS {
            if out.status.success() || !never_connected(&String::from_utf8_lossy(&out.stderr)) {
                break;
            }
            out = self.run_raw(args)?;
        }
        if !out.status.success() {
            bail!(
                "crictl {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// RunPodSandbox; returns the sandbox id.
    pub fn run_pod(&self, pod: &PodSpec) -> anyhow::Result<String> {
        let mkdir = std::fs::create_dir_all(&pod.log_directory);
        mkdir.with_context(|| format!("creating {}", pod.log_directory))?;
        let p = self.write_spec(&format!("{}-pod.json", pod.name), &pod.to_json())?;
        let path = p.to_string_lossy();
        self.run(&["runp", &path])
            .with_context(|| format!("RunPodSandbox {}", pod.pod_ref()))
    }

    /// CreateContainer (without starting it).
    pub fn create(
        &self,
        pod_id: &str,
        pod: &PodSpec,
        ctr: &ContainerSpec,
    ) -> anyhow::Result<Created> {
        let pp = self.write_spec(&format!("{}-pod.json", pod.name), &pod.to_json())?;
        let cp = self.write_spec(&format!("{}-{}.json", pod.name, ctr.name), &ctr.to_json())?;
        let t = Instant::now();
        let id = self
            .run(&[
                "create",
                pod_id,
                &cp.to_string_lossy(),
                &pp.to_string_lossy(),
            ])
            .with_context(|| format!("CreateContainer {}/{}", pod.pod_ref(), ctr.name))?;
        let create_time = t.elapsed();
        if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("crictl create printed {id:?}, not a container id");
        }
        Ok(Created {
            id,
            pod_id: pod_id.to_string(),
            cgroup_parent: pod.cgroup_parent.clone(),
            create_time,
        })
    }

    /// StartContainer.
    pub fn start(&self, id: &str) -> anyhow::Result<()> {
        self.run(&["start", id])
            .with_context(|| format!("StartContainer {id}"))
            .map(drop)
    }

    /// RunPodSandbox + CreateContainer + StartContainer.
    pub fn run_pod_with(&self, pod: &PodSpec, ctr: &ContainerSpec) -> anyhow::Result<Created> {
        let pod_id = self.run_pod(pod)?;
        let c = self.create(&pod_id, pod, ctr)?;
        self.start(&c.id)?;
        Ok(c)
    }

    /// StopContainer (immediately: SIGKILL after a 0 s grace period).
    pub fn stop(&self, id: &str) -> anyhow::Result<()> {
        self.run(&["stop", "--timeout", "0", id])
            .with_context(|| format!("StopContainer {id}"))
            .map(drop)
    }

    /// RemoveContainer (forcibly: stops it first if it runs).
    pub fn rm(&self, id: &str) -> anyhow::Result<()> {
        self.run(&["rm", "--force", id])
            .with_context(|| format!("RemoveContainer {id}"))
            .map(drop)
    }

    /// StopPodSandbox + RemovePodSandbox.
    pub fn remove_pod(&self, pod_id: &str) -> anyhow::Result<()> {
        self.run(&["stopp", pod_id])
            .with_context(|| format!("StopPodSandbox {pod_id}"))?;
        self.run(&["rmp", "--force", pod_id])
            .with_context(|| format!("RemovePodSandbox {pod_id}"))
            .map(drop)
    }

    /// ContainerStatus (verbose): `{"status": …, "info": {"pid", "runtimeSpec", …}}`.
    pub fn inspect(&self, id: &str) -> anyhow::Result<Value> {
        let out = self.run(&["inspect", "-o", "json", id])?;
        serde_json::from_str(&out).with_context(|| format!("parsing crictl inspect {id}"))
    }

    /// The container's state (`CONTAINER_RUNNING`, `CONTAINER_CREATED`, `CONTAINER_EXITED`, …).
    pub fn state(&self, id: &str) -> anyhow::Result<String> {
        let v = self.inspect(id)?;
        v["status"]["state"]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("crictl inspect {id}: no status.state"))
    }

    /// The container's init process id, as seen from the host.
    pub fn pid(&self, id: &str) -> anyhow::Result<i32> {
        let v = self.inspect(id)?;
        let pid = v["info"]["pid"]
            .as_i64()
            .with_context(|| format!("crictl inspect {id}: no info.pid"))?;
        if pid <= 0 {
            bail!("container {id} has no process (info.pid = {pid})");
        }
        i32::try_from(pid).with_context(|| format!("pid {pid} out of range"))
    }

    /// ExecSync; returns stdout.
    pub fn exec(&self, id: &str, cmd: &[&str]) -> anyhow::Result<String> {
        let mut args = vec!["exec", "--sync", id];
        args.extend_from_slice(cmd);
        self.run(&args)
            .with_context(|| format!("ExecSync {id} {}", cmd.join(" ")))
    }

    /// Every container id (all states).
    pub fn containers(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .run(&["ps", "-a", "-q"])?
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// Every pod sandbox id.
    pub fn pods(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .run(&["pods", "-q"])?
            .lines()
            .map(str::to_string)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::never_connected;

    #[test]
    fn only_a_connection_that_never_came_up_is_retried() {
        assert!(never_connected(
            "level=fatal msg=\"validate service connection: validate CRI v1 image API for \
             endpoint \\\"unix:///x/containerd.sock\\\": rpc error: code = Unavailable desc = \
             connection error: desc = \\\"transport: failed to write client preface: write \
             unix @->/x/containerd.sock: use of closed network connection\\\"\""
        ));
        // The runtime answered: a real error, never retried.
        assert!(!never_connected(
            "rpc error: code = Unknown desc = failed to create containerd container: topolet: \
             TopologyAffinityError"
        ));
        assert!(!never_connected(
            "rpc error: code = Unavailable desc = error reading from server: EOF"
        ));
    }
}
