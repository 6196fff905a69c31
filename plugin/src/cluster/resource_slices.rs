//! This node's DRA ResourceSlices (`resource.k8s.io/v1`, field selector `spec.nodeName=<node>`),
//! watched, and the NUMA node of each DRA device they publish: what the kubelet's PodResources
//! answer cannot say of a claim's device (it names it by driver, pool and device, with no
//! topology).
//!
//! One task owns the watch (kube's `watcher`: a list, then a watch resumed from the last
//! version, relisting on 410 Gone; kube's default back-off after an error). Each slice is read by
//! the core (`topolet_core::kube::resource_slice`: the attributes honoured, the bad input
//! refused) in the task, as it arrives, and the device index is rebuilt there; the NRI handlers
//! only read the index under a short read lock ([`ResourceSlices::locality`]), never wait for the
//! API server and never call it. Objects are taken untyped, so a slice the core cannot read costs
//! only that slice (logged, naming it), not the watch.
//!
//! What the attributes leave to the machine (a PCI address, a PCIe root) is read from sysfs when
//! a container's device is asked for ([`ResourceSlices::numa_of`], through
//! `crate::host::device_numa`).
//!
//! Read as the node when `[kubernetes] evict_as` resolves to it (the watch client,
//! `crate::cluster::client::watch_client`): the Node authorizer serves a node only the slices
//! whose `spec.nodeName` its field selector names (kubernetes `plugin/pkg/auth/authorizer/node`
//! `authorizeResourceSlice`), so topolet holds no slice right of its own
//! (`crate::cluster::permissions::AS_NODE`). [`ResourceSlices::status`] is `topolet status`'s line.
//!
//! Not watched: slices of no particular node (`allNodes`, `nodeSelector`; network-attached
//! devices, not local to this machine) and per-device node selection
//! (`spec.perDeviceNodeSelection`), which the field selector cannot pick out.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;

use crate::host::device_numa;
use topolet_core::kube::resource_slice::{self, DraDeviceKey, Indexed, Locality, Slice};
use topolet_core::machine::topology::node_list;
use topolet_core::report::status::ResourceSlicesStatus;

/// The same watch error is logged at most this often.
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct State {
    synced: bool,
    /// The watch's last failure, cleared when it lists again.
    last_error: Option<String>,
    slices: BTreeMap<String, Slice>,
    /// The list in progress (between `Init` and `InitDone`).
    relist: Option<BTreeMap<String, Slice>>,
    index: BTreeMap<DraDeviceKey, Indexed>,
}

/// The store, shared by the watch task and the NRI handlers.
#[derive(Debug, Clone)]
pub struct ResourceSlices {
    node: String,
    /// `node` or `self`: the identity of the watch client (`crate::cluster::client`).
    read_as: &'static str,
    state: Arc<RwLock<State>>,
}

/// What the store says of a DRA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceLookup {
    Found(Indexed),
    /// A synced store where no slice of this node lists it.
    NotPublished,
    /// The watch has not listed yet, or lost the API server since.
    NotSynced,
}

impl ResourceSlices {
    /// The store of `node`'s slices, read as the node (`as_node`) or as topolet itself.
    pub fn new(node: impl Into<String>, as_node: bool) -> ResourceSlices {
        ResourceSlices {
            node: node.into(),
            read_as: if as_node { "node" } else { "self" },
            state: Arc::default(),
        }
    }

    /// The device `key` in the index (a short read lock; never waits for the API).
    pub fn locality(&self, key: &DraDeviceKey) -> SliceLookup {
        let state = match self.state.read() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        match state.index.get(key) {
            Some(found) => SliceLookup::Found(found.clone()),
            None if state.synced => SliceLookup::NotPublished,
            None => SliceLookup::NotSynced,
        }
    }

