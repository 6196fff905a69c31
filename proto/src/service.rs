//! Adapter from the generated ttrpc `Plugin` service to the user's [`Plugin`]
//! trait, for one connection: event gating by mask (Unimplemented = 12 for the
//! rest), StateChange dispatch, and Synchronize page buffering.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::mpsc;
use ttrpc::r#async::TtrpcContext;
use ttrpc::{Code, Status};

use crate::api::{self, Event};
use crate::api_ttrpc;
use crate::events::EventMask;
use crate::plugin::{Plugin, PluginError, RuntimeInfo};

/// What the service tells the stub's connection loop.
#[derive(Debug, Clone)]
pub(crate) enum SessionEvent {
    Configured(RuntimeInfo, EventMask),
    Synchronized { pods: usize, containers: usize },
}

pub(crate) struct PluginService<P: Plugin> {
    plugin: Arc<P>,
    mask: Mutex<Option<EventMask>>,
    sync_buf: Mutex<(Vec<api::PodSandbox>, Vec<api::Container>)>,
    notify: mpsc::UnboundedSender<SessionEvent>,
}

fn status(code: Code, msg: impl Into<String>) -> ttrpc::Error {
    let mut s = Status::new();
    s.set_code(code);
    s.set_message(msg.into());
    ttrpc::Error::RpcStatus(s)
}

fn unimplemented(method: &str) -> ttrpc::Error {
    status(
        Code::UNIMPLEMENTED,
        format!("{method} is not handled by this plugin"),
    )
}

fn handler_err(method: &str, e: PluginError) -> ttrpc::Error {
    // The plugin logs its own refusals (it knows which repeat); the runtime gets the message.
    tracing::debug!(method, error = %e, "nri plugin handler failed");
    status(Code::UNKNOWN, e.to_string())
}

impl<P: Plugin> PluginService<P> {
    pub(crate) fn new(plugin: Arc<P>, notify: mpsc::UnboundedSender<SessionEvent>) -> Self {
        PluginService {
            plugin,
            mask: Mutex::new(None),
            sync_buf: Mutex::new((Vec::new(), Vec::new())),
            notify,
        }
    }

    fn handles(&self, ev: Event) -> bool {
        let configured = self.mask.lock().ok().and_then(|m| *m);
        configured
            .unwrap_or_else(|| self.plugin.events())
            .contains(ev)
    }

    fn gate(&self, ev: Event, method: &str) -> ttrpc::Result<()> {
        if self.handles(ev) {
            Ok(())
        } else {
            Err(unimplemented(method))
        }
    }

    async fn dispatch_state_change(&self, ev: api::StateChangeEvent) -> ttrpc::Result<()> {
        let event = match ev.event.enum_value() {
            Ok(e) => e,
            Err(v) => {
                tracing::warn!(event = v, "nri state change with unknown event ignored");
                return Ok(());
            }
        };
        if !self.handles(event) {
            tracing::debug!(?event, "nri state change for unsubscribed event ignored");
            return Ok(());
        }
        let pod = ev.pod.into_option().unwrap_or_default();
        let ctr = ev.container.into_option().unwrap_or_default();
        let p = &self.plugin;
        let name = "StateChange";
        let r = match event {
            Event::RUN_POD_SANDBOX => p.run_pod_sandbox(pod).await,
            Event::STOP_POD_SANDBOX => p.stop_pod_sandbox(pod).await,
            Event::REMOVE_POD_SANDBOX => p.remove_pod_sandbox(pod).await,
            Event::POST_UPDATE_POD_SANDBOX => p.post_update_pod_sandbox(pod).await,
            Event::POST_CREATE_CONTAINER => p.post_create_container(pod, ctr).await,
            Event::START_CONTAINER => p.start_container(pod, ctr).await,
            Event::POST_START_CONTAINER => p.post_start_container(pod, ctr).await,
            Event::POST_UPDATE_CONTAINER => p.post_update_container(pod, ctr).await,
            Event::REMOVE_CONTAINER => p.remove_container(pod, ctr).await,
            other => {
                // Create/Update/Stop container, UpdatePodSandbox and validation always
                // have dedicated RPCs; a StateChange for them carries no reply channel.
                tracing::warn!(event = ?other, "nri state change for a request-style event ignored");
                Ok(())
            }
        };
        r.map_err(|e| handler_err(name, e))
    }
}

fn pod_of(pod: protobuf::MessageField<api::PodSandbox>) -> api::PodSandbox {
    pod.into_option().unwrap_or_default()
}

fn ctr_of(ctr: protobuf::MessageField<api::Container>) -> api::Container {
    ctr.into_option().unwrap_or_default()
}

