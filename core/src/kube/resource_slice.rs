//! DRA ResourceSlices (`resource.k8s.io/v1`) → the NUMA node of each device a DRA driver
//! publishes for this node, keyed by what the kubelet's PodResources answer names a claim's
//! device by: (driver, pool, device). Pure: the shell watches the slices
//! (`plugin/src/cluster/resource_slices.rs`), hands each object here as JSON, and resolves the
//! sysfs lookups this module asks for.
//!
//! A device's locality, first found wins:
//! 1. the standard attribute `resource.kubernetes.io/numaNode` (KEP-6072): an `int`, or an
//!    `ints` list (list-type attributes, KEP-5491: the device is equally near each listed node);
//! 2. a driver's own attribute named `numaNode` (`dra.net/numaNode`, or unqualified `numaNode`,
//!    which the API reads in the driver's domain): the same forms; drivers that publish several
//!    such attributes must agree;
//! 3. a PCI address, `resource.kubernetes.io/pciBusID` or a driver's `pciBusID` (a `string`,
//!    `DDDD:BB:DD.F`), for the shell to read `/sys/bus/pci/devices/<address>/numa_node`;
//! 4. a PCIe root, `resource.kubernetes.io/pcieRoot` (`pciDDDD:BB`; a `string`, or `strings`
//!    with one entry), for the shell to read the `numa_node` of a PCI device under
//!    `/sys/devices/<root>/`.
//!
//! A negative node id says no locality (as sysfs' -1). Nothing else is guessed: a device with
//! none of these, or only malformed ones, is [`Locality::Unknown`] with the reason, and the
//! container's device is recorded without a node, saying why.
//!
//! Bad input is a [`SliceError`] naming the slice (and the device and attribute): a slice
//! without a name, driver or pool; a slice of another node (the watch's field selector should
//! make that impossible); an attribute of the wrong type or with several values set; a PCI
//! address or root that is not one (it becomes a sysfs path, so it is checked strictly); a
//! device listed twice. A bad attribute costs only that attribute, a bad device only that device.
//!
//! Pools: as the scheduler, only the slices of a pool's newest generation count
//! (`spec.pool.generation`); a device two current slices list, with different localities, is
//! [`Locality::Unknown`].

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::machine::topology::node_list;

/// KEP-6072's standard NUMA node attribute.
pub const STANDARD_NUMA_NODE: &str = "resource.kubernetes.io/numaNode";
/// The standard PCI address attribute.
pub const STANDARD_PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
/// The standard PCIe root attribute.
pub const STANDARD_PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

/// A DRA device as PodResources names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DraDeviceKey {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

impl fmt::Display for DraDeviceKey {
    /// `<driver>/<pool>/<device>`, the id the device is recorded under.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// Where a device sits, as its attributes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locality {
    /// On this NUMA node (the attribute that says so).
    Numa { node: usize, attribute: String },
    /// Equally near several nodes (an `ints` list): no single node.
    Several {
        nodes: Vec<usize>,
        attribute: String,
    },
    /// No locality (a negative id).
    NoLocality { attribute: String },
    /// To be read from sysfs: the PCI address first, else the PCIe root.
    Sysfs {
        pci_bus_id: Option<String>,
        pcie_root: Option<String>,
    },
    /// Not known: why.
    Unknown(String),
}

/// A ResourceSlice, or one of its parts, that could not be used as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SliceError {
    #[error("a ResourceSlice without metadata.name (ignored)")]
    NoName,
    #[error("ResourceSlice {slice}: {what} (ignored)")]
    Malformed { slice: String, what: String },
    #[error("ResourceSlice {slice}: spec.nodeName is {found:?}, not this node {node:?} (ignored)")]
    WrongNode {
        slice: String,
        found: Option<String>,
        node: String,
    },
    #[error("ResourceSlice {slice}: device #{index} has no name (ignored)")]
    DeviceWithoutName { slice: String, index: usize },
    #[error("ResourceSlice {slice}: device {device} is listed twice (the first is kept)")]
    DuplicateInSlice { slice: String, device: String },
    #[error("ResourceSlice {slice}: device {device}: attribute {attribute}: {why} (not used)")]
    BadAttribute {
        slice: String,
        device: String,
        attribute: String,
        why: String,
    },
    #[error(
        "device {device} is published by ResourceSlices {first} and {second} of the same pool \
         generation with different localities; its numa node is unknown"
    )]
    Conflict {
        device: String,
        first: String,
        second: String,
    },
}

