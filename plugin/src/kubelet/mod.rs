//! The kubelet, as a party topolet talks to on the node: its PodResources API (the devices the
//! kubelet's device manager and DRA gave each container, with the NUMA topology device plugins
//! report).
//!
//! - [`api`]: the PodResources v1 gRPC types and client, generated at build time from the
//!   upstream `.proto` (plugin/proto/podresources/v1/api.proto, k8s.io/kubelet v0.37.2) by protox
//!   and tonic-prost-build (plugin/build.rs).
//! - [`devices`]: a container's entries of a PodResources answer → its observed devices (pure;
//!   bad entries are errors naming the pod, container and device).
//! - [`pod_resources`]: the client over the kubelet's unix socket: `List` at Synchronize, `Get`
//!   for a pod at CreateContainer within a bounded wait, a pause after a failure instead of a
//!   retry per event, and the source's status line and metrics.
//! - [`inventory`]: the kubelet's device-plugin devices per NUMA node (allocatable, held), for
//!   the NodeResourceTopology.
//! - [`reexport`]: topolet's own PodResources socket (`[kubelet] pod_resources_export_socket`):
//!   the kubelet's answers with topolet's exclusive CPUs and pinned memory filled in, for the
//!   consumers that read PodResources.

/// The PodResources v1 messages and the `PodResourcesLister` client and server (the server for
/// the re-export and the tests' fake kubelet), as tonic-prost-build generated them.
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    missing_docs,
    rustdoc::all
)]
pub mod api {
    include!(concat!(env!("OUT_DIR"), "/v1.rs"));
}
pub mod devices;
pub mod inventory;
pub mod pod_resources;
pub mod reexport;