#[async_trait]
impl<P: Plugin> api_ttrpc::Plugin for PluginService<P> {
    async fn configure(
        &self,
        _ctx: &TtrpcContext,
        req: api::ConfigureRequest,
    ) -> ttrpc::Result<api::ConfigureResponse> {
        let info = RuntimeInfo::from_configure(&req);
        tracing::info!(
            runtime = %info.name,
            runtime_version = %info.version,
            nri_version = ?info.nri_version.map(|v| v.to_string()),
            "nri configure"
        );
        self.plugin
            .configure(&req, &info)
            .await
            .map_err(|e| handler_err("Configure", e))?;
        let wanted = self.plugin.events();
        let mask = wanted.for_runtime(info.nri_version);
        if mask != wanted {
            tracing::info!(wanted = %wanted, sent = %mask, "nri event mask fitted to runtime version");
        }
        if let Ok(mut m) = self.mask.lock() {
            *m = Some(wanted);
        }
        let _ = self.notify.send(SessionEvent::Configured(info, mask));
        Ok(api::ConfigureResponse {
            events: mask.to_wire(),
            ..Default::default()
        })
    }

    async fn synchronize(
        &self,
        _ctx: &TtrpcContext,
        req: api::SynchronizeRequest,
    ) -> ttrpc::Result<api::SynchronizeResponse> {
        let (pods, containers) = {
            let mut buf = self
                .sync_buf
                .lock()
                .map_err(|_| status(Code::INTERNAL, "synchronize buffer poisoned"))?;
            buf.0.extend(req.pods);
            buf.1.extend(req.containers);
            if req.more {
                tracing::debug!(
                    pods = buf.0.len(),
                    containers = buf.1.len(),
                    "nri synchronize page buffered"
                );
                return Ok(api::SynchronizeResponse {
                    more: true,
                    ..Default::default()
                });
            }
            (std::mem::take(&mut buf.0), std::mem::take(&mut buf.1))
        };
        let (np, nc) = (pods.len(), containers.len());
        tracing::info!(pods = np, containers = nc, "nri synchronize");
        let update = self
            .plugin
            .synchronize(pods, containers)
            .await
            .map_err(|e| handler_err("Synchronize", e))?;
        let _ = self.notify.send(SessionEvent::Synchronized {
            pods: np,
            containers: nc,
        });
        Ok(api::SynchronizeResponse {
            update,
            more: false,
            ..Default::default()
        })
    }

    async fn shutdown(&self, _ctx: &TtrpcContext, _: api::Empty) -> ttrpc::Result<api::Empty> {
        tracing::info!("nri runtime announced shutdown");
        self.plugin.shutdown().await;
        Ok(api::Empty::default())
    }

