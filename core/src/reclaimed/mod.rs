//! Reclaimed CPU ("colocation"): the shared pool's idle CPU resold to batch pods as an extended
//! resource, and taken back from them the moment the regular pods need it.
//!
//! Owns the decisions, none of the measuring or sending:
//! - [`settings`]: the feature's settings (`[reclaimed]` in the node's file maps into them);
//! - [`batch`]: which pods are batch pods (they request the reclaimed resource and no regular CPU)
//!   and what each container asked for;
//! - [`budget`]: how much is reclaimable — the one formula, its terms, the smoothing window and
//!   when a new amount is worth publishing;
//! - [`aging`]: when an amount the damping kept is rewritten anyway (an age drawn per write up
//!   to `max_age`, so a fleet does not rewrite in step);
//! - [`spill`]: how regular use of the reserved CPUs (regular pods float over them, batch pods
//!   never run there) counts against the pool;
//! - [`suppress`]: how much CPU the batch containers may use right now (cut at once, grown back
//!   in steps) and how it is split among them as CFS quotas;
//! - [`starvation`]: which batch pods have been starved long enough to be evicted;
//! - [`zones`]: the per-NUMA amounts of the NodeResourceTopology, damped by the Node's rule;
//! - [`report`]: what `topolet status` shows of it.
//!
//! The peers' way, for comparison: koordinator computes `batch-cpu` from usage averaged over
//! minutes in a cluster controller (`pkg/slo-controller/noderesource/plugins/batchresource`) and
//! suppresses best-effort pods in its node agent every second
//! (`pkg/koordlet/qosmanager/plugins/cpusuppress`); katalyst reports `reclaimed_millicpu` through
//! its own node resource object. Here one node agent does both, against the stock scheduler.

pub mod aging;
pub mod batch;
pub mod budget;
pub mod report;
pub mod settings;
pub mod spill;
pub mod starvation;
pub mod suppress;
pub mod zones;

pub use aging::Aging;
pub use batch::{batch_pod, BatchContainer, BatchPod, NotBatch};
pub use budget::{overrun, written_at, Advertiser, Publish, Terms, UsageWindow};
pub use report::{BatchStatus, ReclaimedStatus, ZoneTerms};
pub use settings::{ReclaimedSettings, UsageSource, DEFAULT_RESOURCE_NAME};
pub use spill::Spill;
pub use starvation::{Due, Fed, Starvation, WANTED_PERCENT};
pub use suppress::{distribute, quota_us, SuppressStep, Suppressor, MIN_GRANT_MILLIS};
pub use zones::ZoneAdvertisers;
