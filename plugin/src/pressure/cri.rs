//! A minimal CRI client (`runtime.v1.RuntimeService` and `runtime.v1.ImageService`) over the
//! runtime's unix socket: what the eviction `cri` action, the per-pod disk usage and node-level
//! reclaim (dead containers and sandboxes, unused images: `crate::pressure::reclaim`) need,
//! nothing more.
//!
//! The messages are a hand-written subset of k8s.io/cri-api `pkg/apis/runtime/v1/api.proto`
//! (field numbers checked against cri-api v0.34): only the fields topolet reads or sets.
//! Protobuf 3 decoders skip unknown fields, so a newer runtime's larger messages decode fine and
//! fields we leave out are simply never sent. Writing the prost derives by hand avoids a
//! build-time protoc (and a build script) for a few messages. The image service's messages
//! (`Image`, `ListImages*`, `RemoveImageRequest`, `ImageSpec`, `ImageFsInfoResponse`,
//! `FilesystemUsage`) and the sandbox ones (`PodSandbox`, `ListPodSandbox*`,
//! `RemovePodSandboxRequest`) were checked against the same file.
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
    /// The image as the container was created with (a name or an id).
    #[prost(message, optional, tag = "4")]
    pub image: Option<ImageSpec>,
    /// "Digested reference to the image in use" (containerd: the image id).
    #[prost(string, tag = "5")]
    pub image_ref: String,
    #[prost(enumeration = "ContainerState", tag = "6")]
    pub state: i32,
    /// Nanoseconds since the epoch.
    #[prost(int64, tag = "7")]
    pub created_at: i64,
    /// The image's id on the node as the image service lists it (newer runtimes).
    #[prost(string, tag = "10")]
    pub image_id: String,
}

impl Container {
    /// Every reference to its image it carries (empty ones left out).
    pub fn image_refs(&self) -> Vec<String> {
        let spec = self.image.as_ref().map(|i| i.image.clone());
        [
            Some(self.image_ref.clone()),
            Some(self.image_id.clone()),
            spec,
        ]
        .into_iter()
        .flatten()
        .filter(|r| !r.is_empty())
        .collect()
    }
}

/// `runtime.v1.ImageSpec` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
}

/// `runtime.v1.ImageFilter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageFilter {
    #[prost(message, optional, tag = "1")]
    pub image: Option<ImageSpec>,
}

/// `runtime.v1.ListImagesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListImagesRequest {
    #[prost(message, optional, tag = "1")]
    pub filter: Option<ImageFilter>,
}

/// `runtime.v1.Image` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Image {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, repeated, tag = "2")]
    pub repo_tags: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    pub repo_digests: Vec<String>,
    /// Bytes; "must be > 0", so 0 means the runtime did not say.
    #[prost(uint64, tag = "4")]
    pub size: u64,
    /// The runtime recommends keeping it (containerd pins its sandbox image).
    #[prost(bool, tag = "8")]
    pub pinned: bool,
}

/// `runtime.v1.ListImagesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListImagesResponse {
    #[prost(message, repeated, tag = "1")]
    pub images: Vec<Image>,
}

/// `runtime.v1.RemoveImageRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoveImageRequest {
    #[prost(message, optional, tag = "1")]
    pub image: Option<ImageSpec>,
}

/// `runtime.v1.UInt64Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UInt64Value {
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// `runtime.v1.FilesystemIdentifier`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FilesystemIdentifier {
    #[prost(string, tag = "1")]
    pub mountpoint: String,
}

/// `runtime.v1.FilesystemUsage`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FilesystemUsage {
    #[prost(int64, tag = "1")]
    pub timestamp: i64,
    #[prost(message, optional, tag = "2")]
    pub fs_id: Option<FilesystemIdentifier>,
    /// Bytes the images use on it.
    #[prost(message, optional, tag = "3")]
    pub used_bytes: Option<UInt64Value>,
    #[prost(message, optional, tag = "4")]
    pub inodes_used: Option<UInt64Value>,
}

