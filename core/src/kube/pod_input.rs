//! Parsing the pods given to `topolet plan --pods` (and read from the API by the pod directory)
//! from a string.
//!
//! Owns the mapping from Kubernetes Pod objects (JSON or YAML) to [`crate::kube::pod::Pod`].
//! Accepted shapes: one Pod, a `kind: List` (or `PodList`) with `items`, or a plain array of Pods;
//! YAML may hold several `---` documents, each of those shapes. So `kubectl get pods -o json` (or
//! `-o yaml`) output works unchanged. The input is given as text: reading the file is the shell's job.
//!
//! Fields used: `metadata.{name, namespace (default "default"), uid (default: namespace/name; unique), annotations}`,
//! `spec.{priority, priorityClassName, resources, terminationGracePeriodSeconds}`, and for `spec.containers[]` and
//! `spec.initContainers[]`: `name`, `restartPolicy`, `resources.{requests, limits}` with `cpu`,
//! `memory`, `hugepages-<size>`, `ephemeral-storage` (kept for disk-pressure eviction ranking),
//! `storage` (validated, then ignored) and extended resources
//! (any other name; whole numbers). Unknown fields are ignored.
//!
//! Mirrors the API server's defaulting (`pkg/apis/core/v1/defaults.go` `SetDefaults_Pod`): a
//! resource with a limit but no request gets the limit as its request, for containers and for
//! pod-level resources; so a hand-written "limits only" pod is Guaranteed exactly as it would be
//! once admitted. Quantities may be strings or YAML/JSON numbers.
//!
//! Errors name the pod, the container and the field, e.g.
//! `pod default/web: container "app": resources.limits.cpu: invalid quantity "abc"`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use thiserror::Error;

use crate::kube::pod::{Container, ContainerRestartPolicy, Pod, ResourceList, Resources};
use crate::kube::quantity::{self, QuantityError};

/// Errors from [`parse_pods`].
#[derive(Debug, Error)]
pub enum PodInputError {
    /// The text is not valid JSON (input starting with `{` or `[`).
    #[error("invalid json: {0}")]
    Json(String),
    /// The text is not valid YAML.
    #[error("invalid yaml: {0}")]
    Yaml(String),
    /// An item that is not a Pod object.
    #[error("item {index}: {message}")]
    Item { index: usize, message: String },
    /// A pod-level field is missing or malformed.
    #[error("pod {pod}: {field}: {message}")]
    Pod {
        pod: String,
        field: String,
        message: String,
    },
    /// A container field is missing or malformed.
    #[error("pod {pod}: container {container:?}: {field}: {message}")]
    Container {
        pod: String,
        container: String,
        field: String,
        message: String,
    },
    /// The same namespace/name appears twice.
    #[error("pod {0}: listed twice")]
    DuplicatePod(String),
    /// Two pods share a uid (placement keys containers by pod uid and name).
    #[error("pod {second}: metadata.uid {uid:?} is also the uid of pod {first}")]
    DuplicateUid {
        uid: String,
        first: String,
        second: String,
    },
}

/// Parse the `--pods` input: JSON (when it starts with `{` or `[`) or YAML; see the module docs.
/// Pods are returned in input order.
pub fn parse_pods(input: &str) -> Result<Vec<Pod>, PodInputError> {
    let trimmed = input.trim_start();
    let docs: Vec<Value> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        vec![serde_json::from_str(trimmed).map_err(|e| PodInputError::Json(e.to_string()))?]
    } else {
        // Every document of the stream; empty and null documents are skipped.
        serde_saphyr::from_multiple::<Value>(input)
            .map_err(|e| PodInputError::Yaml(e.to_string()))?
            .into_iter()
            .filter(|v| !v.is_null())
            .collect()
    };

    let mut objects = Vec::new();
    for doc in docs {
        collect_items(doc, &mut objects);
    }
    let mut pods = Vec::with_capacity(objects.len());
    let mut seen = BTreeSet::new();
    let mut uids: BTreeMap<String, String> = BTreeMap::new();
    for (index, obj) in objects.into_iter().enumerate() {
        let pod = parse_pod(index, &obj)?;
        if !seen.insert(pod.key()) {
            return Err(PodInputError::DuplicatePod(pod.key()));
        }
        if let Some(first) = uids.insert(pod.uid.clone(), pod.key()) {
            return Err(PodInputError::DuplicateUid {
                uid: pod.uid.clone(),
                first,
                second: pod.key(),
            });
        }
        pods.push(pod);
    }
    Ok(pods)
}

