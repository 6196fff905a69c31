//! Topology discovery from a sysfs tree: reads the standard CPU, cache, NUMA-node and PCI files
//! under a caller-chosen root (normally `/sys`) into a [`RawMachine`], and builds the validated
//! [`Topology`] from it.
//!
//! Files read, all relative to the root:
//! - `devices/system/cpu/online` (required);
//! - per online CPU `cpuN/topology/{physical_package_id,core_id}` (required) and
//!   `{die_id,thread_siblings_list}` (optional); `physical_package_id` -1 (some arm64 kernels)
//!   is read as package 0, `die_id` -1 (every non-x86 kernel) as no die;
//! - per online CPU `cpuN/cache/indexK/{level,id,shared_cpu_list}`: the first index whose `level`
//!   is 3 is the L3 (level-3 caches are unified on every architecture Linux supports, so `type`
//!   is not read); no `cache` dir or no level-3 index means no L3 information; `id` is optional;
//! - `devices/system/node/online`, and per online node `nodeN/cpulist`, `nodeN/meminfo` (the
//!   `Node N MemTotal: X kB` line) and `nodeN/distance` (all required once the `node` dir exists),
//!   plus `nodeN/hugepages/hugepages-<size>kB/nr_hugepages` when the `hugepages` dir exists;
//! - `bus/pci/devices/*/numa_node` (absent dir: no devices; absent file or -1: locality unknown).
//!
//! Offline CPUs (not in `cpu/online`) are never read, so their `cpuN/` dirs may be absent. A kernel
//! without NUMA (no `devices/system/node` dir) yields no nodes, and [`Topology::build`] then makes
//! one node 0 of every CPU whose memory is the machine's capacity below (or the caller's, with
//! [`discover_with_memory`]).
//!
//! The machine's memory capacity ([`Topology::memory_capacity`]) is the kubelet's: cadvisor's
//! `MachineInfo.MemoryCapacity`, `MemTotal` of `/proc/meminfo` in kB × 1024 (not the sum of the
//! nodes' `MemTotal`, which is smaller on some machines). Where it is read from
//! ([`capacity_source`]): `<root>/proc/meminfo` when the tree has one (a captured or test tree);
//! otherwise the host's `/proc/meminfo` when the tree is the running machine's (`topolet run`
//! always, `plan` and `config check` when the root is `/sys`); otherwise (a captured tree without
//! it) the sum of the nodes' `MemTotal`.
//!
//! Every missing required file or malformed value is a [`SysfsError`] naming the path and the
//! problem; nothing here panics on input.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::{
    Device, RawCpu, RawMachine, RawNode, Topology, TopologyError,
};

/// A sysfs file that is missing, unreadable or malformed.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("{}: missing", path.display())]
    Missing { path: PathBuf },
    #[error("{}: cannot read: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
}

impl SysfsError {
    /// The file (or directory) at fault.
    pub fn path(&self) -> &Path {
        match self {
            SysfsError::Missing { path }
            | SysfsError::Unreadable { path, .. }
            | SysfsError::Malformed { path, .. } => path,
        }
    }