/// `runtime.v1.ImageFsInfoResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageFsInfoResponse {
    #[prost(message, repeated, tag = "1")]
    pub image_filesystems: Vec<FilesystemUsage>,
    #[prost(message, repeated, tag = "2")]
    pub container_filesystems: Vec<FilesystemUsage>,
}

/// `runtime.v1.RemoveContainerRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoveContainerRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// `runtime.v1.PodSandboxState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum PodSandboxState {
    SandboxReady = 0,
    SandboxNotready = 1,
}

/// `runtime.v1.PodSandboxMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

/// `runtime.v1.PodSandbox` (subset).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(enumeration = "PodSandboxState", tag = "3")]
    pub state: i32,
    /// Nanoseconds since the epoch.
    #[prost(int64, tag = "4")]
    pub created_at: i64,
}

/// `runtime.v1.ListPodSandboxRequest` (no filter: every sandbox).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxRequest {}

/// `runtime.v1.ListPodSandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

/// `runtime.v1.RemovePodSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemovePodSandboxRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
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

    /// ListContainers of every sandbox, every state.
    pub async fn list_containers(&self) -> Result<Vec<Container>, CriError> {
        let resp: ListContainersResponse = self
            .unary(
                "ListContainers",
                "/runtime.v1.RuntimeService/ListContainers",
                ListContainersRequest { filter: None },
                self.timeout,
            )
            .await?;
        Ok(resp.containers)
    }

    /// ListPodSandbox, every state.
    pub async fn list_pod_sandboxes(&self) -> Result<Vec<PodSandbox>, CriError> {
        let resp: ListPodSandboxResponse = self
            .unary(
                "ListPodSandbox",
                "/runtime.v1.RuntimeService/ListPodSandbox",
                ListPodSandboxRequest {},
                self.timeout,
            )
            .await?;
        Ok(resp.items)
    }

    /// RemoveContainer (idempotent in the runtime: an absent container is no error).
    pub async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let req = RemoveContainerRequest {
            container_id: id.to_string(),
        };
        let _: Empty = self
            .unary(
                "RemoveContainer",
                "/runtime.v1.RuntimeService/RemoveContainer",
                req,
                self.timeout,
            )
            .await?;
        Ok(())
    }

    /// RemovePodSandbox (idempotent in the runtime).
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let req = RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        let _: Empty = self
            .unary(
                "RemovePodSandbox",
                "/runtime.v1.RuntimeService/RemovePodSandbox",
                req,
                self.timeout * 2,
            )
            .await?;
        Ok(())
    }

    /// ListImages (no filter).
    pub async fn list_images(&self) -> Result<Vec<Image>, CriError> {
        let resp: ListImagesResponse = self
            .unary(
                "ListImages",
                "/runtime.v1.ImageService/ListImages",
                ListImagesRequest { filter: None },
                self.timeout,
            )
            .await?;
        Ok(resp.images)
    }

    /// RemoveImage by id (idempotent in the runtime: an absent image is no error).
    pub async fn remove_image(&self, id: &str) -> Result<(), CriError> {
        let req = RemoveImageRequest {
            image: Some(ImageSpec {
                image: id.to_string(),
            }),
        };
        let _: Empty = self
            .unary(
                "RemoveImage",
                "/runtime.v1.ImageService/RemoveImage",
                req,
                self.timeout,
            )
            .await?;
        Ok(())
    }

    /// ImageFsInfo: the image filesystems and the bytes images use on each.
    pub async fn image_fs_info(&self) -> Result<ImageFsInfoResponse, CriError> {
        self.unary(
            "ImageFsInfo",
            "/runtime.v1.ImageService/ImageFsInfo",
            Empty {},
            self.timeout,
        )
        .await
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

    /// An image list as a runtime may send it: one image without a size, one with fields this
    /// client does not declare (uid 5, username 6, spec 7, image_source 9), one empty.
    #[test]
    fn an_image_list_with_missing_sizes_and_unknown_fields_decodes() {
        let mut bytes = Vec::new();
        // images[0]: id "sha256:a", repo_tags "x:1" (no size).
        let a = [
            0x0a, 8, b's', b'h', b'a', b'2', b'5', b'6', b':', b'a', 0x12, 3, b'x', b':', b'1',
        ];
        bytes.extend([0x0a, a.len() as u8]);
        bytes.extend(a);
        // images[1]: id "b", size 300 (varint 0xac 0x02), uid {value 0}, username "u",
        // spec {image "b"}, pinned true, image_source "m", and an unknown field 99 (varint).
        let b = [
            0x0a, 1, b'b', 0x20, 0xac, 0x02, 0x2a, 2, 0x08, 0x00, 0x32, 1, b'u', 0x3a, 3, 0x0a, 1,
            b'b', 0x40, 1, 0x4a, 1, b'm', 0x98, 0x06, 7,
        ];
        bytes.extend([0x0a, b.len() as u8]);
        bytes.extend(b);
        // images[2]: empty.
        bytes.extend([0x0a, 0]);
        let resp = ListImagesResponse::decode(&bytes[..]).unwrap();
        assert_eq!(resp.images.len(), 3);
        assert_eq!(resp.images[0].id, "sha256:a");
        assert_eq!(resp.images[0].size, 0);
        assert_eq!(resp.images[1].size, 300);
        assert!(resp.images[1].pinned);
        assert_eq!(resp.images[2], Image::default());
        // Truncated input is an error, never a panic.
        assert!(ListImagesResponse::decode(&bytes[..bytes.len() - 5]).is_err());
    }

    #[test]
    fn image_service_requests_use_the_cri_field_numbers() {
        let req = RemoveImageRequest {
            image: Some(ImageSpec { image: "i".into() }),
        };
        // field 1 (message ImageSpec) { field 1 (string) "i" }
        assert_eq!(req.encode_to_vec(), vec![0x0a, 3, 0x0a, 1, b'i']);
        let req = RemovePodSandboxRequest {
            pod_sandbox_id: "s".into(),
        };
        assert_eq!(req.encode_to_vec(), vec![0x0a, 1, b's']);
        // PodSandbox { id 1 "s", metadata 2 { uid 2 "u" }, state 3 NOTREADY, created_at 4 9 }
        let bytes = [0x0a, 1, b's', 0x12, 3, 0x12, 1, b'u', 0x18, 1, 0x20, 9];
        let p = PodSandbox::decode(&bytes[..]).unwrap();
        assert_eq!(p.metadata.as_ref().unwrap().uid, "u");
        assert_eq!(p.state(), PodSandboxState::SandboxNotready);
        assert_eq!(p.created_at, 9);
        // Container { image 4 { image "n" }, image_ref 5 "r", created_at 7 3, image_id 10 "d" }
        let bytes = [
            0x22, 3, 0x0a, 1, b'n', 0x2a, 1, b'r', 0x38, 3, 0x52, 1, b'd',
        ];
        let c = Container::decode(&bytes[..]).unwrap();
        assert_eq!(c.image_refs(), ["r", "d", "n"]);
        assert_eq!(c.created_at, 3);
        // ImageFsInfoResponse { image_filesystems 1 { fs_id 2 { mountpoint "/m" }, used_bytes 3 { 5 } } }
        let bytes = [0x0a, 10, 0x12, 4, 0x0a, 2, b'/', b'm', 0x1a, 2, 0x08, 5];
        let r = ImageFsInfoResponse::decode(&bytes[..]).unwrap();
        assert_eq!(
            r.image_filesystems[0].fs_id.as_ref().unwrap().mountpoint,
            "/m"
        );
        assert_eq!(r.image_filesystems[0].used_bytes.as_ref().unwrap().value, 5);
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