/// One Pod object (an API server's, serialized to JSON), as [`parse_pods`] reads each item: the
/// pod watch's conversion (`topolet::cluster::pod_directory`), so admission from the API and `topolet plan`
/// read a spec the same way.
pub fn pod_from_value(v: &Value) -> Result<Pod, PodInputError> {
    parse_pod(0, v)
}

/// Flatten arrays and `List`/`PodList` objects into their items.
fn collect_items(v: Value, out: &mut Vec<Value>) {
    match v {
        Value::Array(items) => out.extend(items),
        Value::Object(ref m)
            if matches!(
                m.get("kind").and_then(Value::as_str),
                Some("List" | "PodList")
            ) || (m.get("kind").is_none() && m.get("items").is_some_and(Value::is_array)) =>
        {
            if let Some(Value::Array(items)) = m.get("items") {
                out.extend(items.iter().cloned());
            }
        }
        other => out.push(other),
    }
}

fn parse_pod(index: usize, v: &Value) -> Result<Pod, PodInputError> {
    let item = |message: String| PodInputError::Item { index, message };
    let obj = v
        .as_object()
        .ok_or_else(|| item(format!("expected a Pod object, found {}", type_name(v))))?;
    if let Some(kind) = obj.get("kind") {
        match kind.as_str() {
            Some("Pod") => {}
            Some(k) => return Err(item(format!("kind {k:?} is not a Pod"))),
            None => return Err(item("kind: expected a string".into())),
        }
    }
    let meta = obj.get("metadata").and_then(Value::as_object);
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| item("metadata.name: missing".into()))?;
    let namespace = match meta.and_then(|m| m.get("namespace")) {
        None | Some(Value::Null) => "default".to_string(),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => {
            return Err(PodInputError::Pod {
                pod: format!("?/{name}"),
                field: "metadata.namespace".into(),
                message: "expected a non-empty string".into(),
            })
        }
    };
    let key = format!("{namespace}/{name}");
    let pod_err = |field: &str, message: String| PodInputError::Pod {
        pod: key.clone(),
        field: field.to_string(),
        message,
    };
    // Without a uid (hand-written input), the pod is identified by namespace/name: containers
    // are placed by pod uid and container name, so uid-less pods must not share one.
    let uid = match meta.and_then(|m| m.get("uid")) {
        None | Some(Value::Null) => key.clone(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(pod_err(
                "metadata.uid",
                format!("expected a string, found {}", type_name(other)),
            ))
        }
    };
    let annotations = meta
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object);
    let static_or_mirror = annotations.is_some_and(|a| {
        a.contains_key("kubernetes.io/config.mirror")
            || a.get("kubernetes.io/config.source")
                .and_then(Value::as_str)
                .is_some_and(|s| s != "api")
    });

    let empty = Map::new();
    let spec = match obj.get("spec") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(pod_err(
                "spec",
                format!("expected an object, found {}", type_name(other)),
            ))
        }
    };
    let priority = match spec.get("priority") {
        None | Some(Value::Null) => None,
        Some(p) => Some(
            p.as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| {
                    pod_err(
                        "spec.priority",
                        format!("expected a 32-bit integer, found {p}"),
                    )
                })?,
        ),
    };
    let priority_class_name = match spec.get("priorityClassName") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(pod_err(
                "spec.priorityClassName",
                format!("expected a string, found {}", type_name(other)),
            ))
        }
    };
    let resources = match spec.get("resources") {
        None | Some(Value::Null) => None,
        Some(r) => {
            let r = parse_requirements(r, "spec.resources")
                .map_err(|(field, message)| pod_err(&field, message))?;
            (!r.requests.is_empty() || !r.limits.is_empty()).then_some(r)
        }
    };
    let termination_grace_period_seconds = match spec.get("terminationGracePeriodSeconds") {
        None | Some(Value::Null) => Some(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS),
        Some(v) => Some(v.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
            pod_err(
                "spec.terminationGracePeriodSeconds",
                format!("expected a non-negative integer, found {v}"),
            )
        })?),
    };
    let init_containers = parse_containers(&key, spec, "initContainers")?;
    let containers = parse_containers(&key, spec, "containers")?;
    let mut names = BTreeSet::new();
    for c in init_containers.iter().chain(&containers) {
        if !names.insert(c.name.as_str()) {
            return Err(PodInputError::Container {
                pod: key.clone(),
                container: c.name.clone(),
                field: "name".into(),
                message: "duplicate container name".into(),
            });
        }
    }
    Ok(Pod {
        namespace,
        name: name.to_string(),
        uid,
        priority,
        priority_class_name,
        static_or_mirror,
        init_containers,
        containers,
        resources,
        termination_grace_period_seconds,
    })
}

