//! The usual test set-up: a fresh stack with topolet registered on it. Fields drop in order:
//! topolet is killed before the stack is stopped.

use std::path::PathBuf;

use anyhow::Context;

use crate::kube::{self, ContainerSpec, PodSpec, Requirements};
use crate::observe;
use crate::stack::Stack;
use crate::topolet::{Topolet, TopoletConfig};

/// A stack with a registered, synchronized topolet.
pub struct WithTopolet {
    pub topolet: Topolet,
    pub stack: Stack,
    /// topolet's working directory (config, log, state).
    pub work: PathBuf,
    /// Node memory capacity, for kubelet-shaped oom_score_adj.
    pub mem_capacity: u64,
    /// The configuration topolet was started with.
    pub config: TopoletConfig,
}

impl WithTopolet {
    /// Starts a stack and topolet with the default test config (static, CPU 0 reserved,
    /// pids_limit 1024) and waits until it registered and synchronized.
    pub fn start() -> anyhow::Result<WithTopolet> {
        let stack = Stack::start()?;
        let work = stack.work_dir("topolet")?;
        let config = TopoletConfig::for_stack(&stack, &work);
        WithTopolet::start_with(stack, work, &config)
    }

    /// Like [`WithTopolet::start`] with the drift check every second (`[nri] drift_check_s = 1`):
    /// a container off its target is seen in the first lull.
    pub fn start_with_fast_drift_check() -> anyhow::Result<WithTopolet> {
        let stack = Stack::start()?;
        let work = stack.work_dir("topolet")?;
        let mut config = TopoletConfig::for_stack(&stack, &work);
        config.nri_toml = "drift_check_s = 1".into();
        WithTopolet::start_with(stack, work, &config)
    }

    /// Like [`WithTopolet::start`] with an explicit config.
    pub fn start_with(
        stack: Stack,
        work: PathBuf,
        config: &TopoletConfig,
    ) -> anyhow::Result<WithTopolet> {
        let mut topolet = Topolet::start(&work, config)?;
        topolet.wait_nri_synchronized(1)?;
        Ok(WithTopolet {
            topolet,
            stack,
            work,
            mem_capacity: observe::mem_capacity()?,
            config: config.clone(),
        })
    }

    /// topolet's state file (`<state dir>/assignments.json`).
    pub fn state_file(&self) -> PathBuf {
        self.config.state_dir.join("assignments.json")
    }

    /// Where the books read topolet's side: its state file and admin socket.
    pub fn books_side(&self) -> (PathBuf, PathBuf) {
        (self.state_file(), self.config.admin_socket.clone())
    }

    /// A kubelet-shaped one-container pod of `requirements`' class.
    pub fn pod(
        &self,
        name: &str,
        requirements: Requirements,
    ) -> anyhow::Result<(PodSpec, ContainerSpec)> {
        pod_for(&self.stack, name, requirements, self.mem_capacity)
    }
}

/// A kubelet-shaped one-container pod on `stack`.
pub fn pod_for(
    stack: &Stack,
    name: &str,
    requirements: Requirements,
    mem_capacity: u64,
) -> anyhow::Result<(PodSpec, ContainerSpec)> {
    let logs = stack.work_dir("pod-logs")?;
    Ok(kube::one_container_pod(
        stack.cgroup_base()?,
        &logs.to_string_lossy(),
        stack.test_image()?,
        name,
        requirements,
        mem_capacity,
    ))
}

/// Reads the machine's memory capacity with context.
pub fn mem_capacity() -> anyhow::Result<u64> {
    observe::mem_capacity().context("node memory capacity")
}
