//! A minimal CRI client (`runtime.v1.RuntimeService`) over the runtime's unix socket: what the
//! eviction `cri` action and the per-pod disk usage need, nothing more.
//!
//! The messages are a hand-written subset of k8s.io/cri-api `pkg/apis/runtime/v1/api.proto`
//! (field numbers checked against cri-api v0.34): only the fields topolet reads or sets.
//! Protobuf 3 decoders skip unknown fields, so a newer runtime's larger messages decode fine and
//! fields we leave out are simply never sent. Writing the prost derives by hand avoids a
//! build-time protoc (and a build script) for six messages.
//!
//! Transport: tonic's channel dialing `unix:<path>` (HTTP/2 over a unix stream, the way the
//! kubelet and crictl talk to containerd). Each call has a deadline; errors name the endpoint
//! and the call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

/// A CRI call that failed, naming the endpoint and the call.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("CRI endpoint {endpoint}: {source}")]
    Connect {
        endpoint: PathBuf,
        source: tonic::transport::Error,
    },
    #[error("CRI endpoint {endpoint}: {call}: {status}")]
    Call {
        endpoint: PathBuf,
        call: &'static str,
        status: Box<tonic::Status>,
    },
}

impl CriError {
    /// True when the runtime says the object does not exist (already gone: nothing to do).
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::Call { status, .. } if status.code() == tonic::Code::NotFound)
    }
}

/// `runtime.v1.ContainerState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ContainerState {
    Created = 0,
    Running = 1,
    Exited = 2,
    Unknown = 3,
}

/// `runtime.v1.ContainerStateValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStateValue {
    #[prost(enumeration = "ContainerState", tag = "1")]
    pub state: i32,
}

/// `runtime.v1.ContainerFilter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerFilter {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub state: Option<ContainerStateValue>,
    #[prost(string, tag = "3")]
    pub pod_sandbox_id: String,
}

/// `runtime.v1.ListContainersRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersRequest {
    #[prost(message, optional, tag = "1")]
    pub filter: Option<ContainerFilter>,
}

/// `runtime.v1.ContainerMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub attempt: u32,
}

/// `runtime.v1.Container` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(enumeration = "ContainerState", tag = "6")]
    pub state: i32,
}

/// `runtime.v1.ListContainersResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<Container>,
}

/// `runtime.v1.StopContainerRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Seconds to wait before SIGKILL.
    #[prost(int64, tag = "2")]
    pub timeout: i64,
}

/// `runtime.v1.StopContainerResponse` (and every other empty response).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `runtime.v1.StopPodSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopPodSandboxRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// `runtime.v1.ContainerStatusRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatusRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

/// `runtime.v1.ContainerStatus` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatus {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(enumeration = "ContainerState", tag = "3")]
    pub state: i32,
    /// Absolute path of the container's log file (containerd joins the sandbox's log directory
    /// and the container's relative log path).
    #[prost(string, tag = "15")]
    pub log_path: String,
}

/// `runtime.v1.ContainerStatusResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<ContainerStatus>,
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

/// A connected CRI runtime service client. Cheap to clone (shares the channel).
#[derive(Clone)]
pub struct CriClient {
    endpoint: PathBuf,
    channel: Channel,
    timeout: Duration,
}

impl CriClient {
    /// A client for the unix socket at `socket`. The channel connects lazily (at the first call,
    /// and again after the runtime restarts), so this never fails because containerd is down.
    pub fn new(socket: &Path, timeout: Duration) -> Result<CriClient, CriError> {
        let endpoint = Endpoint::from_shared(format!("unix:{}", socket.display()))
            .map_err(|source| CriError::Connect {
                endpoint: socket.to_path_buf(),
                source,
            })?
            .connect_timeout(timeout)
            .timeout(timeout);
        Ok(CriClient {
            endpoint: socket.to_path_buf(),
            channel: endpoint.connect_lazy(),
            timeout,
        })
    }

    /// The socket this client dials.
    pub fn endpoint(&self) -> &Path {
        &self.endpoint
    }

