//! The books of the resources placement accounts per NUMA node (memory, hugepages, devices):
//! capacity, allocatable and what is still available. Derived from the managers' assignments
//! ([`crate::placement::Placement::books`]); the NodeResourceTopology zones
//! ([`crate::report::nrt`]) are written from them.

use std::collections::BTreeMap;

use crate::managers::memory::policy::MemoryResource;
use crate::managers::topology::manager::{merge_free, FreePerNode};
use crate::placement::Placement;

/// One resource's books on one NUMA node (bytes or units).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Book {
    pub capacity: u64,
    pub allocatable: u64,
    pub available: u64,
}

/// Node → resource name (`memory`, `hugepages-2Mi`, `vendor.com/dev`) → books; CPUs come from
/// the status report.
pub type Books = BTreeMap<usize, BTreeMap<String, Book>>;

impl Placement {
    /// Free capacity per NUMA node of every provider (for refusal messages and status).
    pub fn free_per_node(&self) -> FreePerNode {
        let assignable = self.cpu.assignable();
        let cpus: FreePerNode = self
            .topology
            .numa_nodes()
            .map(|n| {
                let free = assignable.intersection(&n.cpus).len() as u64;
                (n.id, BTreeMap::from([("cpu".to_string(), free * 1000)]))
            })
            .collect();
        merge_free([
            cpus,
            self.memory.free_per_node(),
            self.devices.free_per_node(),
        ])
    }

    /// The memory manager's and the device provider's books per NUMA node (capacity,
    /// allocatable, available), for the NodeResourceTopology (`crate::report::nrt`).
    pub fn books(&self) -> Books {
        let free = self.free_per_node();
        let free_of = |node: usize, name: &str| {
            free.get(&node)
                .and_then(|m| m.get(name))
                .copied()
                .unwrap_or(0)
        };
        let mut out = Books::new();
        for n in self.topology.numa_nodes() {
            let per = out.entry(n.id).or_default();
            let mut resources = vec![(MemoryResource::Memory, n.memory_bytes)];
            resources.extend(n.hugepages.iter().map(|(&size, &count)| {
                (MemoryResource::Hugepages(size), size.saturating_mul(count))
            }));
            for (resource, capacity) in resources {
                let name = resource.to_string();
                per.insert(
                    name.clone(),
                    Book {
                        capacity,
                        allocatable: self.memory.allocatable(n.id, resource),
                        available: free_of(n.id, &name),
                    },
                );
            }
        }
        for (node, per) in self.devices.capacity_per_node() {
            for (name, count) in per {
                out.entry(node).or_default().insert(
                    name.clone(),
                    Book {
                        capacity: count,
                        allocatable: count,
                        available: free_of(node, &name),
                    },
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managers::memory::policy::MemoryPolicyKind;
    use crate::placement::pipeline::tests::{config, guaranteed, machine, pod};
    use crate::placement::Candidate;

    /// The books the NodeResourceTopology publishes: memory and devices per node, capacity,
    /// allocatable (minus `[memory] reserved`), available (minus what containers hold).
    #[test]
    fn books_follow_the_memory_managers_and_devices_assignments() {
        let mut c = config();
        c.memory.policy = MemoryPolicyKind::Static;
        c.memory.reserved.insert(0, 1 << 30);
        let (mut p, _) = Placement::new(&machine(), &c).unwrap();
        let book = |p: &Placement, name: &str| p.books()[&0][name];
        let gib = 1u64 << 30;
        assert_eq!(
            book(&p, "memory"),
            Book {
                capacity: 8 * gib,
                allocatable: 7 * gib,
                available: 7 * gib
            }
        );
        let nic = Book {
            capacity: 1,
            allocatable: 1,
            available: 1,
        };
        assert_eq!(book(&p, "example.com/nic"), nic);
        p.admit(
            Candidate::app(&pod("web", vec![], vec![guaranteed("app", 1, 1)])),
            -1000,
        )
        .unwrap();
        assert_eq!(book(&p, "memory").available, 6 * gib);
        assert_eq!(book(&p, "example.com/nic").available, 0);
        p.release_pod("web");
        assert_eq!(book(&p, "memory").available, 7 * gib);
        assert_eq!(book(&p, "example.com/nic"), nic);
    }
}
