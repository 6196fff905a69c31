//! The metrics catalogue: every family topolet exposes, with its type, labels and help, in one
//! table. [`crate::telemetry::metrics`] writes each family's `# HELP` and `# TYPE` lines from it,
//! and the generated reference (`docs/src/reference/metrics.md`) lists it; a unit test checks that
//! a scrape shows exactly these families, with these labels.

use crate::telemetry::exposition::{Family, Kind};

pub const ADMISSION_DECISIONS_TOTAL: Family = Family {
    name: "topolet_admission_decisions_total",
    kind: Kind::Counter,
    labels: &["operation", "source"],
    help: "Admissions by operation and by the source of the pod's facts: api (the pod watch's spec) or inversion (cgroup values).",
};
pub const ADMISSION_FALLBACKS_TOTAL: Family = Family {
    name: "topolet_admission_fallbacks_total",
    kind: Kind::Counter,
    labels: &["reason"],
    help: "Admissions decided by the inversion instead of the API, by reason (api_off, not_synced, static_pod, not_found, no_such_container, invalid_spec).",
};
pub const ADMISSION_SOURCE_DISAGREEMENTS_TOTAL: Family = Family {
    name: "topolet_admission_source_disagreements_total",
    kind: Kind::Counter,
    labels: &[],
    help: "API-decided containers whose inversion disagreed on a fact both sources know (class, exclusive cpus, cpu request or limit, memory limit or request).",
};
pub const ADMISSIONS_TOTAL: Family = Family {
    name: "topolet_admissions_total",
    kind: Kind::Counter,
    labels: &["qos", "cpus"],
    help: "Containers admitted, by QoS class and by whether they got exclusive CPUs.",
};
pub const BUILD_INFO: Family = Family {
    name: "topolet_build_info",
    kind: Kind::Gauge,
    labels: &["version"],
    help: "topolet's version (always 1).",
};
pub const CONFIG_RELOADS_TOTAL: Family = Family {
    name: "topolet_config_reloads_total",
    kind: Kind::Counter,
    labels: &["trigger", "result"],
    help: "Configuration reloads by trigger (sighup, file_change) and result: applied, unchanged (valid, nothing to change), rejected (unreadable, does not parse or does not fit the machine), refused (would break a running container).",
};
pub const DRIFT_CHECKS_TOTAL: Family = Family {
    name: "topolet_drift_checks_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Running containers the drift check compared with what their process may use (/proc/<pid>/status), in lulls.",
};
pub const DRIFT_REPAIRS_TOTAL: Family = Family {
    name: "topolet_drift_repairs_total",
    kind: Kind::Counter,
    labels: &["field"],
    help: "Containers found off their target (cpus: may run outside their cpuset; mems: other memory nodes) and sent their target again.",
};
pub const EVICTION_ATTEMPTS_TOTAL: Family = Family {
    name: "topolet_eviction_attempts_total",
    kind: Kind::Counter,
    labels: &["action", "result"],
    help: "Eviction attempts by action (dry-run, cri, api) and result: evicted, already_gone, pdb_refused (a PodDisruptionBudget allows no disruption; the next candidate is tried), error.",
};
pub const EVICTION_SIGNAL_VALUE: Family = Family {
    name: "topolet_eviction_signal_value",
    kind: Kind::Gauge,
    labels: &["signal"],
    help: "Last observed eviction signal value (bytes for memory and filesystem space, a count for inodes and PIDs).",
};
pub const EVICTION_THRESHOLD: Family = Family {
    name: "topolet_eviction_threshold",
    kind: Kind::Gauge,
    labels: &["signal", "kind"],
    help: "Eviction threshold per signal and kind (hard, soft), in the signal's unit.",
};
pub const EVICTIONS_TOTAL: Family = Family {
    name: "topolet_evictions_total",
    kind: Kind::Counter,
    labels: &["signal"],
    help: "Pods evicted by the eviction loop, by signal.",
};
pub const EXCLUSIVE_BREACH_CONTAINERS: Family = Family {
    name: "topolet_exclusive_breach_containers",
    kind: Kind::Gauge,
    labels: &[],
    help: "Live containers whose cpuset, as the runtime last applied it, overlaps CPUs another container holds exclusively.",
};
pub const EXCLUSIVE_BREACH_SECONDS_TOTAL: Family = Family {
    name: "topolet_exclusive_breach_seconds_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Seconds containers ran, or could have run, on CPUs another container holds exclusively: a runtime that had not applied their new cpuset yet (summed over containers).",
};
pub const EXCLUSIVE_CPUS: Family = Family {
    name: "topolet_exclusive_cpus",
    kind: Kind::Gauge,
    labels: &["numa_node"],
    help: "CPUs held exclusively by containers, per NUMA node.",
};
pub const FREE_EXCLUSIVE_CPUS: Family = Family {
    name: "topolet_free_exclusive_cpus",
    kind: Kind::Gauge,
    labels: &["numa_node"],
    help: "CPUs still free for exclusive allocation, per NUMA node.",
};
pub const HTTP_CONNECTIONS_TOTAL: Family = Family {
    name: "topolet_http_connections_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Connections to the metrics and health endpoint, by result: served; busy and peer_limit (answered 503 at once: the endpoint, or that client address, had its maximum of connections open); timeout (the request head or the answer took too long); error.",
};
pub const KUBE_API_ERRORS_TOTAL: Family = Family {
    name: "topolet_kube_api_errors_total",
    kind: Kind::Counter,
    labels: &["operation", "code"],
    help: "Failed Kubernetes API requests, by operation and HTTP code (connection: no answer).",
};
pub const KUBE_CLIENT_ENABLED: Family = Family {
    name: "topolet_kube_client_enabled",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 when topolet's Kubernetes API client is on ([kubernetes]).",
};
pub const KUBE_EVENTS_TOTAL: Family = Family {
    name: "topolet_kube_events_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Event occurrences (refusals, exclusive grants) by outcome: created, patched (a repeat counted into its Event), rate_limited (per-pod spam filter), dropped_queue_full, failed (given up after API errors).",
};
pub const KUBE_POD_STORE_PODS: Family = Family {
    name: "topolet_kube_pod_store_pods",
    kind: Kind::Gauge,
    labels: &[],
    help: "Pods of this node in the pod watch's store.",
};
pub const KUBE_POD_STORE_SYNCED: Family = Family {
    name: "topolet_kube_pod_store_synced",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 while the pod watch's store is synced (listed, and no error since).",
};
pub const KUBE_POD_WAITS_TOTAL: Family = Family {
    name: "topolet_kube_pod_waits_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Bounded waits of CreateContainer for a pod the watch had not delivered yet, by result (found, timeout).",
};
pub const KUBE_POD_WATCH_ERRORS_TOTAL: Family = Family {
    name: "topolet_kube_pod_watch_errors_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Errors of the watch of this node's pods (each followed by a back-off and a new watch from the last resourceVersion).",
};
pub const KUBE_POD_WATCH_RELISTS_TOTAL: Family = Family {
    name: "topolet_kube_pod_watch_relists_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Lists of the pod watch after the first, because the server no longer had its resourceVersion (410 Gone).",
};
pub const KUBE_POD_WATCH_REQUESTS_TOTAL: Family = Family {
    name: "topolet_kube_pod_watch_requests_total",
    kind: Kind::Counter,
    labels: &["verb"],
    help: "Requests of the pod watch to the API server, by verb (list, watch).",
};
pub const KUBE_POD_WATCH_RESTARTS_TOTAL: Family = Family {
    name: "topolet_kube_pod_watch_restarts_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Restarts of the pod watch after an error (a new watch from the last resourceVersion, or a list if it has none).",
};
pub const LEFT_ALONE_CONTAINERS: Family = Family {
    name: "topolet_left_alone_containers",
    kind: Kind::Gauge,
    labels: &[],
    help: "Containers whose cpuset was set before topolet saw them (the kubelet's static CPU manager, or an NRI plugin with a lower index such as dra-driver-cpu): topolet leaves their CPUs, memory nodes and cgroup values to that owner.",
};
pub const MANAGED_CONTAINERS: Family = Family {
    name: "topolet_managed_containers",
    kind: Kind::Gauge,
    labels: &[],
    help: "Containers topolet manages.",
};
pub const NODE_CONDITION: Family = Family {
    name: "topolet_node_condition",
    kind: Kind::Gauge,
    labels: &["condition"],
    help: "1 while a node pressure condition is set (MemoryPressure, DiskPressure, PIDPressure).",
};
pub const NODE_RECLAIM_CONTAINERS_TOTAL: Family = Family {
    name: "topolet_node_reclaim_containers_total",
    kind: Kind::Counter,
    labels: &["signal"],
    help: "Dead containers removed by node-level reclaim, by signal.",
};
pub const NODE_RECLAIM_IMAGE_BYTES_TOTAL: Family = Family {
    name: "topolet_node_reclaim_image_bytes_total",
    kind: Kind::Counter,
    labels: &["signal"],
    help: "Bytes of the unused images node-level reclaim removed (their sizes as the runtime lists them), by signal.",
};
pub const NODE_RECLAIM_IMAGES_TOTAL: Family = Family {
    name: "topolet_node_reclaim_images_total",
    kind: Kind::Counter,
    labels: &["signal"],
    help: "Unused images removed by node-level reclaim, by signal.",
};
pub const NODE_RECLAIM_OBSERVED_BYTES_TOTAL: Family = Family {
    name: "topolet_node_reclaim_observed_bytes_total",
    kind: Kind::Counter,
    labels: &["signal"],
    help: "Growth of the signal's available bytes from before node-level reclaim to the observation after it, by signal.",
};
pub const NODE_RECLAIM_SANDBOXES_TOTAL: Family = Family {
    name: "topolet_node_reclaim_sandboxes_total",
    kind: Kind::Counter,
    labels: &["signal"],
    help: "Dead pod sandboxes removed by node-level reclaim, by signal.",
};
pub const NODE_RECLAIM_TOTAL: Family = Family {
    name: "topolet_node_reclaim_total",
    kind: Kind::Counter,
    labels: &["signal", "result"],
    help: "Node-level reclaims (dead containers, unused images) before evicting for a disk signal, by signal and result: relieved (no pod evicted), deferred (dead containers removed, their space freed by the runtime asynchronously: no pod evicted this interval), not_enough (a pod is evicted after it), dry_run (nothing removed).",
};
pub const NODE_STATUS_PATCHES_TOTAL: Family = Family {
    name: "topolet_node_status_patches_total",
    kind: Kind::Counter,
    labels: &["target", "result"],
    help: "Patches of this Node by topolet: target conditions (TopoletMemoryPressure, ... on nodes/status) or taints, result ok or error.",
};
pub const NRI_CONNECTS_TOTAL: Family = Family {
    name: "topolet_nri_connects_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Successful registrations with the runtime.",
};
pub const NRI_EVENT_DURATION_SECONDS: Family = Family {
    name: "topolet_nri_event_duration_seconds",
    kind: Kind::Histogram,
    labels: &["event"],
    help: "Time topolet took to handle one NRI event, lock wait included.",
};
pub const NRI_RECONNECTS_TOTAL: Family = Family {
    name: "topolet_nri_reconnects_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Successful registrations after the first.",
};
pub const NRI_SYNCHRONIZED: Family = Family {
    name: "topolet_nri_synchronized",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 when the NRI connection is synchronized and events flow.",
};
pub const NRT_WRITES_TOTAL: Family = Family {
    name: "topolet_nrt_writes_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Writes of this node's NodeResourceTopology object, by result: created, updated.",
};
pub const POD_CGROUP_WRITES_TOTAL: Family = Family {
    name: "topolet_pod_cgroup_writes_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Writes of pod cgroups' CPU quota and shares (exclusive pods, refused resizes), by result (ok, error).",
};
pub const POD_RESOURCES_CALLS_TOTAL: Family = Family {
    name: "topolet_pod_resources_calls_total",
    kind: Kind::Counter,
    labels: &["call", "result"],
    help: "Calls to the kubelet's PodResources API (a device source; the NodeResourceTopology's device counts) by call (get, list, allocatable) and result: ok, absent (no socket), timeout (no answer within pod_resources_wait_ms), error, skipped (the source is paused after a failure; the container got its device nodes only).",
};
pub const POD_RESOURCES_SERVED_TOTAL: Family = Family {
    name: "topolet_pod_resources_served_total",
    kind: Kind::Counter,
    labels: &["call", "result"],
    help: "Calls served by topolet's PodResources re-export ([kubelet] pod_resources_export_socket) by call (list, get, allocatable) and result: ok, kubelet_error (the kubelet's error passed on), kubelet_unavailable (no answer from the kubelet's socket), busy (refused: too many calls at once).",
};
pub const POD_PRESSURE_STALL_SECONDS_TOTAL: Family = Family {
    name: "topolet_pod_pressure_stall_seconds_total",
    kind: Kind::Counter,
    labels: &["pod_uid", "resource", "kind"],
    help: "A managed pod cgroup's pressure stall time (cgroup v2 *.pressure) by pod uid, resource and kind.",
};
pub const PRESSURE_STALL_AVG10_RATIO: Family = Family {
    name: "topolet_pressure_stall_avg10_ratio",
    kind: Kind::Gauge,
    labels: &["resource", "kind"],
    help: "The node's share of the last 10 s stalled (PSI avg10 / 100), by resource and kind.",
};
pub const PRESSURE_STALL_SECONDS_TOTAL: Family = Family {
    name: "topolet_pressure_stall_seconds_total",
    kind: Kind::Counter,
    labels: &["resource", "kind"],
    help: "The node's pressure stall time (PSI, /proc/pressure) by resource (cpu, memory, io) and kind (some: a task stalled, full: all stalled); informational, no eviction acts on it.",
};
pub const RECLAIMED_CPU_ADVERTISED_MILLICPU: Family = Family {
    name: "topolet_reclaimed_cpu_advertised_millicpu",
    kind: Kind::Gauge,
    labels: &["zone"],
    help: "Reclaimed CPU offered to batch pods, as last handed to the Node (zone=node) and the NodeResourceTopology (zone=NUMA node id).",
};
pub const RECLAIMED_CPU_BATCH_USED_MILLICPU: Family = Family {
    name: "topolet_reclaimed_cpu_batch_used_millicpu",
    kind: Kind::Gauge,
    labels: &[],
    help: "CPU the batch pods used over the last suppress interval.",
};
pub const RECLAIMED_CPU_BUDGET_MILLICPU: Family = Family {
    name: "topolet_reclaimed_cpu_budget_millicpu",
    kind: Kind::Gauge,
    labels: &[],
    help:
        "CPU the batch pods may use now (the suppress loop's budget, split into their CFS quotas).",
};
pub const RECLAIMED_CPU_CGROUP_ERRORS_TOTAL: Family = Family {
    name: "topolet_reclaimed_cpu_cgroup_errors_total",
    kind: Kind::Counter,
    labels: &["op"],
    help: "Batch pods' cgroups that could not be read (op read: the batch use is then unknown), batch containers' freezers not written (op freeze) or their quotas not written directly (op quota: the runtime's update still carries them).",
};
pub const RECLAIMED_CPU_CUT_LATENCY_SECONDS: Family = Family {
    name: "topolet_reclaimed_cpu_cut_latency_seconds",
    kind: Kind::Histogram,
    labels: &[],
    help: "From the usage reading that showed the regular pods' rise to the cut quotas written into the batch containers' cgroups and handed to the runtime.",
};
pub const RECLAIMED_CPU_EVICTIONS_TOTAL: Family = Family {
    name: "topolet_reclaimed_cpu_evictions_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Batch pods evicted because they stayed starved (granted under [reclaimed] starved_percent of their request for starved_for), by result.",
};
pub const RECLAIMED_CPU_PUBLISHES_TOTAL: Family = Family {
    name: "topolet_reclaimed_cpu_publishes_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Writes of the reclaimed-CPU extended resource on the Node, by result.",
};
pub const RECLAIMED_CPU_REACTIONS_TOTAL: Family = Family {
    name: "topolet_reclaimed_cpu_reactions_total",
    kind: Kind::Counter,
    labels: &["kind"],
    help: "Changes of the batch budget: cut (at once, the regular pods' usage rose) and grow (one step back).",
};
pub const RECLAIMED_CPU_SUPPRESSED_MILLICPU: Family = Family {
    name: "topolet_reclaimed_cpu_suppressed_millicpu",
    kind: Kind::Gauge,
    labels: &[],
    help: "How far the batch pods' grants are below their limits now.",
};
pub const REFUSAL_LOGS_SUPPRESSED_TOTAL: Family = Family {
    name: "topolet_refusal_logs_suppressed_total",
    kind: Kind::Counter,
    labels: &["operation"],
    help: "Refusals not logged because they repeated the container's last logged one (the kubelet retries a refused resize every second), by operation.",
};
pub const REFUSALS_TOTAL: Family = Family {
    name: "topolet_refusals_total",
    kind: Kind::Counter,
    labels: &["operation", "reason"],
    help: "Containers refused (creation failed, or resize rejected), by operation and reason.",
};
pub const RESERVED_CPUS: Family = Family {
    name: "topolet_reserved_cpus",
    kind: Kind::Gauge,
    labels: &[],
    help: "CPUs reserved for system daemons.",
};
pub const SHARED_POOL_CPUS: Family = Family {
    name: "topolet_shared_pool_cpus",
    kind: Kind::Gauge,
    labels: &[],
    help: "CPUs in the shared pool.",
};
pub const STATE_FILE_PENDING: Family = Family {
    name: "topolet_state_file_pending",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 while the newest assignments are not yet in the state file (written off the event path; retried every second after a failure).",
};
pub const STATE_FILE_WRITES_TOTAL: Family = Family {
    name: "topolet_state_file_writes_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "State-file writes, by result (ok, error).",
};