/// `SetDefaults_PodSpec`: `terminationGracePeriodSeconds` defaults to 30.
const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;

fn parse_containers(
    pod: &str,
    spec: &Map<String, Value>,
    list: &str,
) -> Result<Vec<Container>, PodInputError> {
    let items = match spec.get(list) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(PodInputError::Pod {
                pod: pod.to_string(),
                field: format!("spec.{list}"),
                message: format!("expected an array, found {}", type_name(other)),
            })
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let label = item
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("spec.{list}[{i}]"));
        let err = |field: &str, message: String| PodInputError::Container {
            pod: pod.to_string(),
            container: label.clone(),
            field: field.to_string(),
            message,
        };
        let obj = item
            .as_object()
            .ok_or_else(|| err("", format!("expected an object, found {}", type_name(item))))?;
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| err("name", "missing".into()))?;
        let restart_policy = match obj.get("restartPolicy") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(match s.as_str() {
                "Always" => ContainerRestartPolicy::Always,
                "OnFailure" => ContainerRestartPolicy::OnFailure,
                "Never" => ContainerRestartPolicy::Never,
                other => {
                    return Err(err(
                        "restartPolicy",
                        format!("unknown value {other:?} (expected Always, OnFailure or Never)"),
                    ))
                }
            }),
            Some(other) => {
                return Err(err(
                    "restartPolicy",
                    format!("expected a string, found {}", type_name(other)),
                ))
            }
        };
        let Resources { requests, limits } = match obj.get("resources") {
            None | Some(Value::Null) => Resources::default(),
            Some(r) => parse_requirements(r, "resources").map_err(|(f, m)| err(&f, m))?,
        };
        out.push(Container {
            name: name.to_string(),
            requests,
            limits,
            restart_policy,
        });
    }
    Ok(out)
}

/// Parse `{requests, limits}` and apply the limits→requests defaulting. Errors are
/// `(field path, message)`.
fn parse_requirements(v: &Value, at: &str) -> Result<Resources, (String, String)> {
    let obj = v.as_object().ok_or_else(|| {
        (
            at.to_string(),
            format!("expected an object, found {}", type_name(v)),
        )
    })?;
    let requests = parse_list(obj.get("requests"), &format!("{at}.requests"))?;
    let limits = parse_list(obj.get("limits"), &format!("{at}.limits"))?;
    Ok(default_requests(Resources { requests, limits }))
}

/// `SetDefaults_Pod`: every resource with a limit and no request gets the limit as request.
fn default_requests(mut r: Resources) -> Resources {
    if r.requests.cpu_millis.is_none() {
        r.requests.cpu_millis = r.limits.cpu_millis;
    }
    if r.requests.memory_bytes.is_none() {
        r.requests.memory_bytes = r.limits.memory_bytes;
    }
    if r.requests.ephemeral_storage_bytes.is_none() {
        r.requests.ephemeral_storage_bytes = r.limits.ephemeral_storage_bytes;
    }
    for (k, v) in &r.limits.hugepages {
        r.requests.hugepages.entry(*k).or_insert(*v);
    }
    for (k, v) in &r.limits.extended {
        r.requests.extended.entry(k.clone()).or_insert(*v);
    }
    r
}

