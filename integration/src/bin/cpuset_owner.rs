//! A second cpuset owner for the coexistence test (`integration/tests/qos_resources.rs`): an
//! external NRI plugin, built on the proto crate's stub, that sets `cpuset.cpus` of every
//! container it sees created, as kubernetes-sigs/dra-driver-cpu does at NRI index 00.
//!
//! `cpuset_owner --socket PATH --cpus LIST [--idx NN] [--ready FILE] [--oom-floor N]`
//!
//! `--oom-floor N` also raises every container's oom_score_adj to at least N: on CRI-O, which has
//! no counterpart of containerd's `restrict_oom_score_adj` (cri-o/cri-o
//! internal/factory/container/container.go, SpecSetLinuxContainerResources, passes the CRI value
//! to runc as it is), a runtime without CAP_SYS_RESOURCE cannot start a Guaranteed container
//! (-997) that topolet leaves to this owner; topolet's own floor stands in only for containers
//! it adjusts.
//!
//! It writes FILE (empty) once the runtime has synchronized it: from then on the runtime calls it
//! for every CreateContainer, before plugins of a higher index. Runs until killed.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use async_trait::async_trait;
use topolet_nri::api::{self, Event};
use topolet_nri::protobuf;
use topolet_nri::{EventMask, Plugin, PluginResult, Stub, StubConfig};

struct Owner {
    cpus: String,
    ready: Option<PathBuf>,
    oom_floor: Option<i64>,
}

#[async_trait]
impl Plugin for Owner {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CREATE_CONTAINER])
    }

    async fn synchronize(
        &self,
        _pods: Vec<api::PodSandbox>,
        _containers: Vec<api::Container>,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        if let Some(path) = &self.ready {
            if let Err(e) = std::fs::write(path, b"") {
                eprintln!("cpuset_owner: writing {}: {e}", path.display());
            }
        }
        Ok(Vec::new())
    }

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> PluginResult<api::CreateContainerResponse> {
        let current_oom = req
            .container
            .as_ref()
            .and_then(|c| c.linux.as_ref())
            .and_then(|l| l.oom_score_adj.as_ref())
            .map(|o| o.value);
        let cpu = api::LinuxCPU {
            cpus: self.cpus.clone(),
            ..Default::default()
        };
        let resources = api::LinuxResources {
            cpu: protobuf::MessageField::some(cpu),
            ..Default::default()
        };
        let mut linux = api::LinuxContainerAdjustment {
            resources: protobuf::MessageField::some(resources),
            ..Default::default()
        };
        if let (Some(floor), Some(cur)) = (self.oom_floor, current_oom) {
            if cur < floor {
                linux.oom_score_adj = protobuf::MessageField::some(api::OptionalInt {
                    value: floor,
                    ..Default::default()
                });
            }
        }
        Ok(api::CreateContainerResponse {
            adjust: protobuf::MessageField::some(api::ContainerAdjustment {
                linux: protobuf::MessageField::some(linux),
                ..Default::default()
            }),
            ..Default::default()
        })
    }
}

fn main() -> anyhow::Result<()> {
    let (mut socket, mut cpus, mut idx, mut ready) = (None, None, "00".to_string(), None);
    let mut oom_floor = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--socket" => socket = Some(PathBuf::from(val()?)),
            "--cpus" => cpus = Some(val()?),
            "--idx" => idx = val()?,
            "--ready" => ready = Some(PathBuf::from(val()?)),
            "--oom-floor" => {
                let v = val()?;
                oom_floor = Some(v.parse().with_context(|| format!("--oom-floor {v}"))?);
            }
            other => bail!(
                "unknown argument {other}; usage: cpuset_owner --socket PATH --cpus LIST [--idx NN] [--ready FILE] [--oom-floor N]"
            ),
        }
    }
    let socket = socket.context("--socket is required")?;
    let cpus = cpus.context("--cpus is required")?;
    let cfg = StubConfig::new("cpuset-owner", idx, socket)?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building a tokio runtime")?
        .block_on(async {
            // The stub starts its updater task: inside the runtime.
            let stub = Stub::new(
                Arc::new(Owner {
                    cpus,
                    ready,
                    oom_floor,
                }),
                cfg,
            )?;
            stub.run().await?;
            anyhow::Ok(())
        })
}
