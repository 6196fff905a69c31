//! A CRI client (`runtime.v1.RuntimeService` and `runtime.v1.ImageService`) over the runtime's
//! unix socket: what the eviction `cri` action, the per-pod disk usage and node-level reclaim
//! (dead containers and sandboxes, unused images: `crate::pressure::reclaim`) need, nothing more.
//!
//! The messages and the two service clients are generated at build time from the upstream
//! `api.proto` of k8s.io/cri-api v0.37.2 (vendored in `plugin/proto/cri/`; protox and
//! tonic-prost-build, plugin/build.rs), not written by hand: [`api`].
//!
//! Transport: tonic's channel dialing `unix:<path>` (HTTP/2 over a unix stream, the way the
//! kubelet and crictl talk to the runtime). Each call has a deadline; errors name the endpoint
//! and the call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use api::image_service_client::ImageServiceClient;
use api::runtime_service_client::RuntimeServiceClient;
pub use api::{Container, ContainerState, ContainerStatus, Image, PodSandbox, PodSandboxState};

/// The CRI v1 messages and the `RuntimeService` and `ImageService` clients, as
/// tonic-prost-build generated them from k8s.io/cri-api v0.37.2's `api.proto`.
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    missing_docs,
    rustdoc::all
)]
pub mod api {
    include!(concat!(env!("OUT_DIR"), "/runtime.v1.rs"));
}

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

impl Container {
    /// Every reference to its image it carries (empty ones left out): `image_ref` ("digested
    /// reference to the image in use"; containerd: the image id), `image_id` (the image's id on
    /// the node as the image service lists it, newer runtimes) and the image it was created with.
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

    fn runtime(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel.clone())
    }

    fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel.clone())
    }

    /// `req` with its deadline.
    fn request<T>(req: T, timeout: Duration) -> tonic::Request<T> {
        let mut r = tonic::Request::new(req);
        r.set_timeout(timeout);
        r
    }

    /// The answer of `call`, or its error naming the endpoint and the call.
    async fn answer<T>(
        &self,
        call: &'static str,
        fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CriError> {
        fut.await
            .map(tonic::Response::into_inner)
            .map_err(|status| CriError::Call {
                endpoint: self.endpoint.clone(),
                call,
                status: Box::new(status),
            })
    }

    /// ListContainers of one pod sandbox (every state).
    pub async fn list_pod_containers(&self, sandbox_id: &str) -> Result<Vec<Container>, CriError> {
        let req = api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                pod_sandbox_id: sandbox_id.to_string(),
                ..Default::default()
            }),
        };
        let mut c = self.runtime();
        let resp = self
            .answer(
                "ListContainers",
                c.list_containers(Self::request(req, self.timeout)),
            )
            .await?;
        Ok(resp.containers)
    }

    /// StopContainer with `grace` before SIGKILL. The call's deadline is the grace period plus
    /// the client timeout.
    pub async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), CriError> {
        let req = api::StopContainerRequest {
            container_id: id.to_string(),
            timeout: i64::try_from(grace.as_secs()).unwrap_or(i64::MAX),
        };
        let mut c = self.runtime();
        self.answer(
            "StopContainer",
            c.stop_container(Self::request(req, grace + self.timeout)),
        )
        .await?;
        Ok(())
    }

    /// StopPodSandbox (the runtime kills whatever still runs in it).
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let req = api::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        let mut c = self.runtime();
        self.answer(
            "StopPodSandbox",
            c.stop_pod_sandbox(Self::request(req, self.timeout * 2)),
        )
        .await?;
        Ok(())
    }

    /// ContainerStatus (not verbose).
    pub async fn container_status(&self, id: &str) -> Result<Option<ContainerStatus>, CriError> {
        let req = api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let mut c = self.runtime();
        let resp = self
            .answer(
                "ContainerStatus",
                c.container_status(Self::request(req, self.timeout)),
            )
            .await?;
        Ok(resp.status)
    }

    /// ListContainers of every sandbox, every state.
    pub async fn list_containers(&self) -> Result<Vec<Container>, CriError> {
        let req = api::ListContainersRequest { filter: None };
        let mut c = self.runtime();
        let resp = self
            .answer(
                "ListContainers",
                c.list_containers(Self::request(req, self.timeout)),
            )
            .await?;
        Ok(resp.containers)
    }

    /// ListPodSandbox, every state.
    pub async fn list_pod_sandboxes(&self) -> Result<Vec<PodSandbox>, CriError> {
        let req = api::ListPodSandboxRequest { filter: None };
        let mut c = self.runtime();
        let resp = self
            .answer(
                "ListPodSandbox",
                c.list_pod_sandbox(Self::request(req, self.timeout)),
            )
            .await?;
        Ok(resp.items)
    }

    /// RemoveContainer (idempotent in the runtime: an absent container is no error).
    pub async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let req = api::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        let mut c = self.runtime();
        self.answer(
            "RemoveContainer",
            c.remove_container(Self::request(req, self.timeout)),
        )
        .await?;
        Ok(())
    }

    /// RemovePodSandbox (idempotent in the runtime).
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let req = api::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        let mut c = self.runtime();
        self.answer(
            "RemovePodSandbox",
            c.remove_pod_sandbox(Self::request(req, self.timeout * 2)),
        )
        .await?;
        Ok(())
    }

    /// ListImages (no filter).
    pub async fn list_images(&self) -> Result<Vec<Image>, CriError> {
        let req = api::ListImagesRequest { filter: None };
        let mut c = self.images();
        let resp = self
            .answer(
                "ListImages",
                c.list_images(Self::request(req, self.timeout)),
            )
            .await?;
        Ok(resp.images)
    }

    /// RemoveImage by id (idempotent in the runtime: an absent image is no error).
    pub async fn remove_image(&self, id: &str) -> Result<(), CriError> {
        let req = api::RemoveImageRequest {
            image: Some(api::ImageSpec {
                image: id.to_string(),
                ..Default::default()
            }),
        };
        let mut c = self.images();
        self.answer(
            "RemoveImage",
            c.remove_image(Self::request(req, self.timeout)),
        )
        .await?;
        Ok(())
    }

    /// ImageFsInfo: the image filesystems and the bytes images use on each.
    pub async fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, CriError> {
        let mut c = self.images();
        self.answer(
            "ImageFsInfo",
            c.image_fs_info(Self::request(api::ImageFsInfoRequest {}, self.timeout)),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::api::*;
    use super::*;
    use prost::Message;

    /// The generated messages' wire bytes: the field numbers and types of cri-api's api.proto
    /// (what containerd and CRI-O decode).
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
    fn decoding_skips_fields_no_version_declares() {
        // Container { id=1 "c", image_ref=5 "x", state=6 RUNNING, created_at=7 5, 99: varint }
        let bytes = [
            0x0a, 1, b'c', 0x2a, 1, b'x', 0x30, 1, 0x38, 5, 0x98, 0x06, 7,
        ];
        let c = Container::decode(&bytes[..]).unwrap();
        assert_eq!(c.id, "c");
        assert_eq!(c.state(), ContainerState::ContainerRunning);
    }

    /// An image list as a runtime may send it: one image without a size, one with more fields
    /// (uid 5, username 6, spec 7, pinned 8, image_source 9) and one no version declares, one
    /// empty.
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
            image: Some(ImageSpec {
                image: "i".into(),
                ..Default::default()
            }),
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