    /// The NUMA node of the DRA device `id` (`<driver>/<pool>/<device>`, as
    /// `crate::kubelet::devices` records it) on a machine with NUMA `nodes`, sysfs under `sysfs`:
    /// `Ok(Some(node))`, `Ok(None)` for a device without locality, else why it is not known.
    pub fn numa_of(
        &self,
        id: &str,
        sysfs: &Path,
        nodes: &[usize],
    ) -> Result<Option<usize>, String> {
        let key = parse_id(id).ok_or_else(|| format!("{id:?} is not <driver>/<pool>/<device>"))?;
        let checked = |n: usize, what: String| {
            if nodes.contains(&n) {
                Ok(Some(n))
            } else {
                Err(format!(
                    "{what} says numa node {n}, not one of this machine's numa nodes ({})",
                    node_list(nodes)
                ))
            }
        };
        match self.locality(&key) {
            SliceLookup::NotSynced => Err(format!(
                "the watch of this node's ResourceSlices has not listed them (yet), so {key} is \
                 not placed (check the API server and topolet's RBAC: resourceslices list, watch, as the node or its own)"
            )),
            SliceLookup::NotPublished => Err(format!(
                "no ResourceSlice of node {} lists {key} (driver {}, pool {})",
                self.node, key.driver, key.pool
            )),
            SliceLookup::Found(Indexed { slice, locality }) => match locality {
                Locality::Numa { node, attribute } => {
                    checked(node, format!("ResourceSlice {slice}'s {attribute}"))
                }
                Locality::NoLocality { .. } => Ok(None),
                Locality::Several { .. } => Err(format!(
                    "ResourceSlice {slice} places it on {}: no single numa node",
                    resource_slice::describe(&locality)
                )),
                Locality::Unknown(why) => Err(why),
                Locality::Sysfs {
                    pci_bus_id,
                    pcie_root,
                } => {
                    let mut why = Vec::new();
                    if let Some(a) = &pci_bus_id {
                        match device_numa::pci_device_numa(sysfs, a) {
                            Ok(None) => return Ok(None),
                            Ok(Some(n)) => {
                                return checked(
                                    n,
                                    format!("pci device {a} (ResourceSlice {slice})"),
                                )
                            }
                            Err(e) => why.push(e),
                        }
                    }
                    if let Some(r) = &pcie_root {
                        match device_numa::pcie_root_numa(sysfs, r) {
                            Ok(None) => return Ok(None),
                            Ok(Some(n)) => {
                                return checked(n, format!("pcie root {r} (ResourceSlice {slice})"))
                            }
                            Err(e) => why.push(e),
                        }
                    }
                    Err(format!(
                        "ResourceSlice {slice}'s pci attributes do not resolve on this machine: {}",
                        why.join("; ")
                    ))
                }
            },
        }
    }

    /// (synced, slices, devices) for logs and status.
    pub fn counts(&self) -> (bool, usize, usize) {
        let s = match self.state.read() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        (s.synced, s.slices.len(), s.index.len())
    }

    /// The status line: the identity, whether the store follows the API server, what it holds,
    /// the last failure.
    pub fn status(&self) -> ResourceSlicesStatus {
        let s = match self.state.read() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        ResourceSlicesStatus {
            node: self.node.clone(),
            read_as: self.read_as.to_string(),
            state: if s.synced { "listed" } else { "not-listed" }.to_string(),
            slices: s.slices.len(),
            devices: s.index.len(),
            last_error: s.last_error.clone(),
        }
    }

