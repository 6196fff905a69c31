//! Minimal NRI plugin that logs every event it receives (every lifecycle event the runtime's NRI
//! version knows, validation aside), with each container's state and pid as the runtime sent them.
//!
//! Usage: `logger [--socket PATH] [--name NAME] [--idx NN]`. When started by the
//! runtime as a pre-installed plugin, `NRI_PLUGIN_SOCKET`/`NRI_PLUGIN_NAME`/
//! `NRI_PLUGIN_IDX` take precedence.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use topolet_nri::api::{self, Event};
use topolet_nri::{EventMask, Plugin, PluginResult, RuntimeInfo, Stub, StubConfig};

struct Logger;

#[async_trait]
impl Plugin for Logger {
    fn events(&self) -> EventMask {
        EventMask::of(&[
            Event::RUN_POD_SANDBOX,
            Event::STOP_POD_SANDBOX,
            Event::REMOVE_POD_SANDBOX,
            Event::CREATE_CONTAINER,
            Event::POST_CREATE_CONTAINER,
            Event::START_CONTAINER,
            Event::POST_START_CONTAINER,
            Event::UPDATE_CONTAINER,
            Event::POST_UPDATE_CONTAINER,
            Event::STOP_CONTAINER,
            Event::REMOVE_CONTAINER,
            Event::UPDATE_POD_SANDBOX,
            Event::POST_UPDATE_POD_SANDBOX,
        ])
    }
    async fn configure(&self, req: &api::ConfigureRequest, rt: &RuntimeInfo) -> PluginResult<()> {
        tracing::info!(runtime = %rt.name, version = %rt.version, nri = ?rt.nri_version, config_len = req.config.len(), "configure");
        Ok(())
    }
    async fn synchronize(
        &self,
        pods: Vec<api::PodSandbox>,
        containers: Vec<api::Container>,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        tracing::info!(
            pods = pods.len(),
            containers = containers.len(),
            "synchronize"
        );
        Ok(Vec::new())
    }
    async fn run_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        tracing::info!(pod = %pod.name, ns = %pod.namespace, "run pod sandbox");
        Ok(())
    }
    async fn stop_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        tracing::info!(pod = %pod.name, "stop pod sandbox");
        Ok(())
    }
    async fn remove_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        tracing::info!(pod = %pod.name, "remove pod sandbox");
        Ok(())
    }
    async fn update_pod_sandbox(&self, req: api::UpdatePodSandboxRequest) -> PluginResult<()> {
        tracing::info!(pod = %req.pod.name, "update pod sandbox");
        Ok(())
    }
    async fn post_update_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        tracing::info!(pod = %pod.name, "post-update pod sandbox");
        Ok(())
    }
    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> PluginResult<api::CreateContainerResponse> {
        let c = &req.container;
        tracing::info!(pod = %req.pod.name, container = %c.name, state = ?c.state, pid = c.pid, "create container");
        Ok(Default::default())
    }
    async fn post_create_container(
        &self,
        pod: api::PodSandbox,
        c: api::Container,
    ) -> PluginResult<()> {
        tracing::info!(pod = %pod.name, container = %c.name, state = ?c.state, pid = c.pid, "post-create container");
        Ok(())
    }
    async fn start_container(&self, pod: api::PodSandbox, c: api::Container) -> PluginResult<()> {
        tracing::info!(pod = %pod.name, container = %c.name, state = ?c.state, pid = c.pid, "start container");
        Ok(())
    }
    async fn post_start_container(
        &self,
        pod: api::PodSandbox,
        c: api::Container,
    ) -> PluginResult<()> {
        tracing::info!(pod = %pod.name, container = %c.name, state = ?c.state, pid = c.pid, "post-start container");
        Ok(())
    }
    async fn update_container(
        &self,
        req: api::UpdateContainerRequest,
    ) -> PluginResult<api::UpdateContainerResponse> {
        let cpus = req
            .linux_resources
            .as_ref()
            .and_then(|r| r.cpu.as_ref())
            .map(|c| c.cpus.clone());
        tracing::info!(container = %req.container.name, pid = req.container.pid, ?cpus, "update container");
        Ok(Default::default())
    }
    async fn post_update_container(
        &self,
        pod: api::PodSandbox,
        c: api::Container,
    ) -> PluginResult<()> {
        tracing::info!(pod = %pod.name, container = %c.name, pid = c.pid, "post-update container");
        Ok(())
    }
    async fn stop_container(
        &self,
        pod: api::PodSandbox,
        c: api::Container,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        tracing::info!(pod = %pod.name, container = %c.name, state = ?c.state, pid = c.pid, "stop container");
        Ok(Vec::new())
    }
    async fn remove_container(&self, pod: api::PodSandbox, c: api::Container) -> PluginResult<()> {
        tracing::info!(pod = %pod.name, container = %c.name, "remove container");
        Ok(())
    }
}

/// Command-line arguments.
struct Args {
    socket: Option<PathBuf>,
    name: Option<String>,
    idx: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let (mut socket, mut name, mut idx) = (None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("missing value for {a}"));
        match a.as_str() {
            "--socket" => socket = Some(PathBuf::from(val()?)),
            "--name" => name = Some(val()?),
            "--idx" => idx = Some(val()?),
            "-h" | "--help" => {
                return Err("usage: logger [--socket PATH] [--name NAME] [--idx NN]".into())
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        socket,
        name: name.or(Some("logger".into())),
        idx: idx.or(Some("50".into())),
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = parse_args()?;
    let cfg = StubConfig::from_env(args.name, args.idx, args.socket)?;
    let stub = Stub::new(Arc::new(Logger), cfg)?;
    stub.run().await?;
    Ok(())
}
