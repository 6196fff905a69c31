//! The topology manager: the [`hints`] vocabulary (NUMA masks, hints, policies, scopes, the
//! merge) and the admission step that gathers and merges the providers' hints for one
//! container or pod ([`manager`]; `pkg/kubelet/cm/topologymanager`).
pub mod hints;
pub mod manager;
