//! What topolet's tests share across crates (plugin tests, fuzz, integration). It depends on
//! the NRI wire types (`topolet-nri`) only, never on `topolet`: the plugin's tests can use it
//! without a cycle, and what it says about the kubelet is written apart from the plugin.
//!
//! - [`sysfs`]: the machine trees tests discover topologies from — the synthetic ones generated
//!   at build time by `hack/gen-sysfs-fixtures.py`, the captured ones committed under
//!   `plugin/tests/fixtures/sysfs`;
//! - [`kubelet`]: the kubelet simulator: pods and containers as their authors write them, turned
//!   into the CRI requests (crictl JSON) and NRI messages the kubelet's rules produce;
//! - [`cgroup_names`]: the kubelet's cgroup naming for both drivers, and its inverse: the
//!   oracle of the plugin's cgroup-path parsing.
//! - [`qos`]: the pod QoS classes both speak;
//! - [`nri_harness`]: a plugin behind the NRI stub, connected to the fake runtime;
//! - [`metrics_text`]: a strict reader of the Prometheus text format.

pub mod cgroup_names;
pub mod kubelet;
pub mod metrics_text;
pub mod nri_harness;
pub mod qos;
pub mod sysfs;