    fn malformed(path: &Path, reason: impl Into<String>) -> Self {
        SysfsError::Malformed {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// Why discovery failed: a bad file, or files that are each fine but inconsistent together.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    #[error("{}: inconsistent topology: {source}", root.display())]
    Topology {
        root: PathBuf,
        #[source]
        source: TopologyError,
    },
}

/// Reads the machine under `root` (e.g. `/sys`); without a node dir the fallback memory is 0, and
/// the capacity is left to the caller (see [`capacity_source`]).
pub fn read_machine(root: &Path) -> Result<RawMachine, SysfsError> {
    let cpus = read_cpus(root)?;
    let nodes = read_nodes(root)?;
    let devices = read_devices(root)?;
    Ok(RawMachine {
        cpus,
        nodes,
        fallback_memory_bytes: 0,
        memory_capacity_bytes: None,
        devices,
    })
}

/// The host's meminfo: the kubelet's (cadvisor's) source of the node's memory capacity.
pub const PROC_MEMINFO: &str = "/proc/meminfo";

/// Where the memory capacity of the machine under `root` comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapacitySource {
    /// `MemTotal` of this meminfo file.
    Meminfo(PathBuf),
    /// The sum of the nodes' `MemTotal` (a captured tree without `proc/meminfo`).
    NodeSum,
}

/// The capacity source for the tree at `root`: `<root>/proc/meminfo` if it exists; else
/// [`PROC_MEMINFO`] when `live` (the tree is this machine's, as for `topolet run` whatever its
/// `--sysfs-root`, e.g. the DaemonSet's `/host/sys`) or when `root` is `/sys`; else the sum of
/// the nodes.
pub fn capacity_source(root: &Path, live: bool) -> CapacitySource {
    let inside = root.join("proc/meminfo");
    if inside.is_file() {
        return CapacitySource::Meminfo(inside);
    }
    let is_sys =
        root == Path::new("/sys") || fs::canonicalize(root).is_ok_and(|p| p == Path::new("/sys"));
    if live || is_sys {
        CapacitySource::Meminfo(PathBuf::from(PROC_MEMINFO))
    } else {
        CapacitySource::NodeSum
    }
}

/// Reads and validates the machine under `root`, its capacity from [`capacity_source`] (`live`
/// false: the host's `/proc/meminfo` only when `root` is `/sys`). For `topolet plan`, `config
/// check` and tests.
pub fn discover(root: &Path) -> Result<Topology, DiscoveryError> {
    discover_from(root, capacity_source(root, false), None)
}

/// [`discover`] of the running machine (`topolet run`): the capacity is the host's
/// `/proc/meminfo` unless the tree carries its own `proc/meminfo`.
pub fn discover_live(root: &Path) -> Result<Topology, DiscoveryError> {
    discover_from(root, capacity_source(root, true), None)
}

/// Like [`discover`], with `fallback_memory_bytes` as the memory of the implicit node 0 when the
/// tree has no `devices/system/node` dir (ignored otherwise; `None`: the capacity, or 0 without).
pub fn discover_with_memory(
    root: &Path,
    fallback_memory_bytes: Option<u64>,
) -> Result<Topology, DiscoveryError> {
    discover_from(root, capacity_source(root, false), fallback_memory_bytes)
}

/// Reads the machine under `root` with its capacity from `capacity`.
pub fn discover_from(
    root: &Path,
    capacity: CapacitySource,
    fallback_memory_bytes: Option<u64>,
) -> Result<Topology, DiscoveryError> {
    let mut raw = read_machine(root)?;
    raw.memory_capacity_bytes = match capacity {
        CapacitySource::Meminfo(path) => Some(read_meminfo_total(&path)?),
        CapacitySource::NodeSum => None,
    };
    raw.fallback_memory_bytes = fallback_memory_bytes
        .or(raw.memory_capacity_bytes)
        .unwrap_or(0);
    Topology::build(&raw).map_err(|source| DiscoveryError::Topology {
        root: root.to_path_buf(),
        source,
    })
}

/// `MemTotal` of a `/proc/meminfo`-format file (`MemTotal: X kB`), in bytes, as cadvisor's
/// `GetMachineMemoryCapacity` reads it (the first `MemTotal:` line, kB × 1024).
pub fn read_meminfo_total(path: &Path) -> Result<u64, SysfsError> {
    let text = read(path)?;
    for line in text.lines() {
        let mut tokens = line.split_whitespace();
        if tokens.next() != Some("MemTotal:") {
            continue;
        }
        return kb_to_bytes(path, tokens.next(), tokens.next(), line);
    }
    Err(SysfsError::malformed(path, "no \"MemTotal:\" line"))
}

// ---- CPUs -------------------------------------------------------------------------------------

fn read_cpus(root: &Path) -> Result<Vec<RawCpu>, SysfsError> {
    let cpu_dir = root.join("devices/system/cpu");
    let online_path = cpu_dir.join("online");
    let online = parse_list(&online_path, &read(&online_path)?, "cpu")?;
    let mut cpus = Vec::with_capacity(online.len());
    for id in online.iter() {
        cpus.push(read_cpu(&cpu_dir.join(format!("cpu{id}")), id)?);
    }
    Ok(cpus)
}

fn read_cpu(dir: &Path, id: usize) -> Result<RawCpu, SysfsError> {
    let topo = dir.join("topology");
    let path = topo.join("physical_package_id");
    let Some(text) = read_optional(&path)? else {
        // Name the directory when the whole of it is missing (stat only on this error path).
        return Err(if topo.is_dir() {
            SysfsError::Missing { path }
        } else {
            SysfsError::malformed(
                &topo,
                format!("missing, though cpu {id} is listed as online"),
            )
        });
    };
    let package = match parse_int(&path, &text)? {
        -1 => 0,
        p => to_index(&path, p)?,
    };
    let path = topo.join("core_id");
    let core_id = to_index(&path, parse_int(&path, &read(&path)?)?)?;
    let path = topo.join("die_id");
    let die = match read_optional(&path)? {
        None => None,
        Some(text) => match parse_int(&path, &text)? {
            -1 => None,
            d => Some(to_index(&path, d)?),
        },
    };
    let path = topo.join("thread_siblings_list");
    let siblings = match read_optional(&path)? {
        None => None,
        Some(text) => Some(parse_list(&path, &text, "cpu")?),
    };
    Ok(RawCpu {
        id,
        package,
        die,
        core_id,
        siblings,
        l3: read_l3(&dir.join("cache"))?,
    })
}

/// The level-3 cache of one CPU: (`id`, `shared_cpu_list`), if the kernel reports one.
fn read_l3(cache: &Path) -> Result<Option<(Option<usize>, CpuSet)>, SysfsError> {
    let entries = match fs::read_dir(cache) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SysfsError::Unreadable {
                path: cache.to_path_buf(),
                source,
            })
        }
    };
    let mut indices = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| SysfsError::Unreadable {
            path: cache.to_path_buf(),
            source,
        })?;
        let name = entry.file_name();
        let Some(k) = name
            .to_str()
            .and_then(|n| n.strip_prefix("index"))
            .and_then(|k| k.parse::<usize>().ok())
        else {
            continue; // `uevent`, `power`, …
        };
        indices.push(k);
    }
    indices.sort_unstable();
    for k in indices {
        let index = cache.join(format!("index{k}"));
        let path = index.join("level");
        if parse_int(&path, &read(&path)?)? != 3 {
            continue;
        }
        let path = index.join("shared_cpu_list");
        let shared = parse_list(&path, &read(&path)?, "cpu")?;
        let path = index.join("id");
        let id = match read_optional(&path)? {
            None => None,
            Some(text) => Some(to_index(&path, parse_int(&path, &text)?)?),
        };
        return Ok(Some((id, shared)));
    }
    Ok(None)
}

