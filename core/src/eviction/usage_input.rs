//! Parsing the per-pod usage given to `topolet rank --usage`.
//!
//! The input is a JSON object mapping `"namespace/name"` to
//! `{"memory_working_set": "199Mi", "processes": 10, "disk": "1Gi", "inodes": 100}`. Each value is a
//! Kubernetes quantity string or a plain non-negative number; a missing field is 0. Unknown fields
//! and malformed keys are errors naming the entry. A pod absent from the object has no statistics
//! (the kubelet ranks such pods first).

use serde_json::Value;

use crate::eviction::rank::{PodUsage, UsageByPod};
use crate::kube::pod_input::type_name;
use crate::kube::quantity;

/// A usage input problem, naming the entry and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageInputError {
    #[error("invalid json: {0}")]
    Json(String),
    #[error("expected an object mapping \"namespace/name\" to usage, found {0}")]
    NotAnObject(&'static str),
    #[error("{entry:?}: {message}")]
    Entry { entry: String, message: String },
}

fn amount(v: &Value) -> Result<u64, String> {
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(n) => Ok(n),
            None => quantity::parse_value(&n.to_string()).map_err(|e| e.to_string()),
        },
        Value::String(s) => quantity::parse_value(s).map_err(|e| e.to_string()),
        other => Err(format!(
            "expected a quantity or a number, found {}",
            type_name(other)
        )),
    }
}

/// Parse the `--usage` JSON (see the module docs).
pub fn parse_usage(text: &str) -> Result<UsageByPod, UsageInputError> {
    let v: Value = serde_json::from_str(text).map_err(|e| UsageInputError::Json(e.to_string()))?;
    let Value::Object(entries) = v else {
        return Err(UsageInputError::NotAnObject(type_name(&v)));
    };
    let mut out = UsageByPod::new();
    for (key, value) in &entries {
        let entry_err = |message: String| UsageInputError::Entry {
            entry: key.clone(),
            message,
        };
        match key.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {}
            _ => return Err(entry_err("key must be \"namespace/name\"".into())),
        }
        let Value::Object(fields) = value else {
            return Err(entry_err(format!(
                "expected an object, found {}",
                type_name(value)
            )));
        };
        let mut usage = PodUsage::default();
        for (field, v) in fields {
            let slot = match field.as_str() {
                "memory_working_set" => &mut usage.memory_working_set,
                "processes" => &mut usage.processes,
                "disk" => &mut usage.disk,
                "inodes" => &mut usage.inodes,
                other => {
                    return Err(entry_err(format!(
                    "unknown field {other:?} (known: memory_working_set, processes, disk, inodes)"
                )))
                }
            };
            *slot = amount(v).map_err(|m| entry_err(format!("{field}: {m}")))?;
        }
        out.insert(key.clone(), usage);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quantities_and_numbers() {
        let u = parse_usage(
            r#"{"default/a": {"memory_working_set": "199Mi", "processes": 10, "disk": "1Gi", "inodes": 100},
                "kube-system/b": {"processes": "2k"}, "x/c": {}}"#,
        )
        .unwrap();
        assert_eq!(
            u["default/a"],
            PodUsage {
                memory_working_set: 199 << 20,
                processes: 10,
                disk: 1 << 30,
                inodes: 100
            }
        );
        assert_eq!(u["kube-system/b"].processes, 2000);
        assert_eq!(u["x/c"], PodUsage::default());
    }

    #[test]
    fn errors_name_the_entry() {
        for (text, needle) in [
            ("[]", "found an array"),
            ("{", "invalid json"),
            (r#"{"web": {}}"#, r#""web": key must be"#),
            (r#"{"a/b/c": {}}"#, r#""a/b/c": key must be"#),
            (r#"{"a/b": 3}"#, r#""a/b": expected an object"#),
            (
                r#"{"a/b": {"memory": "1Gi"}}"#,
                r#""a/b": unknown field "memory""#,
            ),
            (
                r#"{"a/b": {"disk": "lots"}}"#,
                r#""a/b": disk: invalid quantity "lots""#,
            ),
            (r#"{"a/b": {"processes": -1}}"#, r#""a/b": processes:"#),
            (r#"{"a/b": {"inodes": true}}"#, r#""a/b": inodes: expected"#),
        ] {
            let err = parse_usage(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