fn parse_list(v: Option<&Value>, at: &str) -> Result<ResourceList, (String, String)> {
    let mut out = ResourceList::default();
    let obj = match v {
        None | Some(Value::Null) => return Ok(out),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err((
                at.to_string(),
                format!("expected an object, found {}", type_name(other)),
            ))
        }
    };
    for (name, q) in obj {
        let field = format!("{at}.{name}");
        let text = match q {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err((
                    field,
                    format!("expected a quantity, found {}", type_name(other)),
                ))
            }
        };
        let qerr = |e: QuantityError| (field.clone(), e.to_string());
        match name.as_str() {
            "cpu" => out.cpu_millis = Some(quantity::parse_millis(&text).map_err(qerr)?),
            "memory" => out.memory_bytes = Some(quantity::parse_value(&text).map_err(qerr)?),
            "ephemeral-storage" => {
                out.ephemeral_storage_bytes = Some(quantity::parse_value(&text).map_err(qerr)?)
            }
            "storage" => {
                quantity::parse_value(&text).map_err(qerr)?;
            }
            n if n.starts_with("hugepages-") => {
                let size_text = &n["hugepages-".len()..];
                let size = quantity::parse_value(size_text)
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| {
                        (
                            field.clone(),
                            format!("invalid hugepage size {size_text:?}"),
                        )
                    })?;
                let amount = quantity::parse_value(&text).map_err(qerr)?;
                out.hugepages.insert(size, amount);
            }
            n => {
                let amount = quantity::parse_integer(&text).map_err(qerr)?;
                out.extended.insert(n.to_string(), amount);
            }
        }
    }
    Ok(out)
}

