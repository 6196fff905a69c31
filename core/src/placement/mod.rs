//! Placement: the admission pipeline ([`pipeline`]: [`Placement`] ties the CPU manager, the
//! memory manager, the device provider and the topology manager together and turns one
//! container's admission into its cgroup values), the wording of its refusals ([`refusal`]) and
//! the books per NUMA node it derives from its assignments ([`books`]). Beside them: what is
//! persisted ([`assignments`]), what admission is told ([`admission_input`], [`nri_container`]),
//! restart reconciliation ([`reconcile`]), configuration reload ([`migrate`]), exclusive-CPU
//! breaches ([`breach`]), `topolet plan` ([`plan`]) and the settings the pipeline is built from
//! ([`settings`]).

pub mod admission_input;
pub mod assignments;
pub mod books;
pub mod breach;
pub mod migrate;
pub mod nri_container;
pub mod pipeline;
pub mod plan;
pub mod reconcile;
pub mod refusal;
pub mod settings;

pub use pipeline::{Candidate, ContainerResources, Placement};
pub(crate) use pipeline::{Grant, Subject};
pub use refusal::{PlacementError, Refusal};