/// One device of a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceDevice {
    pub name: String,
    pub locality: Locality,
}

/// A ResourceSlice of this node, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub name: String,
    pub driver: String,
    pub pool: String,
    pub generation: i64,
    pub devices: Vec<SliceDevice>,
    /// What was wrong inside it (bad attributes, unnamed or repeated devices).
    pub errors: Vec<SliceError>,
}

/// Reads the ResourceSlice `obj` (the API object as JSON) of node `node`: an error for a slice
/// that is not usable at all (see the module docs), else the slice with its devices' localities
/// and the errors inside it. A slice of no particular node (`allNodes`, `nodeSelector`) is
/// [`SliceError::WrongNode`] too: its devices are not attached to this machine.
pub fn parse_slice(obj: &Value, node: &str) -> Result<Slice, SliceError> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or(SliceError::NoName)?
        .to_string();
    let malformed = |what: &str| SliceError::Malformed {
        slice: name.clone(),
        what: what.to_string(),
    };
    let spec = obj.get("spec").ok_or_else(|| malformed("no spec"))?;
    let found = spec.get("nodeName").and_then(Value::as_str);
    if found != Some(node) {
        return Err(SliceError::WrongNode {
            slice: name.clone(),
            found: found.map(str::to_string),
            node: node.to_string(),
        });
    }
    let driver = spec
        .get("driver")
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| malformed("no spec.driver"))?
        .to_string();
    let pool = spec
        .pointer("/pool/name")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| malformed("no spec.pool.name"))?
        .to_string();
    let generation = spec
        .pointer("/pool/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut out = Slice {
        name: name.clone(),
        driver,
        pool,
        generation,
        devices: Vec::new(),
        errors: Vec::new(),
    };
    let devices = match spec.get("devices") {
        None | Some(Value::Null) => return Ok(out),
        Some(Value::Array(d)) => d,
        Some(_) => return Err(malformed("spec.devices is not a list")),
    };
    for (index, d) in devices.iter().enumerate() {
        let Some(dev_name) = d
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            out.errors.push(SliceError::DeviceWithoutName {
                slice: out.name.clone(),
                index,
            });
            continue;
        };
        if out.devices.iter().any(|x| x.name == dev_name) {
            out.errors.push(SliceError::DuplicateInSlice {
                slice: out.name.clone(),
                device: dev_name.to_string(),
            });
            continue;
        }
        let attributes = d.get("attributes").and_then(Value::as_object);
        let locality = locality(
            &out.name,
            dev_name,
            attributes.into_iter().flatten(),
            &mut out.errors,
        );
        out.devices.push(SliceDevice {
            name: dev_name.to_string(),
            locality,
        });
    }
    Ok(out)
}

/// The name of an attribute without its domain (`dra.net/numaNode` → `numaNode`).
fn base_name(key: &str) -> &str {
    key.rsplit_once('/').map_or(key, |(_, b)| b)
}

