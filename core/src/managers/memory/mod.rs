//! The memory manager: its `static` [`policy`] (per-NUMA-node accounting of memory and
//! hugepages, hints, pinning; `pkg/kubelet/cm/memorymanager`).
pub mod policy;
