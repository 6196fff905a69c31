//! The CPU manager: the [`policy`] (`none` / `static`: reserved set, shared pool, exclusive
//! assignments, hints) and the [`alloc`]ator that picks CPUs by topology
//! (`pkg/kubelet/cm/cpumanager`).
pub mod alloc;
pub mod policy;