/// The one value a `DeviceAttribute` holds: its field name and value; why not when it holds
/// none or several.
fn single_value(v: &Value) -> Result<(&str, &Value), String> {
    let Some(map) = v.as_object() else {
        return Err(format!("not an attribute object: {v}"));
    };
    let set: Vec<(&String, &Value)> = map.iter().filter(|(_, x)| !x.is_null()).collect();
    match set.as_slice() {
        [(k, x)] => Ok((k.as_str(), x)),
        [] => Err("no value set".into()),
        _ => Err(format!(
            "several values set ({})",
            set.iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// A numaNode attribute's value → its locality (without the attribute's name).
fn numa_value(v: &Value, attribute: &str) -> Result<Locality, String> {
    let (kind, x) = single_value(v)?;
    let ids: Vec<i64> = match kind {
        "int" => vec![x.as_i64().ok_or_else(|| format!("int is {x}"))?],
        "ints" => x
            .as_array()
            .ok_or_else(|| format!("ints is {x}"))?
            .iter()
            .map(|i| i.as_i64().ok_or_else(|| format!("ints holds {i}")))
            .collect::<Result<_, _>>()?,
        other => {
            return Err(format!(
                "a numa node must be an int or ints, found {other} {x}"
            ))
        }
    };
    let attribute = attribute.to_string();
    if ids.is_empty() {
        return Err("an empty ints list".into());
    }
    if ids.iter().any(|&i| i < 0) {
        return Ok(Locality::NoLocality { attribute });
    }
    let mut nodes: Vec<usize> = ids
        .iter()
        .map(|&i| usize::try_from(i).map_err(|_| format!("{i} is out of range")))
        .collect::<Result<_, _>>()?;
    nodes.sort_unstable();
    nodes.dedup();
    Ok(match nodes.as_slice() {
        [one] => Locality::Numa {
            node: *one,
            attribute,
        },
        _ => Locality::Several { nodes, attribute },
    })
}

/// A string attribute's one string (`string`, or `strings` with one entry).
fn one_string(v: &Value) -> Result<&str, String> {
    let (kind, x) = single_value(v)?;
    match kind {
        "string" => x.as_str().ok_or_else(|| format!("string is {x}")),
        "strings" => match x.as_array().map(Vec::as_slice) {
            Some([one]) => one.as_str().ok_or_else(|| format!("strings holds {one}")),
            _ => Err(format!("strings must hold exactly one entry, found {x}")),
        },
        other => Err(format!("expected a string, found {other} {x}")),
    }
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A PCI address `DDDD:BB:DD.F` (lower-cased), or why not.
pub fn pci_bus_id(s: &str) -> Result<String, String> {
    let ok = match s.split(':').collect::<Vec<_>>().as_slice() {
        [domain, bus, devfn] => match devfn.split_once('.') {
            Some((dev, func)) => {
                is_hex(domain, 4)
                    && is_hex(bus, 2)
                    && is_hex(dev, 2)
                    && func.len() == 1
                    && func.bytes().all(|b| (b'0'..=b'7').contains(&b))
            }
            None => false,
        },
        _ => false,
    };
    if ok {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!("{s:?} is not a PCI address (DDDD:BB:DD.F)"))
    }
}

/// A PCIe root `pciDDDD:BB` (lower-cased), or why not.
pub fn pcie_root(s: &str) -> Result<String, String> {
    let ok = s
        .strip_prefix("pci")
        .and_then(|r| r.split_once(':'))
        .is_some_and(|(domain, bus)| is_hex(domain, 4) && is_hex(bus, 2));
    if ok {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!("{s:?} is not a PCIe root (pciDDDD:BB)"))
    }
}

/// The locality of device `device` of slice `slice` from its attributes (see the module docs);
/// each attribute that is not usable is pushed to `errors`.
fn locality<'a>(
    slice: &str,
    device: &str,
    attributes: impl Iterator<Item = (&'a String, &'a Value)>,
    errors: &mut Vec<SliceError>,
) -> Locality {
    let mut bad = |attribute: &str, why: String| {
        errors.push(SliceError::BadAttribute {
            slice: slice.to_string(),
            device: device.to_string(),
            attribute: attribute.to_string(),
            why,
        })
    };
    let mut standard = None;
    let mut vendor: Vec<Locality> = Vec::new();
    let (mut std_bus, mut vendor_bus, mut root) = (None, None, None);
    for (key, value) in attributes {
        match (key.as_str(), base_name(key)) {
            (STANDARD_NUMA_NODE, _) => match numa_value(value, key) {
                Ok(l) => standard = Some(l),
                Err(why) => bad(key, why),
            },
            (_, "numaNode") => match numa_value(value, key) {
                Ok(l) => vendor.push(l),
                Err(why) => bad(key, why),
            },
            (STANDARD_PCI_BUS_ID, _) => match one_string(value).and_then(pci_bus_id) {
                Ok(a) => std_bus = Some(a),
                Err(why) => bad(key, why),
            },
            (_, "pciBusID") => match one_string(value).and_then(pci_bus_id) {
                Ok(a) => vendor_bus = vendor_bus.or(Some(a)),
                Err(why) => bad(key, why),
            },
            (STANDARD_PCIE_ROOT, _) => match one_string(value).and_then(pcie_root) {
                Ok(r) => root = Some(r),
                Err(why) => bad(key, why),
            },
            _ => {}
        }
    }
    if let Some(l) = standard {
        return l;
    }
    if let Some(first) = vendor.first() {
        if vendor.iter().all(|l| same_place(l, first)) {
            return first.clone();
        }
        return Locality::Unknown(format!(
            "its numaNode attributes disagree ({})",
            vendor.iter().map(describe).collect::<Vec<_>>().join("; ")
        ));
    }
    let pci_bus_id = std_bus.or(vendor_bus);
    if pci_bus_id.is_some() || root.is_some() {
        return Locality::Sysfs {
            pci_bus_id,
            pcie_root: root,
        };
    }
    Locality::Unknown(format!(
        "its ResourceSlice {slice} has no usable {STANDARD_NUMA_NODE}, numaNode, pciBusID or \
         {STANDARD_PCIE_ROOT} attribute"
    ))
}

/// Whether two localities name the same place (whatever attribute said it).
fn same_place(a: &Locality, b: &Locality) -> bool {
    match (a, b) {
        (Locality::Numa { node: x, .. }, Locality::Numa { node: y, .. }) => x == y,
        (Locality::Several { nodes: x, .. }, Locality::Several { nodes: y, .. }) => x == y,
        (Locality::NoLocality { .. }, Locality::NoLocality { .. }) => true,
        _ => a == b,
    }
}

/// `numa 1 (dra.net/numaNode)`.
pub fn describe(l: &Locality) -> String {
    match l {
        Locality::Numa { node, attribute } => format!("numa {node} ({attribute})"),
        Locality::Several { nodes, attribute } => {
            format!("numa nodes {} ({attribute})", node_list(nodes))
        }
        Locality::NoLocality { attribute } => format!("no numa locality ({attribute})"),
        Locality::Sysfs {
            pci_bus_id,
            pcie_root,
        } => match (pci_bus_id, pcie_root) {
            (Some(a), _) => format!("pci device {a} (sysfs)"),
            (None, Some(r)) => format!("pcie root {r} (sysfs)"),
            (None, None) => "sysfs".into(),
        },
        Locality::Unknown(why) => format!("unknown: {why}"),
    }
}

/// A device's locality and the slice it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indexed {
    pub slice: String,
    pub locality: Locality,
}

/// Every device of `slices` → its locality: only the newest generation of each (driver, pool)
/// counts; a device two current slices list with different localities is
/// [`Locality::Unknown`] and a [`SliceError::Conflict`].
pub fn index<'a>(
    slices: impl IntoIterator<Item = &'a Slice>,
) -> (BTreeMap<DraDeviceKey, Indexed>, Vec<SliceError>) {
    let slices: Vec<&Slice> = slices.into_iter().collect();
    let mut newest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for s in &slices {
        let g = newest.entry((&s.driver, &s.pool)).or_insert(s.generation);
        *g = (*g).max(s.generation);
    }
    let mut out: BTreeMap<DraDeviceKey, Indexed> = BTreeMap::new();
    let mut errors = Vec::new();
    let mut ordered = slices;
    ordered.sort_by(|a, b| a.name.cmp(&b.name));
    for s in ordered {
        if newest.get(&(s.driver.as_str(), s.pool.as_str())) != Some(&s.generation) {
            continue;
        }
        for d in &s.devices {
            let key = DraDeviceKey {
                driver: s.driver.clone(),
                pool: s.pool.clone(),
                device: d.name.clone(),
            };
            match out.get_mut(&key) {
                None => {
                    out.insert(
                        key,
                        Indexed {
                            slice: s.name.clone(),
                            locality: d.locality.clone(),
                        },
                    );
                }
                Some(first) if same_place(&first.locality, &d.locality) => {}
                Some(first) => {
                    errors.push(SliceError::Conflict {
                        device: key.to_string(),
                        first: first.slice.clone(),
                        second: s.name.clone(),
                    });
                    first.locality = Locality::Unknown(format!(
                        "ResourceSlices {} and {} disagree on it",
                        first.slice, s.name
                    ));
                }
            }
        }
    }
    (out, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, node: &str, gen: i64, devices: Value) -> Value {
        json!({
            "metadata": {"name": name},
            "spec": {"driver": "gpu.example.com", "nodeName": node,
                     "pool": {"name": "node-a", "generation": gen, "resourceSliceCount": 1},
                     "devices": devices}
        })
    }

    fn one(attributes: Value) -> (Locality, Vec<SliceError>) {
        let s = parse_slice(
            &slice(
                "s",
                "n",
                1,
                json!([{"name": "gpu-0", "attributes": attributes}]),
            ),
            "n",
        )
        .expect("a usable slice");
        (s.devices[0].locality.clone(), s.errors)
    }

    fn numa(node: usize, attribute: &str) -> Locality {
        Locality::Numa {
            node,
            attribute: attribute.into(),
        }
    }

    #[test]
    fn the_standard_attribute_wins_then_a_drivers_numa_node_then_pci() {
        let (l, e) = one(json!({
            "resource.kubernetes.io/numaNode": {"int": 1},
            "dra.net/numaNode": {"int": 0},
            "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}
        }));
        assert_eq!((l, e), (numa(1, STANDARD_NUMA_NODE), vec![]));
        let (l, _) = one(json!({"dra.net/numaNode": {"int": 1}, "model": {"string": "x"}}));
        assert_eq!(l, numa(1, "dra.net/numaNode"));
        // Unqualified: the driver's own domain.
        let (l, _) = one(json!({"numaNode": {"int": 0}}));
        assert_eq!(l, numa(0, "numaNode"));
        let (l, _) = one(json!({
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:3A"},
            "gpu.example.com/pciBusID": {"string": "0000:3B:00.0"}
        }));
        assert_eq!(
            l,
            Locality::Sysfs {
                pci_bus_id: Some("0000:3b:00.0".into()),
                pcie_root: Some("pci0000:3a".into())
            }
        );
        let (l, _) = one(json!({"resource.kubernetes.io/pcieRoot": {"strings": ["pci0000:00"]}}));
        assert_eq!(
            l,
            Locality::Sysfs {
                pci_bus_id: None,
                pcie_root: Some("pci0000:00".into())
            }
        );
    }

    #[test]
    fn lists_negative_ids_and_nothing_are_not_guessed() {
        let (l, _) = one(json!({STANDARD_NUMA_NODE: {"ints": [1]}}));
        assert_eq!(l, numa(1, STANDARD_NUMA_NODE));
        let (l, _) = one(json!({STANDARD_NUMA_NODE: {"ints": [1, 0]}}));
        assert_eq!(
            l,
            Locality::Several {
                nodes: vec![0, 1],
                attribute: STANDARD_NUMA_NODE.into()
            }
        );
        let (l, _) = one(json!({STANDARD_NUMA_NODE: {"int": -1}}));
        assert!(matches!(l, Locality::NoLocality { .. }), "{l:?}");
        let (l, e) = one(json!({"model": {"string": "a100"}}));
        assert!(
            matches!(&l, Locality::Unknown(why) if why.contains("ResourceSlice s has no usable")),
            "{l:?}"
        );
        assert!(e.is_empty());
        let (l, _) = one(json!({"a.io/numaNode": {"int": 0}, "b.io/numaNode": {"int": 1}}));
        assert!(
            matches!(&l, Locality::Unknown(why) if why.contains("disagree")),
            "{l:?}"
        );
    }

    #[test]
    fn malformed_attributes_are_named_and_the_next_source_is_used() {
        let (l, e) = one(json!({
            STANDARD_NUMA_NODE: {"string": "1"},
            "dra.net/numaNode": {"int": 1, "string": "1"},
            "resource.kubernetes.io/pciBusID": {"string": "../../../etc"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"}
        }));
        assert_eq!(
            l,
            Locality::Sysfs {
                pci_bus_id: None,
                pcie_root: Some("pci0000:00".into())
            }
        );
        let text: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(text.iter().any(|t| t.contains(
            "ResourceSlice s: device gpu-0: attribute resource.kubernetes.io/numaNode: a numa node must be an int or ints, found string \"1\""
        )), "{text:?}");
        assert!(
            text.iter()
                .any(|t| t.contains("several values set (int, string)")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|t| t.contains("is not a PCI address")),
            "{text:?}"
        );
        for bad in [
            json!(7),
            json!({}),
            json!({"ints": []}),
            json!({"bool": true}),
            json!({"ints": ["0"]}),
        ] {
            let (l, e) = one(json!({STANDARD_NUMA_NODE: bad}));
            assert!(matches!(l, Locality::Unknown(_)), "{l:?}");
            assert_eq!(e.len(), 1, "{e:?}");
        }
        for bad in [
            "pci0000:3g",
            "0000:3b:00",
            "0000:3b:00.8",
            "/sys/x",
            "pci0000:00/../..",
        ] {
            assert!(pci_bus_id(bad).is_err() && pcie_root(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unusable_slices_are_errors_naming_them() {
        assert_eq!(
            parse_slice(&json!({"spec": {}}), "n"),
            Err(SliceError::NoName)
        );
        let wrong = parse_slice(&slice("s", "other", 1, json!([])), "n").unwrap_err();
        assert_eq!(
            wrong.to_string(),
            "ResourceSlice s: spec.nodeName is Some(\"other\"), not this node \"n\" (ignored)"
        );
        let all_nodes = json!({"metadata": {"name": "net"},
            "spec": {"driver": "d", "allNodes": true, "pool": {"name": "p"}}});
        assert!(matches!(
            parse_slice(&all_nodes, "n"),
            Err(SliceError::WrongNode { found: None, .. })
        ));
        let no_driver =
            json!({"metadata": {"name": "s"}, "spec": {"nodeName": "n", "pool": {"name": "p"}}});
        assert_eq!(
            parse_slice(&no_driver, "n").unwrap_err().to_string(),
            "ResourceSlice s: no spec.driver (ignored)"
        );
        let bad_devices = json!({"metadata": {"name": "s"},
            "spec": {"nodeName": "n", "driver": "d", "pool": {"name": "p"}, "devices": {"a": 1}}});
        assert!(parse_slice(&bad_devices, "n").is_err());
    }

    #[test]
    fn duplicate_devices_and_pool_generations() {
        let s = parse_slice(
            &slice(
                "s",
                "n",
                1,
                json!([
                    {"name": "gpu-0", "attributes": {STANDARD_NUMA_NODE: {"int": 0}}},
                    {"name": "gpu-0", "attributes": {STANDARD_NUMA_NODE: {"int": 1}}},
                    {"attributes": {}}
                ]),
            ),
            "n",
        )
        .expect("usable");
        assert_eq!(s.devices.len(), 1);
        assert_eq!(s.devices[0].locality, numa(0, STANDARD_NUMA_NODE));
        let text: Vec<String> = s.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "ResourceSlice s: device gpu-0 is listed twice (the first is kept)",
                "ResourceSlice s: device #2 has no name (ignored)"
            ]
        );

        let key = |d: &str| DraDeviceKey {
            driver: "gpu.example.com".into(),
            pool: "node-a".into(),
            device: d.into(),
        };
        let dev =
            |n: usize| json!([{"name": "gpu-0", "attributes": {STANDARD_NUMA_NODE: {"int": n}}}]);
        let old = parse_slice(&slice("old", "n", 1, dev(0)), "n").expect("usable");
        let new = parse_slice(&slice("new", "n", 2, dev(1)), "n").expect("usable");
        let (idx, errors) = index([&old, &new]);
        assert!(errors.is_empty());
        assert_eq!(idx[&key("gpu-0")].locality, numa(1, STANDARD_NUMA_NODE));
        assert_eq!(idx[&key("gpu-0")].slice, "new");

        let other = parse_slice(&slice("other", "n", 2, dev(0)), "n").expect("usable");
        let (idx, errors) = index([&new, &other]);
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["device gpu.example.com/node-a/gpu-0 is published by ResourceSlices new and other of the same pool generation with different localities; its numa node is unknown"]
        );
        assert!(matches!(idx[&key("gpu-0")].locality, Locality::Unknown(_)));
        // The same device twice with the same locality is no conflict.
        let again = parse_slice(&slice("again", "n", 2, dev(1)), "n").expect("usable");
        let (_, errors) = index([&new, &again]);
        assert!(errors.is_empty());
    }

    #[test]
    fn arbitrary_json_never_panics() {
        for v in [
            json!(null),
            json!([]),
            json!("x"),
            json!({"metadata": 1}),
            json!({"metadata": {"name": "s"}, "spec": {"nodeName": "n", "driver": "d", "pool": {"name": "p"},
                         "devices": [1, {"name": 2}, {"name": "x", "attributes": [1]},
                                     {"name": "y", "attributes": {"numaNode": null}}]}}),
        ] {
            let _ = parse_slice(&v, "n");
        }
    }
}
