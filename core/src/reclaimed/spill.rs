//! Regular use of the reserved CPUs, and how much of it counts against the resold pool.
//!
//! Regular pods float over the whole shared pool, the reserved CPUs included (the kubelet's
//! default: `pkg/kubelet/cm/cpumanager/policy_static.go` gives shared containers the default
//! set, reserved CPUs in it), while batch pods get the pool without them. A regular pod busy on a
//! reserved CPU takes nothing the batch pods were sold while that CPU has room; once it has none,
//! its next burst (and the system daemons the reserved CPUs exist for) lands on the pool. The
//! rule, for `usage = "cpus"`:
//!
//! ```text
//! spill = reserved busy − (reserved × (100 − margin_percent) %)     (never below 0)
//! regular = pool busy − batch + spill
//! ```
//!
//! The reserved CPUs' busy time (system daemons, interrupts, regular pods: a CPU's busy time
//! cannot tell them apart) up to their capacity less the margin is theirs; beyond it, it is counted as
//! regular use of the pool. With `usage = "pods"` the regular pods' own cgroup time already
//! counts wherever they run, reserved CPUs included, so nothing is added.

use serde::{Deserialize, Serialize};

use super::settings::{percent_of, UsageSource};

/// The rule as `topolet status` prints it.
pub const RULE_CPUS: &str =
    "busy time of the reserved CPUs (regular pods float over them) beyond their capacity less the margin counts as regular use of the pool";
/// With `usage = "pods"`.
pub const RULE_PODS: &str =
    "the regular pods' own time counts wherever they run, the reserved CPUs included";

/// The reserved CPUs' terms, in milli-CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Spill {
    /// The reserved CPUs regular pods may run on, × 1000.
    pub reserved_millis: u64,
    /// Their busy time.
    pub busy_millis: u64,
    /// What they may be busy with before any counts against the pool.
    pub headroom_millis: u64,
    /// What counts as regular use of the pool.
    pub spill_millis: u64,
}

impl Spill {
    /// The rule (see the module's doc) for `reserved_millis` of reserved CPUs busy for
    /// `busy_millis`.
    pub fn compute(
        usage: UsageSource,
        reserved_millis: u64,
        busy_millis: u64,
        margin_percent: u8,
    ) -> Spill {
        let headroom_millis =
            reserved_millis.saturating_sub(percent_of(reserved_millis, margin_percent));
        let spill_millis = match usage {
            UsageSource::Cpus => busy_millis.saturating_sub(headroom_millis),
            UsageSource::Pods => 0,
        };
        Spill {
            reserved_millis,
            busy_millis,
            headroom_millis,
            spill_millis,
        }
    }

    /// The rule in words, for `usage`.
    pub fn rule(usage: UsageSource) -> &'static str {
        match usage {
            UsageSource::Cpus => RULE_CPUS,
            UsageSource::Pods => RULE_PODS,
        }
    }
}

impl std::fmt::Display for Spill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "reserved {}m busy {}m − headroom {}m = {}m counted",
            self.reserved_millis, self.busy_millis, self.headroom_millis, self.spill_millis
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reclaimed::Terms;

    #[test]
    fn a_regular_pod_busy_on_the_reserved_cpu_lowers_the_amount() {
        // One reserved CPU, its daemons at 100m; a Burstable pod steps from idle to a full CPU
        // on it (the kernel keeps it there: the CPU was idle). The pool (1 CPU) is idle.
        let quiet = Spill::compute(UsageSource::Cpus, 1000, 100, 20);
        assert_eq!(quiet.spill_millis, 0, "daemons within the headroom");
        let before = Terms::compute(1000, quiet.spill_millis, 20);
        assert_eq!(before.reclaimable_millis, 800);
        let busy = Spill::compute(UsageSource::Cpus, 1000, 1000, 20);
        assert_eq!(busy.headroom_millis, 800);
        assert_eq!(busy.spill_millis, 200);
        let after = Terms::compute(1000, busy.spill_millis, 20);
        assert_eq!(after.reclaimable_millis, 600, "the amount moved");
        assert_eq!(
            busy.to_string(),
            "reserved 1000m busy 1000m − headroom 800m = 200m counted"
        );
    }

    #[test]
    fn pods_mode_adds_nothing_its_pods_count_wherever_they_run() {
        let s = Spill::compute(UsageSource::Pods, 1000, 1000, 20);
        assert_eq!(s.spill_millis, 0);
        assert_eq!(Spill::rule(UsageSource::Pods), RULE_PODS);
    }

    #[test]
    fn no_reserved_cpu_spills_nothing_but_what_is_busy() {
        assert_eq!(Spill::compute(UsageSource::Cpus, 0, 0, 20).spill_millis, 0);
        // Two reserved CPUs, margin 0: only busy time beyond both counts (none can).
        assert_eq!(
            Spill::compute(UsageSource::Cpus, 2000, 2000, 0).spill_millis,
            0
        );
        assert_eq!(
            Spill::compute(UsageSource::Cpus, 2000, 1900, 10).spill_millis,
            100
        );
    }
}