/// Every family, by name.
pub const CATALOGUE: &[&Family] = &[
    &ADMISSION_DECISIONS_TOTAL,
    &ADMISSION_FALLBACKS_TOTAL,
    &ADMISSION_SOURCE_DISAGREEMENTS_TOTAL,
    &ADMISSIONS_TOTAL,
    &BUILD_INFO,
    &CONFIG_RELOADS_TOTAL,
    &DRIFT_CHECKS_TOTAL,
    &DRIFT_REPAIRS_TOTAL,
    &EVICTION_ATTEMPTS_TOTAL,
    &EVICTION_SIGNAL_VALUE,
    &EVICTION_THRESHOLD,
    &EVICTIONS_TOTAL,
    &EXCLUSIVE_BREACH_CONTAINERS,
    &EXCLUSIVE_BREACH_SECONDS_TOTAL,
    &EXCLUSIVE_CPUS,
    &FREE_EXCLUSIVE_CPUS,
    &HTTP_CONNECTIONS_TOTAL,
    &KUBE_API_ERRORS_TOTAL,
    &KUBE_CLIENT_ENABLED,
    &KUBE_EVENTS_TOTAL,
    &KUBE_POD_STORE_PODS,
    &KUBE_POD_STORE_SYNCED,
    &KUBE_POD_WAITS_TOTAL,
    &KUBE_POD_WATCH_ERRORS_TOTAL,
    &KUBE_POD_WATCH_RELISTS_TOTAL,
    &KUBE_POD_WATCH_REQUESTS_TOTAL,
    &KUBE_POD_WATCH_RESTARTS_TOTAL,
    &LEFT_ALONE_CONTAINERS,
    &MANAGED_CONTAINERS,
    &NODE_CONDITION,
    &NODE_RECLAIM_CONTAINERS_TOTAL,
    &NODE_RECLAIM_IMAGE_BYTES_TOTAL,
    &NODE_RECLAIM_IMAGES_TOTAL,
    &NODE_RECLAIM_OBSERVED_BYTES_TOTAL,
    &NODE_RECLAIM_SANDBOXES_TOTAL,
    &NODE_RECLAIM_TOTAL,
    &NODE_STATUS_PATCHES_TOTAL,
    &NRI_CONNECTS_TOTAL,
    &NRI_EVENT_DURATION_SECONDS,
    &NRI_RECONNECTS_TOTAL,
    &NRI_SYNCHRONIZED,
    &NRT_WRITES_TOTAL,
    &POD_CGROUP_WRITES_TOTAL,
    &POD_PRESSURE_STALL_SECONDS_TOTAL,
    &POD_RESOURCES_CALLS_TOTAL,
    &POD_RESOURCES_SERVED_TOTAL,
    &PRESSURE_STALL_AVG10_RATIO,
    &PRESSURE_STALL_SECONDS_TOTAL,
    &RECLAIMED_CPU_ADVERTISED_MILLICPU,
    &RECLAIMED_CPU_BATCH_USED_MILLICPU,
    &RECLAIMED_CPU_BUDGET_MILLICPU,
    &RECLAIMED_CPU_CGROUP_ERRORS_TOTAL,
    &RECLAIMED_CPU_CUT_LATENCY_SECONDS,
    &RECLAIMED_CPU_EVICTIONS_TOTAL,
    &RECLAIMED_CPU_PUBLISHES_TOTAL,
    &RECLAIMED_CPU_REACTIONS_TOTAL,
    &RECLAIMED_CPU_SUPPRESSED_MILLICPU,
    &REFUSAL_LOGS_SUPPRESSED_TOTAL,
    &REFUSALS_TOTAL,
    &RESERVED_CPUS,
    &SHARED_POOL_CPUS,
    &STATE_FILE_PENDING,
    &STATE_FILE_WRITES_TOTAL,
];