    async fn run_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: api::RunPodSandboxRequest,
    ) -> ttrpc::Result<api::RunPodSandboxResponse> {
        self.gate(Event::RUN_POD_SANDBOX, "RunPodSandbox")?;
        self.plugin
            .run_pod_sandbox(pod_of(req.pod))
            .await
            .map_err(|e| handler_err("RunPodSandbox", e))?;
        Ok(Default::default())
    }

    async fn update_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: api::UpdatePodSandboxRequest,
    ) -> ttrpc::Result<api::UpdatePodSandboxResponse> {
        self.gate(Event::UPDATE_POD_SANDBOX, "UpdatePodSandbox")?;
        self.plugin
            .update_pod_sandbox(req)
            .await
            .map_err(|e| handler_err("UpdatePodSandbox", e))?;
        Ok(Default::default())
    }

    async fn post_update_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: api::PostUpdatePodSandboxRequest,
    ) -> ttrpc::Result<api::PostUpdatePodSandboxResponse> {
        self.gate(Event::POST_UPDATE_POD_SANDBOX, "PostUpdatePodSandbox")?;
        self.plugin
            .post_update_pod_sandbox(pod_of(req.pod))
            .await
            .map_err(|e| handler_err("PostUpdatePodSandbox", e))?;
        Ok(Default::default())
    }

    async fn stop_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: api::StopPodSandboxRequest,
    ) -> ttrpc::Result<api::StopPodSandboxResponse> {
        self.gate(Event::STOP_POD_SANDBOX, "StopPodSandbox")?;
        self.plugin
            .stop_pod_sandbox(pod_of(req.pod))
            .await
            .map_err(|e| handler_err("StopPodSandbox", e))?;
        Ok(Default::default())
    }

    async fn remove_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: api::RemovePodSandboxRequest,
    ) -> ttrpc::Result<api::RemovePodSandboxResponse> {
        self.gate(Event::REMOVE_POD_SANDBOX, "RemovePodSandbox")?;
        self.plugin
            .remove_pod_sandbox(pod_of(req.pod))
            .await
            .map_err(|e| handler_err("RemovePodSandbox", e))?;
        Ok(Default::default())
    }

    async fn create_container(
        &self,
        _ctx: &TtrpcContext,
        req: api::CreateContainerRequest,
    ) -> ttrpc::Result<api::CreateContainerResponse> {
        self.gate(Event::CREATE_CONTAINER, "CreateContainer")?;
        self.plugin
            .create_container(req)
            .await
            .map_err(|e| handler_err("CreateContainer", e))
    }

    async fn post_create_container(
        &self,
        _ctx: &TtrpcContext,
        req: api::PostCreateContainerRequest,
    ) -> ttrpc::Result<api::PostCreateContainerResponse> {
        self.gate(Event::POST_CREATE_CONTAINER, "PostCreateContainer")?;
        self.plugin
            .post_create_container(pod_of(req.pod), ctr_of(req.container))
            .await
            .map_err(|e| handler_err("PostCreateContainer", e))?;
        Ok(Default::default())
    }

    async fn start_container(
        &self,
        _ctx: &TtrpcContext,
        req: api::StartContainerRequest,
    ) -> ttrpc::Result<api::StartContainerResponse> {
        self.gate(Event::START_CONTAINER, "StartContainer")?;
        self.plugin
            .start_container(pod_of(req.pod), ctr_of(req.container))
            .await
            .map_err(|e| handler_err("StartContainer", e))?;
        Ok(Default::default())
    }

    async fn post_start_container(
        &self,
        _ctx: &TtrpcContext,
        req: api::PostStartContainerRequest,
    ) -> ttrpc::Result<api::PostStartContainerResponse> {
        self.gate(Event::POST_START_CONTAINER, "PostStartContainer")?;
        self.plugin
            .post_start_container(pod_of(req.pod), ctr_of(req.container))
            .await
            .map_err(|e| handler_err("PostStartContainer", e))?;
        Ok(Default::default())
    }

    async fn update_container(
        &self,
        _ctx: &TtrpcContext,
        req: api::UpdateContainerRequest,
    ) -> ttrpc::Result<api::UpdateContainerResponse> {
        self.gate(Event::UPDATE_CONTAINER, "UpdateContainer")?;
        self.plugin
            .update_container(req)
            .await
            .map_err(|e| handler_err("UpdateContainer", e))
    }

    async fn post_update_container(
        &self,
        _ctx: &TtrpcContext,
        req: api::PostUpdateContainerRequest,
    ) -> ttrpc::Result<api::PostUpdateContainerResponse> {
        self.gate(Event::POST_UPDATE_CONTAINER, "PostUpdateContainer")?;
        self.plugin
            .post_update_container(pod_of(req.pod), ctr_of(req.container))
            .await
            .map_err(|e| handler_err("PostUpdateContainer", e))?;
        Ok(Default::default())
    }

    async fn stop_container(
        &self,
        _ctx: &TtrpcContext,
        req: api::StopContainerRequest,
    ) -> ttrpc::Result<api::StopContainerResponse> {
        self.gate(Event::STOP_CONTAINER, "StopContainer")?;
        let update = self
            .plugin
            .stop_container(pod_of(req.pod), ctr_of(req.container))
            .await
            .map_err(|e| handler_err("StopContainer", e))?;
        Ok(api::StopContainerResponse {
            update,
            ..Default::default()
        })
    }

    async fn remove_container(
        &self,
        _ctx: &TtrpcContext,
        req: api::RemoveContainerRequest,
    ) -> ttrpc::Result<api::RemoveContainerResponse> {
        self.gate(Event::REMOVE_CONTAINER, "RemoveContainer")?;
        self.plugin
            .remove_container(pod_of(req.pod), ctr_of(req.container))
            .await
            .map_err(|e| handler_err("RemoveContainer", e))?;
        Ok(Default::default())
    }

    async fn state_change(
        &self,
        _ctx: &TtrpcContext,
        req: api::StateChangeEvent,
    ) -> ttrpc::Result<api::Empty> {
        self.dispatch_state_change(req).await?;
        Ok(api::Empty::default())
    }

    async fn validate_container_adjustment(
        &self,
        _ctx: &TtrpcContext,
        req: api::ValidateContainerAdjustmentRequest,
    ) -> ttrpc::Result<api::ValidateContainerAdjustmentResponse> {
        self.gate(
            Event::VALIDATE_CONTAINER_ADJUSTMENT,
            "ValidateContainerAdjustment",
        )?;
        self.plugin
            .validate_container_adjustment(req)
            .await
            .map_err(|e| handler_err("ValidateContainerAdjustment", e))
    }
}
