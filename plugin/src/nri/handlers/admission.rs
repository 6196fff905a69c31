//! CreateContainer: admission of a new container. What admission works from (its pod's spec from
//! the pod watch, else the NRI inversion, and whether they agree), the placement's decision or
//! refusal, the record in the cache and the reply's adjustment and updates.

use topolet_nri::api;
use topolet_nri::plugin::{PluginError, PluginResult};

use super::k8s_events::LEFT_ALONE_REASON;
use super::{reclaimed, TopoletPlugin};
use crate::cluster::pod_directory::Lookup;
use crate::host::device_numa;
use crate::kubelet::devices as kubelet_devices;
use crate::nri::adjust;
use crate::nri::records::{Decided, Record};
use crate::nri::view::{self, ContainerView, DeviceNodes, NoView};
use topolet_core::kube::events::EventType;
use topolet_core::managers::observed_devices::{self, DeviceSource, ObservedDevice};
use topolet_core::placement::admission_input::{self, AdmissionInput, Fallback};

impl TopoletPlugin {
    /// What admission of `view` (in `sandbox`) works from: its pod's spec when the pod watch
    /// holds it (waiting, bounded, for an API pod a synced watch has not delivered yet), else
    /// the inversion, its reason counted. Takes no lock of the plugin.
    async fn admission_input(
        &self,
        sandbox: &api::PodSandbox,
        view: &ContainerView,
    ) -> AdmissionInput {
        let inversion = |why: Fallback| {
            self.metrics.admission_fallback(why.as_str());
            AdmissionInput::Inversion {
                estimate: view.estimate.clone(),
                why,
            }
        };
        let Some((dir, wait)) = self.pods.get() else {
            return inversion(Fallback::ApiOff);
        };
        let uid = &view.key.pod_uid;
        // A static pod is in the API only as its mirror, once the kubelet made one: not waited for.
        let from_api = sandbox
            .annotations
            .get(topolet_core::kube::pod::CONFIG_SOURCE_ANNOTATION)
            .is_none_or(|s| s == "api");
        let lookup = if from_api {
            dir.get_or_wait(uid, *wait).await
        } else {
            dir.get(uid)
        };
        match lookup {
            Lookup::Found(pod) => {
                match admission_input::find_container(&pod, &view.key.container) {
                    Some(which) => AdmissionInput::Api {
                        pod: (*pod).clone(),
                        which,
                    },
                    None => inversion(Fallback::NoSuchContainer),
                }
            }
            Lookup::Invalid(e) => {
                tracing::warn!(pod = %view.pod_ref, error = %e, "the pod's spec from the API cannot be read; the inversion decides");
                inversion(Fallback::InvalidSpec)
            }
            Lookup::NotSynced => inversion(Fallback::NotSynced),
            Lookup::NotFound if !from_api => inversion(Fallback::StaticPod),
            Lookup::NotFound => inversion(Fallback::NotFound),
        }
    }

    /// The devices `ctr` was given (its device set, `observed_devices::device_set`): its device
    /// nodes resolved through sysfs to the NUMA nodes of the PCI devices behind them
    /// (`crate::host::device_numa`), merged with its entries in the kubelet's PodResources
    /// answer for `pod` (`crate::kubelet`: device-plugin devices with their NUMA nodes, DRA
    /// devices placed through this node's ResourceSlices: `place_dra_device`), each device with
    /// its source. A device that cannot be resolved is
    /// logged and gives no hint; the kubelet's lookup is bounded (`[kubelet]
    /// pod_resources_wait_ms`) and, when it fails, leaves the device nodes alone. Never refuses
    /// the container. Called before the plugin's lock.
    async fn given_devices(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
        view: &ContainerView,
    ) -> Vec<ObservedDevice> {
        let numa: Vec<usize> = self.topology.numa_ids().collect();
        let mut all = match view::device_nodes(ctr) {
            DeviceNodes::Listed(nodes) if nodes.is_empty() => Vec::new(),
            DeviceNodes::Listed(nodes) => {
                let resolved = device_numa::resolve(&self.sysfs_root, &nodes, &numa);
                for e in &resolved.errors {
                    tracing::warn!(pod = %view.pod_ref, container = %ctr.name, error = %e, "the numa node of a device node is unknown; that device gives no hint");
                }
                resolved.devices
            }
            DeviceNodes::Every => {
                tracing::debug!(pod = %view.pod_ref, container = %ctr.name, "the container may use every device (privileged): its device nodes give no numa hints");
                Vec::new()
            }
        };
        if let Some(source) = self.pod_resources.get() {
            if let Some(answer) = source.pod(&pod.namespace, &pod.name).await {
                let mut got = kubelet_devices::container_devices(&answer, &ctr.name, &numa);
                for e in &got.errors {
                    tracing::warn!(error = %e, "a PodResources entry is not usable as it is");
                }
                for d in got
                    .devices
                    .iter_mut()
                    .filter(|d| d.source == DeviceSource::Dra)
                {
                    self.place_dra_device(d, view, &ctr.name, &numa);
                }
                all.extend(got.devices);
            }
        }
        observed_devices::device_set(all)
    }

