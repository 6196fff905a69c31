//! `topolet withdraw`: takes back what topolet published in the cluster, on every node, when it
//! is uninstalled (the Helm chart's post-delete hook runs it; by hand after `kubectl delete -f
//! deploy/kubernetes/`): its node conditions (`Topolet*Pressure`, a strategic-merge delete by
//! type, the kubelet's own conditions untouched), its pressure taints (`topolet.io/*-pressure`,
//! other taints kept, written with the Node's resourceVersion), the reclaimed-CPU extended
//! resource (every name of [`resource_names`]: the default, and each configuration's `[reclaimed]
//! resource_name`; removed from capacity and allocatable), and the
//! NodeResourceTopology objects it wrote (those whose zones carry topolet's own attribute
//! `topoletLargestFreeAlignedCPUs`: an object another writer keeps, NFD's topology-updater's, is
//! left alone). Nothing running is touched. It runs after the release's objects are deleted:
//! a topolet pod still terminating has lost its ClusterRoleBinding by then and cannot publish
//! again behind it.
//!
//! Its permissions are not the node agent's (`crate::cluster::permissions`): they are
//! [`PERMISSIONS`], the hook's own ClusterRole (deploy/helm/topolet/templates/withdraw.yaml).

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::cluster::nrt;
use crate::cluster::permissions::Permission;
use crate::config::{Config, ConfigError};
use topolet_core::eviction::node_status::{all_taint_keys, condition_type};
use topolet_core::eviction::signal::NodeCondition;

/// The reclaimed-CPU extended resource's default name (`[reclaimed] resource_name`).
pub const DEFAULT_EXTENDED_RESOURCE: &str =
    topolet_core::reclaimed::settings::DEFAULT_RESOURCE_NAME;

/// The extended resource names to withdraw: the default one (a node may hold it from a run
/// before its configuration named another), each of `named` (`--extended-resource`), and the
/// `[reclaimed] resource_name` of each configuration file of `configs` (`--config`), read by
/// [`Config::load`], the parser `topolet run` reads it with, so that a file's default, its
/// checks and its TOML are exactly the agent's. Sorted, each name once.
///
/// A file that cannot be read or does not parse is an error naming the file (and the key, where
/// the parser names one), returned beside the names of the others: the caller withdraws what it
/// could read and then fails, since the name that file sets may still be on the nodes.
pub fn resource_names(named: &[String], configs: &[PathBuf]) -> (Vec<String>, Vec<ConfigError>) {
    let mut names: BTreeSet<String> = BTreeSet::from([DEFAULT_EXTENDED_RESOURCE.to_string()]);
    names.extend(named.iter().cloned());
    let mut errors = Vec::new();
    for path in configs {
        match Config::load(path) {
            Ok(c) => {
                names.insert(c.reclaimed.resource_name);
            }
            Err(e) => errors.push(e),
        }
    }
    (names.into_iter().collect(), errors)
}

/// The zone attribute only topolet writes (docs/src/kubernetes-api.md: NodeResourceTopology).
pub const TOPOLET_ZONE_ATTRIBUTE: &str = "topoletLargestFreeAlignedCPUs";

/// What `topolet withdraw` needs, and why (the chart's hook ClusterRole grants exactly these; a
/// unit test compares them).
pub const PERMISSIONS: &[Permission] = &[
    Permission {
        group: "",
        resource: "nodes",
        subresource: None,
        verbs: &["list", "patch"],
        why: "every node; its pressure taints removed (spec)",
    },
    Permission {
        group: "",
        resource: "nodes",
        subresource: Some("status"),
        verbs: &["patch"],
        why: "topolet's node conditions removed by type",
    },
    Permission {
        group: nrt::GROUP,
        resource: nrt::PLURAL,
        subresource: None,
        verbs: &["list", "delete"],
        why: "the NodeResourceTopology objects topolet wrote",
    },
];

/// What one run took back.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Withdrawn {
    pub conditions: Vec<(String, String)>,
    pub taints: Vec<(String, String)>,
    pub extended_resources: Vec<(String, String)>,
    pub nrt_objects: Vec<String>,
}

/// Which of `names` `node` advertises (capacity or allocatable).
pub fn extended_resources_of(node: &Node, names: &[String]) -> Vec<String> {
    let Some(st) = node.status.as_ref() else {
        return Vec::new();
    };
    names
        .iter()
        .filter(|n| {
            st.capacity.as_ref().is_some_and(|c| c.contains_key(*n))
                || st.allocatable.as_ref().is_some_and(|a| a.contains_key(*n))
        })
        .cloned()
        .collect()
}

/// The strategic-merge patch that removes `names` from capacity and allocatable (a null value
/// deletes a map key).
pub fn extended_resources_delete_patch(names: &[String]) -> Value {
    let nulls: serde_json::Map<String, Value> =
        names.iter().map(|n| (n.clone(), Value::Null)).collect();
    json!({"status": {"capacity": nulls, "allocatable": nulls}})
}