    fn with_state(&self, f: impl FnOnce(&mut State)) {
        let mut s = match self.state.write() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut s);
    }

    /// A slice object (JSON), read by the core: `Some(slice)` when usable, logging what was not.
    fn read(&self, obj: &serde_json::Value) -> Option<Slice> {
        match resource_slice::parse_slice(obj, &self.node) {
            Ok(s) => {
                for e in &s.errors {
                    tracing::warn!(error = %e, "a ResourceSlice of this node is not usable as it is");
                }
                Some(s)
            }
            Err(e) => {
                tracing::warn!(error = %e, "a ResourceSlice is not usable; its devices get no numa node from it");
                None
            }
        }
    }

    /// Applies one watch event to the store (also what the tests drive).
    pub fn apply(&self, event: Event<serde_json::Value>) {
        let name = |o: &serde_json::Value| {
            o.pointer("/metadata/name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        match event {
            Event::Init => self.with_state(|s| s.relist = Some(BTreeMap::new())),
            Event::InitApply(o) => {
                let read = self.read(&o);
                self.with_state(|s| {
                    if let (Some(r), Some(slice)) = (s.relist.as_mut(), read) {
                        r.insert(slice.name.clone(), slice);
                    }
                });
            }
            Event::InitDone => self.with_state(|s| {
                if let Some(r) = s.relist.take() {
                    s.slices = r;
                }
                s.synced = true;
                s.last_error = None;
                reindex(s);
            }),
            Event::Apply(o) => {
                let key = name(&o);
                let read = self.read(&o);
                self.with_state(|s| {
                    match read {
                        Some(slice) => s.slices.insert(key, slice),
                        None => s.slices.remove(&key),
                    };
                    reindex(s);
                });
            }
            Event::Delete(o) => {
                let key = name(&o);
                self.with_state(|s| {
                    s.slices.remove(&key);
                    reindex(s);
                });
            }
        }
    }

    fn not_synced(&self, error: String) {
        self.with_state(|s| {
            s.synced = false;
            s.last_error = Some(error);
        });
    }

    async fn run(self, client: kube::Client, watch_timeout: Duration) {
        let api: Api<DynamicObject> =
            Api::all_with(client, &ApiResource::erase::<ResourceSlice>(&()));
        // Each watch request ends at the server after `[kubernetes] watch_timeout_s`, within
        // what the watch client reads (`crate::cluster::client::watch_client`).
        let timeout = u32::try_from(watch_timeout.as_secs())
            .unwrap_or(u32::MAX)
            .max(1);
        // Lists from the API server's watch cache (`resourceVersion=0`, as the pod watch's first
        // list: `crate::cluster::pod_directory::list_params`), not from etcd: a fleet restart is
        // one such list per node (hack/fleet.sh). Unpaged, as kube drops a `resourceVersion` of
        // "0" from a request with a `limit` (`kube-core` `ListParams::populate_qp`); a node has a
        // slice per driver and pool. A relist after 410 Gone may then be a little older than the
        // newest version; the watch continues from the version it carries, and the store is
        // replaced by each list whole, so it converges.
        let mut config = watcher::Config::default()
            .fields(&format!("spec.nodeName={}", self.node))
            .timeout(timeout)
            .any_semantic();
        config.page_size = None;
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        let mut last_logged: Option<(String, Instant)> = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    let json = |o: DynamicObject| serde_json::to_value(o).unwrap_or_default();
                    let event = match event {
                        Event::Init => Event::Init,
                        Event::InitApply(o) => Event::InitApply(json(o)),
                        Event::InitDone => Event::InitDone,
                        Event::Apply(o) => Event::Apply(json(o)),
                        Event::Delete(o) => Event::Delete(json(o)),
                    };
                    let done = matches!(event, Event::InitDone);
                    self.apply(event);
                    if done {
                        let (_, slices, devices) = self.counts();
                        tracing::info!(node = %self.node, slices, devices, "this node's DRA ResourceSlices listed");
                    }
                }
                Err(e) => {
                    let error = e.to_string();
                    self.not_synced(error.clone());
                    let due = match &last_logged {
                        Some((t, at)) => *t != error || at.elapsed() >= ERROR_LOG_INTERVAL,
                        None => true,
                    };
                    if due {
                        tracing::warn!(error = %error, node = %self.node, "the watch of this node's DRA ResourceSlices failed (check the API server and topolet's RBAC: resourceslices list, watch, as the node or its own); DRA devices get no numa node until it is back");
                        last_logged = Some((error, Instant::now()));
                    }
                }
            }
        }
    }
}

fn reindex(s: &mut State) {
    let (index, errors) = resource_slice::index(s.slices.values());
    for e in &errors {
        tracing::warn!(error = %e, "this node's ResourceSlices disagree");
    }
    s.index = index;
}

/// `<driver>/<pool>/<device>` → its parts: a driver name and a device name hold no slash, a
/// pool name may.
pub fn parse_id(id: &str) -> Option<DraDeviceKey> {
    let (driver, rest) = id.split_once('/')?;
    let (pool, device) = rest.rsplit_once('/')?;
    (!driver.is_empty() && !pool.is_empty() && !device.is_empty()).then(|| DraDeviceKey {
        driver: driver.into(),
        pool: pool.into(),
        device: device.into(),
    })
}

