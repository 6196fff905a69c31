//! The Kubernetes API permissions topolet uses: the one list. `deploy/kubernetes/rbac.yaml`'s
//! ClusterRole must grant exactly these (a unit test here compares them), and the kubelet
//! suite compares them with what the real API server says topolet's user may do
//! (SelfSubjectRulesReview), so a missing or an excess permission fails a test.

/// One rule: an API group, a resource (with its subresource, if any), the verbs, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    /// `""` for the core group.
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    pub verbs: &'static [&'static str],
    pub why: &'static str,
}

impl Permission {
    /// The RBAC resource name: `pods`, `pods/eviction`.
    pub fn rbac_resource(&self) -> String {
        match self.subresource {
            Some(s) => format!("{}/{s}", self.resource),
            None => self.resource.to_string(),
        }
    }
}

/// Every permission topolet's code uses.
pub const PERMISSIONS: &[Permission] = &[
    Permission {
        group: "",
        resource: "events",
        subresource: None,
        verbs: &["create", "patch"],
        why: "Events on pods (refusals, exclusive grants, evictions) and on the Node (rejected or \
              refused configuration reloads); a repeat within 10 minutes patches count and \
              lastTimestamp, as the kubelet's recorder does",
    },
    Permission {
        group: "",
        resource: "nodes",
        subresource: Some("status"),
        verbs: &["patch"],
        why: "topolet's own node conditions (TopoletMemoryPressure, ...), a strategic merge \
              by type that leaves the kubelet's alone; with [reclaimed] the reclaimed-CPU \
              extended resource in capacity and allocatable, one key",
    },
    Permission {
        group: "",
        resource: "nodes",
        subresource: None,
        verbs: &["patch"],
        why: "[eviction] pressure_taint: the topolet.io/*-pressure NoSchedule taints (in spec)",
    },
    Permission {
        group: "topology.node.k8s.io",
        resource: "noderesourcetopologies",
        subresource: None,
        verbs: &["get", "create", "update"],
        why: "this node's NodeResourceTopology object (read on conflict, created once, replaced \
              on change)",
    },
];

/// What topolet does as the node (`[kubernetes] evict_as = "node"`, the chart's `rbac.evictAs:
/// node`): evictions, and reading this node's pods and DRA ResourceSlices. No pod right of topolet's own, only the right
/// to act as the node its pod is bound to, and only for these requests (constrained
/// impersonation, KEP-5284: the API server checks `impersonate:associated-node` on `nodes` of
/// `authentication.k8s.io`, then `impersonate-on:associated-node:<verb>` on the resource of the
/// request; the node's own rights decide the rest: NodeRestriction admits Evictions of its own
/// pods only, and the Node authorizer lets a node list and watch only the pods and the
/// ResourceSlices whose `spec.nodeName` field selector names it, KEP-4601).
pub const AS_NODE: &[Permission] = &[
    Permission {
        group: "authentication.k8s.io",
        resource: "nodes",
        subresource: None,
        verbs: &["impersonate:associated-node"],
        why: "act as the node this pod is bound to (the node name in its service-account \
              token), and as no other",
    },
    Permission {
        group: "",
        resource: "pods",
        subresource: Some("eviction"),
        verbs: &["impersonate-on:associated-node:create"],
        why: "evictions through the Eviction API (policy/v1, PodDisruptionBudgets honoured) as \
              the node: NodeRestriction admits only pods bound to it",
    },
    Permission {
        group: "",
        resource: "pods",
        subresource: None,
        verbs: &[
            "impersonate-on:associated-node:list",
            "impersonate-on:associated-node:watch",
        ],
        why: "the pod specs of this node (field selector spec.nodeName), for admission from the \
              real spec and the eviction loop's pod facts, as the node: the Node authorizer \
              serves a node only its own pods",
    },
    Permission {
        group: "resource.k8s.io",
        resource: "resourceslices",
        subresource: None,
        verbs: &[
            "impersonate-on:associated-node:list",
            "impersonate-on:associated-node:watch",
        ],
        why: "this node's DRA ResourceSlices (field selector spec.nodeName), for the NUMA node \
              of each DRA device a container was given, as the node: the Node authorizer \
              serves a node only its own slices",
    },
];

/// The same requests as topolet itself (`evict_as = "self"`, `rbac.evictAs: self`: clusters
/// without constrained impersonation); these rights cover every pod and every ResourceSlice of
/// the cluster.
pub const AS_SELF: &[Permission] = &[
    Permission {
        group: "",
        resource: "pods",
        subresource: Some("eviction"),
        verbs: &["create"],
        why: "evictions through the Eviction API (policy/v1), which honours \
              PodDisruptionBudgets",
    },
    Permission {
        group: "",
        resource: "pods",
        subresource: None,
        verbs: &["list", "watch"],
        why: "the pod specs of this node (field selector spec.nodeName), for admission from the \
              real spec and the eviction loop's pod facts",
    },
    Permission {
        group: "resource.k8s.io",
        resource: "resourceslices",
        subresource: None,
        verbs: &["list", "watch"],
        why: "this node's DRA ResourceSlices (field selector spec.nodeName), for the NUMA node \
              of each DRA device a container was given; RBAC cannot narrow the read to one \
              node's slices, which hold device inventories and attributes, no secrets",
    },
];