/// How a JSON value's type reads in an error message ("a string", "an array", …).
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::qos::{class, QosClass};

    const KUBECTL_JSON: &str = r#"{
      "apiVersion": "v1",
      "kind": "List",
      "items": [
        {
          "apiVersion": "v1", "kind": "Pod",
          "metadata": {"name": "web", "namespace": "shop", "uid": "1111-2222",
                       "annotations": {"kubernetes.io/config.source": "api"}},
          "spec": {
            "priority": 0,
            "initContainers": [
              {"name": "setup", "image": "busybox",
               "resources": {"requests": {"cpu": "1", "memory": "64Mi"},
                             "limits": {"cpu": "1", "memory": "64Mi"}}},
              {"name": "proxy", "restartPolicy": "Always",
               "resources": {"requests": {"cpu": "500m", "memory": "128Mi"},
                             "limits": {"cpu": "500m", "memory": "128Mi"}}}
            ],
            "containers": [
              {"name": "app", "image": "nginx", "ports": [{"containerPort": 80}],
               "resources": {"requests": {"cpu": "2", "memory": "1Gi", "hugepages-2Mi": "512Mi",
                                          "nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"},
                             "limits": {"cpu": "2", "memory": "1Gi", "hugepages-2Mi": "512Mi",
                                        "nvidia.com/gpu": "1"}}}
            ]
          },
          "status": {"phase": "Running", "qosClass": "Guaranteed"}
        },
        {
          "apiVersion": "v1", "kind": "Pod",
          "metadata": {"name": "kube-proxy-x", "namespace": "kube-system",
                       "annotations": {"kubernetes.io/config.mirror": "abc"}},
          "spec": {"priorityClassName": "system-node-critical", "priority": 2000001000,
                   "containers": [{"name": "kube-proxy"}]}
        }
      ]
    }"#;

    #[test]
    fn kubectl_list_json() {
        let pods = parse_pods(KUBECTL_JSON).expect("valid input");
        assert_eq!(pods.len(), 2);
        let web = &pods[0];
        assert_eq!(web.key(), "shop/web");
        assert_eq!(web.uid, "1111-2222");
        assert_eq!(web.priority, Some(0));
        assert!(!web.static_or_mirror);
        assert_eq!(web.init_containers.len(), 2);
        assert!(web.init_containers[1].is_restartable());
        assert!(!web.init_containers[0].is_restartable());
        let app = &web.containers[0];
        assert_eq!(app.requests.cpu_millis, Some(2000));
        assert_eq!(app.limits.memory_bytes, Some(1 << 30));
        assert_eq!(app.limits.hugepages.get(&(2 << 20)), Some(&(512 << 20)));
        assert_eq!(app.requests.extended.get("nvidia.com/gpu"), Some(&1));
        assert_eq!(class(web), QosClass::Guaranteed);
        let kp = &pods[1];
        assert!(kp.static_or_mirror && kp.is_node_critical());
        assert_eq!(class(kp), QosClass::BestEffort);
    }

    #[test]
    fn yaml_single_pod_with_defaults_and_numbers() {
        let y = r#"
apiVersion: v1
kind: Pod
metadata:
  name: lim-only
spec:
  containers:
  - name: c
    resources:
      limits:
        cpu: 2
        memory: 1.5Gi
"#;
        let pods = parse_pods(y).expect("valid yaml");
        assert_eq!(pods.len(), 1);
        let p = &pods[0];
        assert_eq!(p.key(), "default/lim-only");
        assert_eq!(
            p.uid, "default/lim-only",
            "namespace/name stands in for a missing uid"
        );
        let c = &p.containers[0];
        assert_eq!(c.requests.cpu_millis, Some(2000)); // defaulted from the limit
        assert_eq!(c.requests.memory_bytes, Some(1_610_612_736));
        assert_eq!(class(p), QosClass::Guaranteed);
    }

    #[test]
    fn yaml_multi_document_and_array_and_list() {
        let y = "---\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\n\
                 - metadata: {name: b}\n  spec: {containers: [{name: c}]}\n---\n\
                 kind: List\nitems:\n- metadata: {name: c, namespace: x}\n";
        let pods = parse_pods(y).expect("valid yaml");
        let keys: Vec<String> = pods.iter().map(Pod::key).collect();
        assert_eq!(keys, ["default/a", "default/b", "x/c"]);
        let j = r#"[{"metadata":{"name":"a"}},{"kind":"Pod","metadata":{"name":"b"}}]"#;
        assert_eq!(parse_pods(j).expect("valid json").len(), 2);
        let j = r#"{"kind":"PodList","items":[{"metadata":{"name":"a"}}]}"#;
        assert_eq!(parse_pods(j).expect("valid json").len(), 1);
        assert_eq!(parse_pods("").expect("empty").len(), 0);
        assert_eq!(parse_pods("[]").expect("empty").len(), 0);
    }

    #[test]
    fn pod_level_resources() {
        let j = r#"{"metadata":{"name":"p"},"spec":{"resources":{"limits":{"cpu":"1","memory":"1Gi"}},
                  "containers":[{"name":"c"}]}}"#;
        let pods = parse_pods(j).expect("valid");
        let r = pods[0].resources.as_ref().expect("pod-level resources");
        assert_eq!(r.requests.cpu_millis, Some(1000));
        assert_eq!(class(&pods[0]), QosClass::Guaranteed);
    }

    fn err(input: &str) -> String {
        parse_pods(input).expect_err("must fail").to_string()
    }

    #[test]
    fn malformed_inputs() {
        assert_eq!(
            err(
                r#"{"metadata":{"name":"web"},"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"abc"}}}]}}"#
            ),
            r#"pod default/web: container "app": resources.limits.cpu: invalid quantity "abc""#
        );
        assert_eq!(
            err(
                r#"{"metadata":{"name":"web"},"spec":{"initContainers":[{"name":"i","resources":{"requests":{"memory":"-1Gi"}}}]}}"#
            ),
            r#"pod default/web: container "i": resources.requests.memory: quantity "-1Gi" must not be negative"#
        );
        assert_eq!(
            err(
                r#"{"metadata":{"name":"web"},"spec":{"containers":[{"name":"a","resources":{"limits":{"example.com/dev":"0.5"}}}]}}"#
            ),
            r#"pod default/web: container "a": resources.limits.example.com/dev: quantity "0.5" must be a whole number"#
        );
        assert_eq!(
            err(
                r#"{"metadata":{"name":"web"},"spec":{"containers":[{"name":"a","resources":{"limits":{"hugepages-3x":"1Gi"}}}]}}"#
            ),
            r#"pod default/web: container "a": resources.limits.hugepages-3x: invalid hugepage size "3x""#
        );
        assert_eq!(
            err(
                r#"{"metadata":{"name":"web"},"spec":{"containers":[{"name":"a","resources":{"limits":{"cpu":[1]}}}]}}"#
            ),
            r#"pod default/web: container "a": resources.limits.cpu: expected a quantity, found an array"#
        );
        assert_eq!(
            err(
                r#"{"metadata":{"name":"web"},"spec":{"initContainers":[{"name":"a","restartPolicy":"Sometimes"}]}}"#
            ),
            r#"pod default/web: container "a": restartPolicy: unknown value "Sometimes" (expected Always, OnFailure or Never)"#
        );
        assert_eq!(
            err(r#"{"metadata":{"name":"web"},"spec":{"containers":[{"image":"x"}]}}"#),
            r#"pod default/web: container "spec.containers[0]": name: missing"#
        );
        assert_eq!(
            err(r#"{"metadata":{"name":"web"},"spec":{"containers":[{"name":"a"},{"name":"a"}]}}"#),
            r#"pod default/web: container "a": name: duplicate container name"#
        );
        assert_eq!(
            err(r#"{"metadata":{"name":"web"},"spec":{"priority":"high"}}"#),
            r#"pod default/web: spec.priority: expected a 32-bit integer, found "high""#
        );
        assert_eq!(
            err(r#"{"metadata":{"name":"web"},"spec":{"resources":{"requests":{"memory":"1Q"}}}}"#),
            r#"pod default/web: spec.resources.requests.memory: invalid quantity "1Q""#
        );
        assert_eq!(
            err(r#"[{"metadata":{"name":"a"}},{"metadata":{"name":"a"}}]"#),
            "pod default/a: listed twice"
        );
        assert_eq!(
            err(r#"{"kind":"Deployment","metadata":{"name":"d"}}"#),
            r#"item 0: kind "Deployment" is not a Pod"#
        );
        assert_eq!(err(r#"{"spec":{}}"#), "item 0: metadata.name: missing");
        assert_eq!(err("[1]"), "item 0: expected a Pod object, found a number");
        assert!(err(r#"{"metadata": "#).starts_with("invalid json: "));
        assert!(err("a: [b\n").starts_with("invalid yaml: "));
        assert!(err("just text").starts_with("item 0: expected a Pod object"));
    }

    #[test]
    fn pods_without_a_uid_are_told_apart_and_uids_are_unique() {
        // Two hand-written pods without uids used to share the empty uid, so their `main`
        // containers were one container to placement (found by fuzzing `plan`: one CPU granted
        // to both).
        let pods = parse_pods(
            "- metadata: {name: a, namespace: t}\n  spec: {containers: [{name: main}]}\n\
             - metadata: {name: b, namespace: t}\n  spec: {containers: [{name: main}]}\n",
        )
        .expect("valid");
        assert_eq!(pods[0].uid, "t/a");
        assert_eq!(pods[1].uid, "t/b");
        let e = parse_pods(
            "- metadata: {name: a, namespace: t, uid: u1}\n  spec: {containers: [{name: main}]}\n\
             - metadata: {name: b, namespace: t, uid: u1}\n  spec: {containers: [{name: main}]}\n",
        )
        .expect_err("duplicate uid")
        .to_string();
        assert_eq!(e, "pod t/b: metadata.uid \"u1\" is also the uid of pod t/a");
        // A uid-less pod's stand-in cannot collide with a real uid unnoticed either.
        let e = parse_pods(
            "- metadata: {name: a, namespace: t}\n  spec: {containers: [{name: main}]}\n\
             - metadata: {name: b, namespace: t, uid: t/a}\n  spec: {containers: [{name: main}]}\n",
        )
        .expect_err("duplicate uid")
        .to_string();
        assert!(e.contains("\"t/a\" is also the uid of pod t/a"), "{e}");
    }
}
