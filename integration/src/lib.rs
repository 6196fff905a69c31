//! Harness for topolet's end-to-end tests against a real containerd (or CRI-O) + runc on real
//! cgroups.
//!
//! One concept per module:
//! - [`cluster`]: a real single-node Kubernetes (`hack/kube-node.sh`) driving a stack, and the
//!   API as users reach it (kube-rs): pods created, resized, deleted, their containers observed;
//! - [`guest`]: the in-guest side of the real-kernel suite (QEMU guests of `hack/guest.sh`):
//!   the guest's sysfs facts, cgroup v2 paths for either driver, `topolet plan` on its sysfs;
//! - [`admissions`]: which source (pod spec from the API, or the NRI inversion) decided each
//!   container, from topolet's status and metrics;
//! - [`fixture`]: the usual set-up, a stack with topolet registered on it;
//! - [`freeze`]: a container's shim stopped for a while (a runtime that applies no update);
//! - [`stack`]: an isolated containerd started with `hack/containerd.sh`, or CRI-O with
//!   `hack/crio.sh` when `TOPOLET_RUNTIME=cri-o` (start, restart, stop on drop; named skips on
//!   CRI-O);
//! - [`topolet`]: the plugin process under test (config, spawn, log lines, SIGKILL, restart);
//! - [`kube`]: pod and container configs shaped exactly like the kubelet sends them per QoS class
//!   (the test kit's kubelet simulator, `topolet_testkit::kubelet`);
//! - [`cri`]: CRI calls through `crictl` (JSON in, JSON out);
//! - [`observe`]: what really happened to a container: its cgroup files, its `/proc` files and its
//!   bundle `config.json` (read with oci-spec);
//! - [`manifests`]: the kubelet suites' pod manifests (JSON);
//! - [`pressure`]: the node's eviction signals as topolet computes them, and the pods' pressure
//!   scripts;
//! - [`probe`]: the benchmark probe of `hack/bench/colocation` run in kubelet pods, and the
//!   benches' figure lines;
//! - [`logs`]: log files: find and wait for lines, read `key=value` fields;
//! - [`runtime_internal`]: containerd's own failures after a fault (a closed list of error texts,
//!   no NRI call involved) told apart from topolet's, and the pod made again under a new name;
//! - [`wait`]: polling with timeouts (no fixed sleeps where a condition can be polled).
//!
//! The suite fails, never skips, when the stack cannot be started: every helper returns an error
//! with context naming the command or path, and tests propagate it.

pub mod admissions;
pub mod books;
pub mod churn;
pub mod cluster;
pub mod colocation_goals;
pub mod cri;
pub mod device_plugin;
pub mod dra_driver;
pub mod fixture;
pub mod freeze;
pub mod go;
pub mod guest;
pub mod helm;
pub use topolet_testkit::kubelet as kube;
pub mod logs;
pub mod manifests;
pub mod observe;
pub mod paths;
pub mod pod_resources_client;
pub mod pressure;
pub mod probe;
pub mod runtime_internal;
pub mod stack;
pub mod topolet;
pub mod wait;

pub use cri::Cri;
pub use fixture::WithTopolet;
pub use kube::{ContainerSpec, PodSpec, Qos};
pub use logs::field;
pub use stack::Stack;
pub use topolet::{Topolet, TopoletConfig};