/// Every (group, resource, verb) the chart's default ClusterRole grants: [`PERMISSIONS`] and
/// [`AS_NODE`], sorted.
pub fn grants() -> Vec<(String, String, String)> {
    let mut all = grants_of(PERMISSIONS);
    all.extend(grants_of(AS_NODE));
    all.sort();
    all.dedup();
    all
}

/// [`grants`] of any list.
pub fn grants_of(list: &[Permission]) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = list
        .iter()
        .flat_map(|p| {
            p.verbs
                .iter()
                .map(move |v| (p.group.to_string(), p.rbac_resource(), v.to_string()))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Doc {
        kind: String,
        metadata: Meta,
        #[serde(default)]
        rules: Vec<Rule>,
    }
    #[derive(Deserialize)]
    struct Meta {
        name: String,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Rule {
        api_groups: Vec<String>,
        resources: Vec<String>,
        verbs: Vec<String>,
        #[serde(default)]
        resource_names: Vec<String>,
    }

    /// The chart's post-delete hook ClusterRole (templates/withdraw.yaml) grants exactly
    /// `crate::cluster::withdraw::PERMISSIONS`. Its `rules:` are plain YAML (no template
    /// directive), read from the template itself: `helm template --no-hooks` renders
    /// deploy/kubernetes/ without it.
    #[test]
    fn the_withdraw_hook_role_grants_exactly_its_list() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/helm/topolet/templates/withdraw.yaml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let doc = text
            .split("\n---\n")
            .find(|d| d.contains("\nkind: ClusterRole\n"))
            .expect("a ClusterRole in the template");
        let rules = &doc[doc.find("\nrules:\n").expect("rules:") + 1..];
        let rules = &rules[..rules.find("\n{{").unwrap_or(rules.len())];
        assert!(!rules.contains("{{"), "plain YAML rules in {path}");
        #[derive(Deserialize)]
        struct Rules {
            rules: Vec<Rule>,
        }
        let parsed: Rules = serde_saphyr::from_str(rules).unwrap();
        let mut granted = Vec::new();
        for r in parsed.rules {
            for g in &r.api_groups {
                for res in &r.resources {
                    for v in &r.verbs {
                        granted.push((g.clone(), res.clone(), v.clone()));
                    }
                }
            }
        }
        granted.sort();
        granted.dedup();
        assert_eq!(granted, grants_of(crate::cluster::withdraw::PERMISSIONS));
    }

    #[test]
    fn the_deployed_cluster_role_grants_exactly_the_list() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/kubernetes/rbac.yaml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let mut granted = Vec::new();
        let mut roles = 0;
        for doc in serde_saphyr::from_multiple::<Doc>(&text).unwrap() {
            if doc.kind != "ClusterRole" || doc.metadata.name != "topolet" {
                continue;
            }
            roles += 1;
            for r in doc.rules {
                assert!(r.resource_names.is_empty(), "no resourceNames in {path}");
                for g in &r.api_groups {
                    for res in &r.resources {
                        for v in &r.verbs {
                            assert!(!v.contains('*') && !res.contains('*'), "no wildcards");
                            granted.push((g.clone(), res.clone(), v.clone()));
                        }
                    }
                }
            }
        }
        assert_eq!(roles, 1, "one ClusterRole topolet in {path}");
        granted.sort();
        granted.dedup();
        assert_eq!(
            granted,
            grants(),
            "{path} must grant exactly crate::cluster::permissions::PERMISSIONS"
        );
    }

    #[test]
    fn every_permission_says_why() {
        for p in PERMISSIONS {
            assert!(!p.verbs.is_empty() && p.why.len() > 10, "{p:?}");
        }
        for p in AS_NODE.iter().chain(AS_SELF) {
            assert!(!p.verbs.is_empty() && p.why.len() > 10, "{p:?}");
        }
        // topolet's own identity evicts nothing and reads no pod and no ResourceSlice by default.
        for (group, resource, verb) in [
            ("", "pods/eviction", "create"),
            ("", "pods", "list"),
            ("", "pods", "watch"),
            ("resource.k8s.io", "resourceslices", "list"),
            ("resource.k8s.io", "resourceslices", "watch"),
        ] {
            let grant = (group.to_string(), resource.to_string(), verb.to_string());
            assert!(!grants().contains(&grant), "{grant:?}");
        }
    }
}
