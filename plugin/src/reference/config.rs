//! `docs/src/reference/config.md`: every key of the configuration file with its type, its default
//! and whether a reload applies it.
//!
//! Where each column comes from: the keys are the schema's own (serde's list of the fields each
//! section accepts; the test fails when a key lacks a type here, or a type names no key); the
//! default and the description are `plugin/config.example.toml`'s line for the key and the comment
//! above it (a test in `config::schema` keeps that file equal to the code's defaults); whether a
//! reload applies a key is [`READ_AT_START`]'s.

use std::collections::BTreeMap;

use crate::config::reload::READ_AT_START;
use crate::config::Config;
use crate::reference::{cell, GENERATED};

/// The sections, in the file's order.
const SECTIONS: &[&str] = &[
    "nri",
    "cpu",
    "topology",
    "memory",
    "devices",
    "qos",
    "state",
    "admin",
    "metrics",
    "eviction",
    "kubernetes",
    "kubelet",
    "reclaimed",
];

/// Each key's type as the file writes it. `devices` is a table of its own (any key).
const TYPES: &[(&str, &str)] = &[
    ("nri.socket", "path"),
    ("nri.name", "string"),
    ("nri.index", "integer 0–99, or two digits as a string"),
    ("nri.drift_check_s", "integer (seconds)"),
    ("cpu.policy", "`\"none\"` or `\"static\"`"),
    ("cpu.reserved_cpus", "string (CPU list)"),
    ("cpu.reserved_cpu_count", "integer"),
    ("cpu.full_pcpus_only", "boolean"),
    ("cpu.distribute_cpus_across_numa", "boolean"),
    ("cpu.distribute_cpus_across_cores", "boolean"),
    ("cpu.align_by_socket", "boolean"),
    ("cpu.prefer_align_cpus_by_uncorecache", "boolean"),
    ("cpu.strict_cpu_reservation", "boolean"),
    (
        "topology.policy",
        "`\"none\"`, `\"best-effort\"`, `\"restricted\"` or `\"single-numa-node\"`",
    ),
    ("topology.scope", "`\"container\"` or `\"pod\"`"),
    ("topology.prefer_closest_numa_nodes", "boolean"),
    ("topology.max_allowable_numa_nodes", "integer"),
    ("memory.policy", "`\"none\"` or `\"static\"`"),
    ("memory.reserved", "table: NUMA node id → quantity"),
    ("memory.shared_pool_mems_follow_cpus", "boolean"),
    (
        "devices.\"<resource>\"",
        "array of PCI addresses, keyed by extended resource name",
    ),
    ("qos.pids_limit", "integer"),
    ("qos.oom_score_adj_floor", "integer -1000–1000"),
    ("qos.keep_cfs_quota_for_exclusive", "boolean"),
    ("state.dir", "path"),
    ("admin.socket", "path (absolute)"),
    ("metrics.enabled", "boolean"),
    ("metrics.address", "string (ip:port)"),
    ("eviction.hard", "table: signal → quantity or percentage"),
    ("eviction.soft", "table: signal → quantity or percentage"),
    ("eviction.soft_grace_period", "table: signal → duration"),
    (
        "eviction.minimum_reclaim",
        "table: signal → quantity or percentage",
    ),
    ("eviction.pressure_transition_period", "duration"),
    ("eviction.max_pod_grace_period", "duration, or seconds"),
    ("eviction.interval", "duration"),
    ("eviction.action", "`\"api\"`, `\"cri\"` or `\"dry-run\"`"),
    ("eviction.node_conditions", "boolean"),
    ("eviction.node_condition_heartbeat", "duration"),
    ("eviction.pressure_taint", "boolean"),
    ("eviction.cri_endpoint", "string (unix:// URL)"),
    ("eviction.nodefs_path", "path"),
    ("eviction.imagefs_path", "path"),
    ("eviction.node_reclaim", "boolean"),
    ("eviction.image_minimum_gc_age", "duration"),
    ("eviction.pinned_images", "array of strings"),
    (
        "eviction.image_gc_high_threshold_percent",
        "integer (percent)",
    ),
    (
        "eviction.image_gc_low_threshold_percent",
        "integer (percent)",
    ),
    (
        "kubernetes.enabled",
        "`\"auto\"`, `\"on\"` or `\"off\"` (or a boolean)",
    ),
    ("kubernetes.kubeconfig", "path (absolute)"),
    ("kubernetes.node_name", "string"),
    ("kubernetes.pod_wait_ms", "integer (milliseconds)"),
    ("kubernetes.watch_timeout_s", "integer (seconds)"),
    (
        "kubernetes.evict_as",
        "`\"auto\"`, `\"node\"` or `\"self\"`",
    ),
    ("kubernetes.start_jitter_ms", "integer (milliseconds)"),
    ("kubelet.pod_resources", "boolean"),
    ("kubelet.pod_resources_socket", "path"),
    ("kubelet.pod_resources_wait_ms", "integer (milliseconds)"),
    (
        "kubelet.pod_resources_export_socket",
        "path (absolute; unset: not served)",
    ),
    ("reclaimed.enabled", "boolean"),
    ("reclaimed.resource_name", "string (extended resource name)"),
    ("reclaimed.interval", "duration"),
    ("reclaimed.suppress_interval", "duration"),
    ("reclaimed.window", "duration"),
    ("reclaimed.percentile", "integer 1–100"),
    ("reclaimed.margin_percent", "integer (percent)"),
    ("reclaimed.usage", "`\"cpus\"` or `\"pods\"`"),
    ("reclaimed.min_change_percent", "integer (percent)"),
    ("reclaimed.max_age", "duration"),
    ("reclaimed.grow_step_percent", "integer (percent)"),
    ("reclaimed.starved_percent", "integer (percent)"),
    ("reclaimed.starved_for", "duration"),
    ("reclaimed.sched_idle", "boolean"),
    (
        "reclaimed.withdraw_on_stop",
        "`\"auto\"`, `\"always\"` or `\"never\"`",
    ),
];