    /// Gives the DRA device `d` its NUMA node from this node's ResourceSlices
    /// (`crate::cluster::resource_slices`: a read of the watch's index, and sysfs for a PCI
    /// address or root), or says why it is unknown: no guess, no wait, never a refusal.
    fn place_dra_device(
        &self,
        d: &mut ObservedDevice,
        view: &ContainerView,
        container: &str,
        numa: &[usize],
    ) {
        let Some(slices) = self.resource_slices.get() else {
            d.numa_unknown = Some(
                "PodResources gives DRA devices no topology, and the ResourceSlices watch is off (no API client)"
                    .into(),
            );
            return;
        };
        match slices.numa_of(&d.id, &self.sysfs_root, numa) {
            Ok(n) => {
                d.numa = n;
                d.numa_unknown = None;
            }
            Err(why) => {
                tracing::warn!(pod = %view.pod_ref, container = %container, device = %d.id, reason = %why, "the numa node of a DRA device is unknown; that device gives no hint");
                d.numa = None;
                d.numa_unknown = Some(why);
            }
        }
    }

    /// CreateContainer: admits the container, or refuses it naming the reason; the reply carries
    /// its adjustment and the queued updates of the others.
    pub(super) async fn on_create_container(
        &self,
        req: &api::CreateContainerRequest,
    ) -> PluginResult<api::CreateContainerResponse> {
        let (Some(pod), Some(ctr)) = (req.pod.as_ref(), req.container.as_ref()) else {
            return Err(PluginError::Failed(
                "CreateContainer without pod or container".into(),
            ));
        };
        let view = match view::view(pod, ctr, self.memory_capacity()) {
            Ok(v) => v,
            Err(NoView::Ignored(why)) => {
                tracing::debug!(container = %ctr.name, reason = %why, "not managed");
                return Ok(api::CreateContainerResponse::default());
            }
            Err(NoView::Bad(e)) => {
                let msg = format!("topolet: pod {}/{}: {e}", pod.namespace, pod.name);
                tracing::error!(error = %msg, "container refused");
                return Err(PluginError::Failed(msg));
            }
        };
        if let Some(cpus) = &view.current.cpuset_cpus {
            // Another cpuset owner: the kubelet's static CPU manager (through the CRI), or an NRI
            // plugin with a lower index, which the runtime called first and whose adjustment it
            // wrote into this request (dra-driver-cpu sets every container's cpuset at index
            // 00). Setting the field again would make containerd fail the container ("plugins
            // … both tried to set"); topolet sets nothing and keeps none of its CPUs in books.
            tracing::warn!(pod = %view.pod_ref, container = %ctr.name, cpus = %cpus, "cpuset already set by the kubelet's cpu manager or an earlier NRI plugin; topolet leaves this container alone");
            let mut node = self.event_lock();
            if node.records.left_alone_mut().insert(view.key.clone()) {
                self.persist(&node);
                drop(node);
                self.pod_event(
                    &view,
                    EventType::Normal,
                    LEFT_ALONE_REASON,
                    &format!(
                        "container {}: cpuset {cpus} was set before topolet saw it (the kubelet's static CPU manager, or an NRI plugin with a lower index than topolet's); topolet leaves its CPUs, memory nodes and cgroup values to that owner",
                        ctr.name
                    ),
                );
            }
            return Ok(api::CreateContainerResponse::default());
        }
        // Before the lock, side by side: each may wait (bounded) for the pod watch or the
        // kubelet's PodResources answer; the devices also read sysfs.
        let (devices, input) = tokio::join!(
            self.given_devices(pod, ctr, &view),
            self.admission_input(pod, &view)
        );
        let source = input.source();
        self.metrics.admission_source("create", source.as_str());
        let comparison = match &input {
            AdmissionInput::Api { pod, which } => {
                let c =
                    admission_input::compare(pod, *which, &view.estimate, self.memory_capacity());
                if !c.agrees() {
                    self.metrics.admission_disagreement();
                    tracing::warn!(pod = %view.pod_ref, container = %ctr.name, differences = ?c.differences, "the inversion of this container disagrees with its pod's spec; the spec decides");
                }
                Some(c)
            }
            AdmissionInput::Inversion { .. } => None,
        };
        let decided = Decided {
            source,
            fallback: input.fallback(),
            comparison,
        };
        let reclaimed = self.config.get().reclaimed.clone();
        let mut node = self.event_lock();
        if let AdmissionInput::Api { pod, which } = &input {
            if reclaimed.enabled {
                if let Some(msg) =
                    reclaimed::held_refusal(&node, pod, *which, &reclaimed.resource_name)
                {
                    tracing::warn!(pod = %view.pod_ref, container = %ctr.name, error = %msg, "container refused");
                    return Err(PluginError::Failed(msg));
                }
            }
        }
        let floor = node.oom_floor.unwrap_or(0);
        let mut decision =
            match node
                .placement
                .admit_with_devices(input.candidate(), &devices, floor)
            {
                Ok(d) => d,
                Err(refusal) => {
                    return Err(self.refused(&mut node, "create", source, &view, &refusal));
                }
            };
        let batch = match &input {
            AdmissionInput::Api { pod, which } if reclaimed.enabled && !decision.exclusive => {
                reclaimed::admit_batch(
                    &mut node,
                    &ctr.id,
                    pod,
                    *which,
                    &reclaimed.resource_name,
                    reclaimed.sched_idle,
                    &mut decision,
                )
            }
            _ => false,
        };
        node.refusals.clear("create", &view.key);
        let (adjust, conflicts) = adjust::adjustment(&view, &decision);
        for conflict in conflicts {
            tracing::warn!(pod = %view.pod_ref, container = %ctr.name, conflict = %conflict, "field already set by the kubelet or an earlier NRI plugin; left as is");
        }
        tracing::info!(
            pod = %view.pod_ref,
            container = %ctr.name,
            qos = %view.qos,
            exclusive = decision.exclusive,
            cpus = %decision.cpuset,
            mems = %decision.mems,
            reason = %decision.reason,
            source = source.as_str(),
            fallback = decided.fallback.map(Fallback::as_str).unwrap_or("none"),
            oom_score_adj = decision.oom_score_adj,
            batch,
            cpu_quota = decision.cpu_quota,
            devices = ?decision.observed_devices.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "container placed"
        );
        let exclusive = decision.exclusive;
        self.metrics.admitted(view.qos.as_str(), exclusive);
        if exclusive {
            self.grant_event(&view, &decision, false);
        }
        // Every assignment is persisted, not only exclusive CPUs: a shared container's pinned
        // memory, devices and NUMA affinity are books the memory manager and the device
        // hints must find again after a restart.
        let holds = exclusive
            || decision.memory_pinned
            || decision.numa_affinity.is_some()
            || !decision.devices.is_empty()
            || !decision.observed_devices.is_empty();
        let uid = view.key.pod_uid.clone();
        node.records
            .insert(&ctr.id, Record::created(view, decided, decision));
        if holds {
            self.persist(&node);
        }
        if exclusive {
            self.unlimit_pod(&node, &uid);
            self.push_shared_pool(&mut node, Some(&ctr.id));
        }
        let update = self.reply_updates(&mut node, &ctr.id);
        Ok(api::CreateContainerResponse {
            adjust: protobuf::MessageField::some(adjust),
            update,
            ..Default::default()
        })
    }
}
