//! The [`Plugin`] trait a Rust NRI plugin implements: one async method per event,
//! each defaulting to "no adjustment / empty response", plus `configure`,
//! `synchronize` and the declared [`EventMask`].

use async_trait::async_trait;

use crate::api::{
    ConfigureRequest, Container, ContainerUpdate, CreateContainerRequest, CreateContainerResponse,
    PodSandbox, UpdateContainerRequest, UpdateContainerResponse, UpdatePodSandboxRequest,
    ValidateContainerAdjustmentRequest, ValidateContainerAdjustmentResponse,
};
use crate::events::EventMask;
use crate::sync_fields::ContainerFields;
use crate::version::NriVersion;

/// Error a plugin handler returns; the runtime sees status Unknown (2) with this
/// message. For CreateContainer/StartContainer/UpdateContainer/RunPodSandbox that
/// fails the CRI operation; for the other events containerd only logs it (containerd
/// `internal/nri/nri.go`; a closed connection or the runtime's own deadline instead disconnects
/// the plugin).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// Handler failure with a message naming the cause.
    #[error("{0}")]
    Failed(String),
    /// The plugin rejects its configuration.
    #[error("invalid plugin configuration: {0}")]
    Config(String),
}

/// Facts about the runtime learned in Configure.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimeInfo {
    /// `runtime_name` (e.g. `containerd`).
    pub name: String,
    /// `runtime_version`.
    pub version: String,
    /// NRI version, sent (v0.12+) or inferred; `None` if unknown.
    pub nri_version: Option<NriVersion>,
    /// Registration timeout in ms (0 if the runtime did not say).
    pub registration_timeout_ms: i64,
    /// Request timeout in ms (0 if the runtime did not say).
    pub request_timeout_ms: i64,
}

impl RuntimeInfo {
    /// Extracts the runtime facts from a ConfigureRequest.
    pub fn from_configure(req: &ConfigureRequest) -> RuntimeInfo {
        RuntimeInfo {
            name: req.runtime_name.clone(),
            version: req.runtime_version.clone(),
            nri_version: NriVersion::from_configure(req),
            registration_timeout_ms: req.registration_timeout,
            request_timeout_ms: req.request_timeout,
        }
    }
}

/// Result type of plugin handlers.
pub type PluginResult<T> = Result<T, PluginError>;

/// An NRI plugin. Only events in [`Plugin::events`] are subscribed and
/// dispatched; everything else is answered with status Unimplemented (12).
///
/// Handlers run while the runtime holds its NRI lock: keep them short, and send
/// unsolicited updates through [`crate::updater::ContainerUpdater`] without
/// awaiting their completion.
#[async_trait]
pub trait Plugin: Send + Sync + 'static {
    /// Events the plugin handles. Called after [`Plugin::configure`]; the stub fits
    /// the mask to the runtime's NRI version.
    fn events(&self) -> EventMask;

    /// Configuration (`req.config` holds the pre-installed plugin's config text).
    async fn configure(&self, _req: &ConfigureRequest, _runtime: &RuntimeInfo) -> PluginResult<()> {
        Ok(())
    }

    /// Container fields this plugin never reads in [`Plugin::synchronize`]: the stub leaves them
    /// out of every container while it decodes the request (`crate::sync_fields`). Other
    /// requests carry every field.
    fn synchronize_skips(&self) -> ContainerFields {
        ContainerFields::NONE
    }

    /// Full runtime state after (re)connecting, pages already joined.
    async fn synchronize(
        &self,
        _pods: Vec<PodSandbox>,
        _containers: Vec<Container>,
    ) -> PluginResult<Vec<ContainerUpdate>> {
        Ok(Vec::new())
    }

    /// Runtime announced shutdown (rarely sent; usually the connection just ends).
    async fn shutdown(&self) {}

    /// RUN_POD_SANDBOX.
    async fn run_pod_sandbox(&self, _pod: PodSandbox) -> PluginResult<()> {
        Ok(())
    }
    /// UPDATE_POD_SANDBOX (NRI ≥ v0.10).
    async fn update_pod_sandbox(&self, _req: UpdatePodSandboxRequest) -> PluginResult<()> {
        Ok(())
    }
    /// POST_UPDATE_POD_SANDBOX (NRI ≥ v0.10).
    async fn post_update_pod_sandbox(&self, _pod: PodSandbox) -> PluginResult<()> {
        Ok(())
    }
    /// STOP_POD_SANDBOX.
    async fn stop_pod_sandbox(&self, _pod: PodSandbox) -> PluginResult<()> {
        Ok(())
    }
    /// REMOVE_POD_SANDBOX.
    async fn remove_pod_sandbox(&self, _pod: PodSandbox) -> PluginResult<()> {
        Ok(())
    }
    /// CREATE_CONTAINER: adjust the new container, update others.
    async fn create_container(
        &self,
        _req: CreateContainerRequest,
    ) -> PluginResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }
    /// POST_CREATE_CONTAINER.
    async fn post_create_container(&self, _pod: PodSandbox, _ctr: Container) -> PluginResult<()> {
        Ok(())
    }
    /// START_CONTAINER.
    async fn start_container(&self, _pod: PodSandbox, _ctr: Container) -> PluginResult<()> {
        Ok(())
    }
    /// POST_START_CONTAINER.
    async fn post_start_container(&self, _pod: PodSandbox, _ctr: Container) -> PluginResult<()> {
        Ok(())
    }
    /// UPDATE_CONTAINER: return updates (same container = merged into the request).
    async fn update_container(
        &self,
        _req: UpdateContainerRequest,
    ) -> PluginResult<UpdateContainerResponse> {
        Ok(UpdateContainerResponse::default())
    }
    /// POST_UPDATE_CONTAINER.
    async fn post_update_container(&self, _pod: PodSandbox, _ctr: Container) -> PluginResult<()> {
        Ok(())
    }
    /// STOP_CONTAINER: may return updates for other containers.
    async fn stop_container(
        &self,
        _pod: PodSandbox,
        _ctr: Container,
    ) -> PluginResult<Vec<ContainerUpdate>> {
        Ok(Vec::new())
    }
    /// REMOVE_CONTAINER.
    async fn remove_container(&self, _pod: PodSandbox, _ctr: Container) -> PluginResult<()> {
        Ok(())
    }
    /// VALIDATE_CONTAINER_ADJUSTMENT (NRI ≥ v0.10).
    async fn validate_container_adjustment(
        &self,
        _req: ValidateContainerAdjustmentRequest,
    ) -> PluginResult<ValidateContainerAdjustmentResponse> {
        Ok(ValidateContainerAdjustmentResponse::default())
    }
}