// ---- NUMA nodes -------------------------------------------------------------------------------

fn read_nodes(root: &Path) -> Result<Vec<RawNode>, SysfsError> {
    let node_dir = root.join("devices/system/node");
    if !node_dir.is_dir() {
        return Ok(Vec::new());
    }
    let online_path = node_dir.join("online");
    let online = parse_list(&online_path, &read(&online_path)?, "node")?;
    let count = online.len();
    let mut owner: BTreeMap<usize, usize> = BTreeMap::new(); // cpu → node
    let mut nodes = Vec::with_capacity(count);
    for id in online.iter() {
        let dir = node_dir.join(format!("node{id}"));

        let path = dir.join("cpulist");
        let cpus = parse_list(&path, &read(&path)?, "cpu")?;
        for cpu in cpus.iter() {
            if let Some(first) = owner.insert(cpu, id) {
                return Err(SysfsError::malformed(
                    &path,
                    format!("cpu {cpu} is also listed by node {first}"),
                ));
            }
        }

        let path = dir.join("meminfo");
        let memory_bytes = parse_node_meminfo(&path, &read(&path)?, id)?;

        let path = dir.join("distance");
        let text = read(&path)?;
        let distances = text
            .split_whitespace()
            .map(|t| {
                t.parse::<u32>().map_err(|_| {
                    SysfsError::malformed(&path, format!("expected an integer, found {t:?}"))
                })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        if distances.len() != count {
            return Err(SysfsError::malformed(
                &path,
                format!(
                    "expected {count} distances (one per online node {online}), found {} in {:?}",
                    distances.len(),
                    text.trim()
                ),
            ));
        }

        nodes.push(RawNode {
            id,
            cpus,
            memory_bytes,
            hugepages: read_hugepages(&dir.join("hugepages"))?,
            distances,
        });
    }
    Ok(nodes)
}

/// The `Node N MemTotal: X kB` line of a node's meminfo, in bytes.
fn parse_node_meminfo(path: &Path, text: &str, node: usize) -> Result<u64, SysfsError> {
    for line in text.lines() {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if tokens.get(2) != Some(&"MemTotal:") {
            continue;
        }
        if tokens[0] != "Node" || tokens[1] != node.to_string() {
            return Err(SysfsError::malformed(
                path,
                format!("expected \"Node {node} MemTotal: <n> kB\", found {line:?}"),
            ));
        }
        return kb_to_bytes(path, tokens.get(3).copied(), tokens.get(4).copied(), line);
    }
    Err(SysfsError::malformed(
        path,
        format!("no \"Node {node} MemTotal:\" line"),
    ))
}

fn kb_to_bytes(
    path: &Path,
    value: Option<&str>,
    unit: Option<&str>,
    line: &str,
) -> Result<u64, SysfsError> {
    let bad = || SysfsError::malformed(path, format!("expected \"<n> kB\" in {line:?}"));
    if unit != Some("kB") {
        return Err(bad());
    }
    value
        .and_then(|v| v.parse::<u64>().ok())
        .and_then(|kb| kb.checked_mul(1024))
        .ok_or_else(bad)
}

/// `hugepages-<size>kB/nr_hugepages` under a node's `hugepages` dir: page size in bytes → count.
fn read_hugepages(dir: &Path) -> Result<BTreeMap<u64, u64>, SysfsError> {
    let mut pages = BTreeMap::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(pages),
        Err(source) => {
            return Err(SysfsError::Unreadable {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    for entry in entries {
        let entry = entry.map_err(|source| SysfsError::Unreadable {
            path: dir.to_path_buf(),
            source,
        })?;
        let sub = entry.path();
        let name = entry.file_name();
        let size_bytes = name
            .to_str()
            .and_then(|n| n.strip_prefix("hugepages-"))
            .and_then(|n| n.strip_suffix("kB"))
            .and_then(|kb| kb.parse::<u64>().ok())
            .and_then(|kb| kb.checked_mul(1024))
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                SysfsError::malformed(&sub, "expected a directory named hugepages-<size>kB")
            })?;
        let path = sub.join("nr_hugepages");
        let count = parse_uint(&path, &read(&path)?)?;
        pages.insert(size_bytes, count);
    }
    Ok(pages)
}

// ---- PCI devices ------------------------------------------------------------------------------

fn read_devices(root: &Path) -> Result<Vec<Device>, SysfsError> {
    let dir = root.join("bus/pci/devices");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(SysfsError::Unreadable { path: dir, source }),
    };
    let mut devices = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| SysfsError::Unreadable {
            path: dir.clone(),
            source,
        })?;
        let sub = entry.path();
        let Some(address) = entry.file_name().to_str().map(str::to_string) else {
            return Err(SysfsError::malformed(
                &sub,
                "device name is not valid utf-8",
            ));
        };
        let path = sub.join("numa_node");
        let numa = match read_optional(&path)? {
            None => None,
            Some(text) => match parse_int(&path, &text)? {
                -1 => None,
                n => Some(to_index(&path, n)?),
            },
        };
        devices.push(Device { address, numa });
    }
    devices.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(devices)
}