/// The conditions of `node` that are topolet's.
pub fn topolet_conditions(node: &Node) -> Vec<String> {
    let ours: BTreeSet<&str> = NodeCondition::ALL.into_iter().map(condition_type).collect();
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| ours.contains(c.type_.as_str()))
        .map(|c| c.type_.clone())
        .collect()
}

/// The strategic-merge patch that deletes conditions `types` (merge key `type`).
pub fn conditions_delete_patch(types: &[String]) -> Value {
    let list: Vec<Value> = types
        .iter()
        .map(|t| json!({"type": t, "$patch": "delete"}))
        .collect();
    json!({"status": {"conditions": list}})
}

/// `node`'s taints without topolet's; `None` when it has none of them.
pub fn taints_without_topolets(node: &Node) -> Option<(Vec<Value>, Vec<String>)> {
    let ours = all_taint_keys();
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref())?;
    let (removed, kept): (Vec<_>, Vec<_>) =
        taints.iter().partition(|t| ours.contains(t.key.as_str()));
    if removed.is_empty() {
        return None;
    }
    let kept = kept
        .into_iter()
        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
        .collect();
    Some((kept, removed.into_iter().map(|t| t.key.clone()).collect()))
}

/// Whether a NodeResourceTopology object is one topolet wrote.
pub fn is_topolets(obj: &Value) -> bool {
    obj["zones"].as_array().into_iter().flatten().any(|z| {
        z["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["name"] == TOPOLET_ZONE_ATTRIBUTE)
    })
}

/// Takes back topolet's conditions, taints, extended resources (`extended_resources`) and
/// NodeResourceTopology objects on every node.
pub async fn withdraw(client: Client, extended_resources: &[String]) -> anyhow::Result<Withdrawn> {
    let mut done = Withdrawn::default();
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .context("listing nodes")?;
    for node in &list.items {
        let name = node.metadata.name.clone().unwrap_or_default();
        let types = topolet_conditions(node);
        if !types.is_empty() {
            nodes
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Strategic(conditions_delete_patch(&types)),
                )
                .await
                .with_context(|| format!("removing conditions {types:?} from node {name}"))?;
            done.conditions
                .extend(types.into_iter().map(|t| (name.clone(), t)));
        }
        let ext = extended_resources_of(node, extended_resources);
        if !ext.is_empty() {
            nodes
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Strategic(extended_resources_delete_patch(&ext)),
                )
                .await
                .with_context(|| format!("removing {ext:?} from node {name}"))?;
            done.extended_resources
                .extend(ext.into_iter().map(|r| (name.clone(), r)));
        }
        if let Some((kept, removed)) = taints_without_topolets(node) {
            let rv = node.metadata.resource_version.clone();
            let patch = json!({"metadata": {"resourceVersion": rv}, "spec": {"taints": kept}});
            nodes
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .with_context(|| format!("removing taints {removed:?} from node {name}"))?;
            done.taints
                .extend(removed.into_iter().map(|t| (name.clone(), t)));
        }
    }
    let resource = ApiResource {
        group: nrt::GROUP.into(),
        version: nrt::VERSION.into(),
        api_version: format!("{}/{}", nrt::GROUP, nrt::VERSION),
        kind: nrt::KIND.into(),
        plural: nrt::PLURAL.into(),
    };
    let objects: Api<DynamicObject> = Api::all_with(client, &resource);
    let list = match objects.list(&ListParams::default()).await {
        Ok(l) => l,
        // No CRD: nothing was published.
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(done),
        Err(e) => return Err(e).context("listing NodeResourceTopology objects"),
    };
    for obj in list.items {
        let name = obj.metadata.name.clone().unwrap_or_default();
        let value = serde_json::to_value(&obj).context("a NodeResourceTopology as JSON")?;
        if !is_topolets(&value) {
            continue;
        }
        match objects.delete(&name, &DeleteParams::default()).await {
            Ok(_) => done.nrt_objects.push(name),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(e).with_context(|| format!("deleting NodeResourceTopology {name}"))
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition as Cond, NodeSpec, NodeStatus, Taint};

    fn node(conditions: &[&str], taints: &[&str]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|k| Taint {
                            key: k.to_string(),
                            effect: "NoSchedule".into(),
                            ..Taint::default()
                        })
                        .collect(),
                ),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|t| Cond {
                            type_: t.to_string(),
                            status: "False".into(),
                            ..Cond::default()
                        })
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn only_topolets_conditions_and_taints_are_taken_back() {
        let n = node(
            &[
                "Ready",
                "MemoryPressure",
                "TopoletMemoryPressure",
                "TopoletPIDPressure",
            ],
            &["dedicated", "topolet.io/disk-pressure"],
        );
        assert_eq!(
            topolet_conditions(&n),
            vec!["TopoletMemoryPressure", "TopoletPIDPressure"]
        );
        assert_eq!(
            conditions_delete_patch(&topolet_conditions(&n)),
            json!({"status": {"conditions": [
                {"type": "TopoletMemoryPressure", "$patch": "delete"},
                {"type": "TopoletPIDPressure", "$patch": "delete"},
            ]}})
        );
        let (kept, removed) = taints_without_topolets(&n).expect("one of topolet's");
        assert_eq!(removed, vec!["topolet.io/disk-pressure"]);
        assert_eq!(
            kept,
            vec![json!({"key": "dedicated", "effect": "NoSchedule"})]
        );
        assert_eq!(taints_without_topolets(&node(&[], &["dedicated"])), None);
    }

    #[test]
    fn the_extended_resource_is_removed_from_capacity_and_allocatable() {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut n = node(&[], &[]);
        let st = n.status.as_mut().expect("status");
        st.capacity = Some(
            [
                ("cpu".to_string(), Quantity("2".into())),
                (
                    DEFAULT_EXTENDED_RESOURCE.to_string(),
                    Quantity("500".into()),
                ),
            ]
            .into(),
        );
        let names = vec![DEFAULT_EXTENDED_RESOURCE.to_string(), "other/x".to_string()];
        assert_eq!(
            extended_resources_of(&n, &names),
            vec![DEFAULT_EXTENDED_RESOURCE]
        );
        assert_eq!(
            extended_resources_delete_patch(&[DEFAULT_EXTENDED_RESOURCE.to_string()]),
            json!({"status": {
                "capacity": {DEFAULT_EXTENDED_RESOURCE: null},
                "allocatable": {DEFAULT_EXTENDED_RESOURCE: null},
            }})
        );
        assert!(extended_resources_of(&node(&[], &[]), &names).is_empty());
    }

    #[test]
    fn every_configuration_s_resource_name_is_withdrawn_with_the_default() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write");
            p
        };
        let pool = write(
            "pool.toml",
            "[reclaimed]\nresource_name = \"example.com/batch-cpu\"\n",
        );
        let other = write(
            "other.toml",
            "[reclaimed]\nenabled = true\nresource_name = \"example.org/spare\"\n",
        );
        // No [reclaimed]: the default name, as `topolet run` would publish it.
        let plain = write("plain.toml", "[qos]\npids_limit = 4096\n");
        let (names, errors) = resource_names(
            &["example.net/by-hand".to_string()],
            &[pool.clone(), other, plain, pool],
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            names,
            [
                "example.com/batch-cpu",
                "example.net/by-hand",
                "example.org/spare",
                DEFAULT_EXTENDED_RESOURCE,
            ]
        );
        // Nothing given: the default alone.
        let (names, errors) = resource_names(&[], &[]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(names, [DEFAULT_EXTENDED_RESOURCE]);
    }

    #[test]
    fn a_configuration_that_cannot_be_read_is_named_and_the_others_still_count() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().join("good.toml");
        std::fs::write(
            &good,
            "[reclaimed]\nresource_name = \"example.com/batch-cpu\"\n",
        )
        .expect("write");
        let bad_value = dir.path().join("bad-value.toml");
        std::fs::write(&bad_value, "[reclaimed]\nresource_name = \"no-domain\"\n").expect("write");
        let bad_type = dir.path().join("bad-type.toml");
        std::fs::write(&bad_type, "[reclaimed]\nresource_name = 3\n").expect("write");
        let missing = dir.path().join("missing.toml");
        let (names, errors) = resource_names(
            &[],
            &[bad_value.clone(), good, bad_type.clone(), missing.clone()],
        );
        assert_eq!(names, ["example.com/batch-cpu", DEFAULT_EXTENDED_RESOURCE]);
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(texts.len(), 3, "{texts:?}");
        for (text, path) in texts.iter().zip([&bad_value, &bad_type, &missing]) {
            assert!(text.starts_with(&path.display().to_string()), "{text}");
        }
        assert!(texts[0].contains("reclaimed.resource_name"), "{}", texts[0]);
        assert!(texts[1].contains("resource_name"), "{}", texts[1]);
        assert!(texts[2].contains("cannot read"), "{}", texts[2]);
    }

    #[test]
    fn only_topolets_nrt_objects_are_deleted() {
        let ours = json!({"zones": [{"name": "node-0", "attributes": [
            {"name": TOPOLET_ZONE_ATTRIBUTE, "value": "4"}]}]});
        let nfd = json!({"zones": [{"name": "node-0", "attributes": []}]});
        assert!(is_topolets(&ours));
        assert!(!is_topolets(&nfd));
        assert!(!is_topolets(&json!({})));
    }
}