/// The names serde accepts where it rejects `__unknown__`: its "expected one of" list.
fn accepted(toml_text: &str) -> Vec<String> {
    let err = toml::from_str::<Config>(toml_text)
        .err()
        .map(|e| e.message().to_string())
        .unwrap_or_default();
    let list = err
        .split_once("expected one of ")
        .or_else(|| err.split_once("expected "))
        .map(|(_, l)| l)
        .unwrap_or_else(|| panic!("no list of accepted keys in {err:?}"));
    // `a`, `b` or `c`: the names between backticks.
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Every key of the schema, `section.key`, in the schema's order (`devices` as one
/// `devices."<resource>"`).
fn schema_keys() -> Vec<String> {
    let sections = accepted("__unknown__ = 1");
    assert_eq!(sections, SECTIONS, "the file's sections");
    let mut keys = Vec::new();
    for s in SECTIONS {
        if *s == "devices" {
            keys.push("devices.\"<resource>\"".to_string());
            continue;
        }
        for k in accepted(&format!("[{s}]\n__unknown__ = 1")) {
            keys.push(format!("{s}.{k}"));
        }
    }
    keys
}

/// One key as `plugin/config.example.toml` shows it: its value, whether the line is commented out
/// (the key is unset by default; the value is an example) and the comment above it.
struct Example {
    value: String,
    unset: bool,
    comment: Vec<String>,
}

/// `section.key` → its example line and comment.
fn examples() -> BTreeMap<String, Example> {
    let text = include_str!("../../config.example.toml");
    let mut out = BTreeMap::new();
    let mut section = String::new();
    let mut comment: Vec<String> = Vec::new();
    let mut prev: Option<String> = None;
    for line in text.lines() {
        if let Some(s) = line.strip_prefix('[') {
            section = s.trim_end_matches(']').to_string();
            comment.clear();
            prev = None;
            continue;
        }
        let (commented, body) = match line.strip_prefix("# ") {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let key_value = body.split_once(" = ").filter(|(k, _)| {
            !k.is_empty()
                && (k.starts_with('"') || k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        });
        match key_value {
            Some((k, v)) => {
                let key = if section == "devices" {
                    "devices.\"<resource>\"".to_string()
                } else {
                    format!("{section}.{k}")
                };
                let mut text = std::mem::take(&mut comment);
                if text.is_empty() {
                    if let Some(p) = &prev {
                        text.push(format!("See `{p}`."));
                    }
                }
                prev = Some(key.clone());
                out.insert(
                    key,
                    Example {
                        value: v.to_string(),
                        unset: commented,
                        comment: text,
                    },
                );
            }
            None if line.starts_with('#') && !section.is_empty() => {
                comment.push(line.trim_start_matches('#').trim().to_string())
            }
            None => comment.clear(),
        }
    }
    out
}

/// Whether a reload applies `key` (`section.key`): not when [`READ_AT_START`] names the key or
/// its section.
fn reload_applies(key: &str) -> bool {
    let (section, name) = key.split_once('.').unwrap_or((key, ""));
    !READ_AT_START
        .iter()
        .any(|p| p.key == format!("[{section}]") || p.key == format!("[{section}] {name}"))
}

/// The page.
pub(super) fn render() -> String {
    let keys = schema_keys();
    let types: BTreeMap<&str, &str> = TYPES.iter().copied().collect();
    let typed: Vec<&str> = TYPES.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        typed, keys,
        "reference::config::TYPES must name every key of the schema, in its order"
    );
    let examples = examples();
    let mut out = format!(
        "# Configuration keys\n\n{GENERATED}\n\n\
         Every key of the node's TOML file (`plugin/config.example.toml`; \
         [Configuration and reload](../configuration.md)), by section. **Default** is the value \
         an empty file gives; *unset* keys have none, and their description says what that \
         means. **Reload**: *applied* when a running topolet applies a change at reload \
         (SIGHUP, or the file changed), *restart* when the key is read only at start and a \
         change waits for the next start (`topolet config check` lists these).\n"
    );
    let mut section = "";
    for key in &keys {
        let (s, name) = key.split_once('.').unwrap_or((key, ""));
        if s != section {
            section = s;
            out.push_str(&format!(
                "\n## [{s}]\n\n| key | type | default | reload | description |\n|---|---|---|---|---|\n"
            ));
        }
        let example = examples
            .get(key)
            .unwrap_or_else(|| panic!("{key} has no line in plugin/config.example.toml"));
        assert!(
            !example.comment.is_empty(),
            "{key} has no comment in plugin/config.example.toml"
        );
        out.push_str(&format!(
            "| `{name}` | {} | {} | {} | {} |\n",
            cell(types[key.as_str()]),
            if example.unset {
                format!("*unset* (e.g. `{}`)", example.value)
            } else {
                format!("`{}`", example.value)
            },
            if reload_applies(key) {
                "applied"
            } else {
                "restart"
            },
            cell(&example.comment.join(" "))
        ));
    }
    out
}