// ---- File helpers -----------------------------------------------------------------------------

fn read(path: &Path) -> Result<String, SysfsError> {
    read_optional(path)?.ok_or_else(|| SysfsError::Missing {
        path: path.to_path_buf(),
    })
}

fn read_optional(path: &Path) -> Result<Option<String>, SysfsError> {
    // Not `fs::read`/`read_to_end`: their size-hint `statx` + `lseek` are wasted on sysfs (which
    // reports 4096 bytes for every attribute) and cost a third of discovery time on big trees.
    let result = fs::File::open(path).and_then(|mut f| {
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match f.read(&mut buf) {
                Ok(0) => return Ok(bytes),
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    });
    match result {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| SysfsError::malformed(path, "not valid utf-8")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SysfsError::Unreadable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn parse_int(path: &Path, text: &str) -> Result<i64, SysfsError> {
    let t = text.trim();
    t.parse::<i64>()
        .map_err(|_| SysfsError::malformed(path, format!("expected an integer, found {t:?}")))
}

fn parse_uint(path: &Path, text: &str) -> Result<u64, SysfsError> {
    let t = text.trim();
    t.parse::<u64>().map_err(|_| {
        SysfsError::malformed(
            path,
            format!("expected a non-negative integer, found {t:?}"),
        )
    })
}

fn to_index(path: &Path, value: i64) -> Result<usize, SysfsError> {
    usize::try_from(value).map_err(|_| {
        SysfsError::malformed(path, format!("expected a non-negative id, found {value}"))
    })
}

fn parse_list(path: &Path, text: &str, what: &str) -> Result<CpuSet, SysfsError> {
    CpuSet::parse(text.trim())
        .map_err(|e| SysfsError::malformed(path, format!("expected a {what} list: {e}")))
}