    async fn unary<Req, Resp>(
        &self,
        call: &'static str,
        path: &'static str,
        req: Req,
        timeout: Duration,
    ) -> Result<Resp, CriError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let err = |status: tonic::Status| CriError::Call {
            endpoint: self.endpoint.clone(),
            call,
            status: Box::new(status),
        };
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| err(tonic::Status::unavailable(e.to_string())))?;
        let mut request = tonic::Request::new(req);
        request.set_timeout(timeout);
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        grpc.unary(request, PathAndQuery::from_static(path), codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(err)
    }

    /// ListContainers of one pod sandbox (every state).
    pub async fn list_pod_containers(&self, sandbox_id: &str) -> Result<Vec<Container>, CriError> {
        let req = ListContainersRequest {
            filter: Some(ContainerFilter {
                pod_sandbox_id: sandbox_id.to_string(),
                ..Default::default()
            }),
        };
        let resp: ListContainersResponse = self
            .unary(
                "ListContainers",
                "/runtime.v1.RuntimeService/ListContainers",
                req,
                self.timeout,
            )
            .await?;
        Ok(resp.containers)
    }

    /// StopContainer with `grace` before SIGKILL. The call's deadline is the grace period plus
    /// the client timeout.
    pub async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), CriError> {
        let req = StopContainerRequest {
            container_id: id.to_string(),
            timeout: i64::try_from(grace.as_secs()).unwrap_or(i64::MAX),
        };
        let _: Empty = self
            .unary(
                "StopContainer",
                "/runtime.v1.RuntimeService/StopContainer",
                req,
                grace + self.timeout,
            )
            .await?;
        Ok(())
    }

    /// StopPodSandbox (the runtime kills whatever still runs in it).
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let req = StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        let _: Empty = self
            .unary(
                "StopPodSandbox",
                "/runtime.v1.RuntimeService/StopPodSandbox",
                req,
                self.timeout * 2,
            )
            .await?;
        Ok(())
    }

    /// ContainerStatus (not verbose).
    pub async fn container_status(&self, id: &str) -> Result<Option<ContainerStatus>, CriError> {
        let req = ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let resp: ContainerStatusResponse = self
            .unary(
                "ContainerStatus",
                "/runtime.v1.RuntimeService/ContainerStatus",
                req,
                self.timeout,
            )
            .await?;
        Ok(resp.status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The wire bytes match what protoc-generated code gives for the same values (field numbers
    /// and types as in cri-api's api.proto).
    #[test]
    fn wire_format_matches_the_cri_field_numbers() {
        let req = StopContainerRequest {
            container_id: "ab".into(),
            timeout: 30,
        };
        // field 1 (len-delimited) "ab", field 2 (varint) 30
        assert_eq!(req.encode_to_vec(), vec![0x0a, 2, b'a', b'b', 0x10, 30]);
        let req = ListContainersRequest {
            filter: Some(ContainerFilter {
                pod_sandbox_id: "p".into(),
                ..Default::default()
            }),
        };
        // field 1 (message) { field 3 (string) "p" }
        assert_eq!(req.encode_to_vec(), vec![0x0a, 3, 0x1a, 1, b'p']);
    }

    #[test]
    fn decoding_skips_fields_we_do_not_declare() {
        // Container { id=1 "c", image_ref=5 "x", state=6 RUNNING, created_at=7 5 }
        let bytes = [0x0a, 1, b'c', 0x2a, 1, b'x', 0x30, 1, 0x38, 5];
        let c = Container::decode(&bytes[..]).unwrap();
        assert_eq!(c.id, "c");
        assert_eq!(c.state(), ContainerState::Running);
    }

    #[tokio::test]
    async fn a_missing_socket_is_an_error_naming_it() {
        let client =
            CriClient::new(Path::new("/nonexistent/cri.sock"), Duration::from_secs(1)).unwrap();
        let err = client
            .list_pod_containers("x")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/cri.sock"), "{err}");
        assert!(err.contains("ListContainers"), "{err}");
    }
}