/// The store and the task watching `node`'s ResourceSlices, on the watch client
/// (`crate::cluster::client`), each watch request `watch_timeout` long.
pub fn start(
    client: kube::Client,
    node: String,
    as_node: bool,
    watch_timeout: Duration,
) -> (ResourceSlices, tokio::task::JoinHandle<()>) {
    tracing::info!(node = %node, as_node, "DRA devices' numa nodes from this node's ResourceSlices (watch)");
    let slices = ResourceSlices::new(node, as_node);
    let task = tokio::spawn(slices.clone().run(client, watch_timeout));
    (slices, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, node: &str, devices: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": name},
               "spec": {"driver": "gpu.example.com", "nodeName": node,
                        "pool": {"name": "pool/a", "generation": 1, "resourceSliceCount": 1},
                        "devices": devices}})
    }

    fn sysfs_with_pci(dir: &Path, address: &str, numa: &str) {
        let d = dir.join("bus/pci/devices").join(address);
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("numa_node"), numa).expect("write");
    }

    #[test]
    fn ids_split_with_a_pool_that_holds_slashes() {
        let k = parse_id("gpu.example.com/pool/a/gpu-0").expect("an id");
        assert_eq!(
            (k.driver.as_str(), k.pool.as_str(), k.device.as_str()),
            ("gpu.example.com", "pool/a", "gpu-0")
        );
        for bad in ["", "a", "a/b", "/p/d", "a//d", "a/p/"] {
            assert_eq!(parse_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_store_answers_from_the_watch_and_never_guesses() {
        let tmp = tempfile::tempdir().expect("tempdir");
        sysfs_with_pci(tmp.path(), "0000:3b:00.0", "1\n");
        let s = ResourceSlices::new("n", true);
        let id = "gpu.example.com/pool/a/gpu-0";
        let err = s.numa_of(id, tmp.path(), &[0, 1]).unwrap_err();
        assert!(err.contains("has not listed them"), "{err}");
        s.apply(Event::Init);
        s.apply(Event::InitApply(slice(
            "s1",
            "n",
            json!([
                {"name": "gpu-0", "attributes": {"resource.kubernetes.io/numaNode": {"int": 1}}},
                {"name": "gpu-1", "attributes": {"resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}}},
                {"name": "gpu-2", "attributes": {"resource.kubernetes.io/pciBusID": {"string": "0000:af:00.0"}}},
                {"name": "gpu-3", "attributes": {"dra.net/numaNode": {"int": 7}}},
                {"name": "gpu-4", "attributes": {"resource.kubernetes.io/numaNode": {"int": -1}}}
            ]),
        )));
        // Another node's slice (the field selector should keep it away) is not read.
        s.apply(Event::InitApply(slice(
            "s2",
            "other",
            json!([{"name": "gpu-9", "attributes": {"resource.kubernetes.io/numaNode": {"int": 0}}}]),
        )));
        s.apply(Event::InitDone);
        assert_eq!(s.counts(), (true, 1, 5));
        assert_eq!(s.numa_of(id, tmp.path(), &[0, 1]), Ok(Some(1)));
        assert_eq!(
            s.numa_of("gpu.example.com/pool/a/gpu-1", tmp.path(), &[0, 1]),
            Ok(Some(1))
        );
        let err = s
            .numa_of("gpu.example.com/pool/a/gpu-2", tmp.path(), &[0, 1])
            .unwrap_err();
        assert!(
            err.contains("ResourceSlice s1's pci attributes do not resolve")
                && err.contains("0000:af:00.0"),
            "{err}"
        );
        let err = s
            .numa_of("gpu.example.com/pool/a/gpu-3", tmp.path(), &[0, 1])
            .unwrap_err();
        assert!(
            err.contains(
                "dra.net/numaNode says numa node 7, not one of this machine's numa nodes (0,1)"
            ),
            "{err}"
        );
        assert_eq!(
            s.numa_of("gpu.example.com/pool/a/gpu-4", tmp.path(), &[0, 1]),
            Ok(None)
        );
        let err = s
            .numa_of("gpu.example.com/pool/a/gpu-9", tmp.path(), &[0, 1])
            .unwrap_err();
        assert!(
            err.contains("no ResourceSlice of node n lists gpu.example.com/pool/a/gpu-9"),
            "{err}"
        );
        // An update that breaks the slice drops its devices; a delete too.
        s.apply(Event::Apply(
            json!({"metadata": {"name": "s1"}, "spec": {"nodeName": "n"}}),
        ));
        assert_eq!(s.counts(), (true, 0, 0));
        s.apply(Event::Apply(slice("s1", "n", json!([{"name": "gpu-0", "attributes": {"resource.kubernetes.io/numaNode": {"int": 0}}}]))));
        assert_eq!(s.numa_of(id, tmp.path(), &[0, 1]), Ok(Some(0)));
        s.apply(Event::Delete(slice("s1", "n", json!([]))));
        assert!(s.numa_of(id, tmp.path(), &[0, 1]).is_err());
        let st = s.status();
        assert_eq!(
            (st.read_as.as_str(), st.state.as_str(), st.last_error),
            ("node", "listed", None)
        );
        s.not_synced("403 Forbidden".into());
        let err = s.numa_of(id, tmp.path(), &[0, 1]).unwrap_err();
        assert!(err.contains("has not listed them"), "{err}");
        let st = s.status();
        assert_eq!(st.state, "not-listed");
        assert_eq!(st.last_error.as_deref(), Some("403 Forbidden"));
        // The next list clears the error.
        s.apply(Event::Init);
        s.apply(Event::InitDone);
        let st = s.status();
        assert_eq!((st.state.as_str(), st.last_error), ("listed", None));
    }
}
