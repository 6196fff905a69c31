//! The books of the resources placement accounts per NUMA node (memory, hugepages, devices):
//! capacity, allocatable and what is still available. Derived from the managers' assignments
//! ([`crate::placement::Placement::books`]); the NodeResourceTopology zones
//! ([`crate::report::nrt`]) are written from them.

use std::collections::BTreeMap;

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
