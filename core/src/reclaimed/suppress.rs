//! Taking reclaimed CPU back: how much the batch containers may use right now, and each one's
//! CFS quota.
//!
//! Every suppress interval the budget's target is the formula of [`super::budget`] on the
//! regular usage *of that interval* (not smoothed: the point is to react at once). A lower
//! target is applied at once; a higher one is approached in steps of `grow_step_percent` of the
//! pool per interval, so a burst that ends does not hand the CPU straight back and the quotas do
//! not jitter with every sample (koordinator's `cpusuppress` grows by at most 10 % of the node
//! per round and shrinks at once, for the same reason). Changes smaller than the dead band (1 %
//! of the pool, at least the minimum grant) are ignored either way, except a cut to 0.
//!
//! The budget is split among the batch containers in proportion to their limits, each capped by
//! its own limit, never below [`MIN_GRANT_MILLIS`]: the kernel refuses a quota under 1 ms
//! (`kernel/sched/core.c`: `tg_set_cfs_bandwidth` returns `-EINVAL` below `min_cfs_quota_period`).

use super::settings::percent_of;

/// The smallest grant: 1 ms of CPU per 100 ms period.
pub const MIN_GRANT_MILLIS: u64 = 10;

/// The CFS period batch containers run with, in µs (the kubelet's default `cpuCFSQuotaPeriod`).
pub const PERIOD_US: u64 = 100_000;

/// What one suppress step did to the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuppressStep {
    /// The first budget.
    Start(u64),
    /// Cut at once, from the first value to the second.
    Cut { from: u64, to: u64 },
    /// Grown by one step.
    Grow { from: u64, to: u64 },
    /// Unchanged.
    Hold(u64),
}

impl SuppressStep {
    /// The budget after the step.
    pub fn budget(self) -> u64 {
        match self {
            SuppressStep::Start(b) | SuppressStep::Hold(b) => b,
            SuppressStep::Cut { to, .. } | SuppressStep::Grow { to, .. } => to,
        }
    }
}

/// The batch budget between steps.
#[derive(Debug, Clone, Default)]
pub struct Suppressor {
    budget: Option<u64>,
}

impl Suppressor {
    pub fn new() -> Suppressor {
        Suppressor::default()
    }

    /// One step with `target` (the formula on this interval's regular usage) for a pool of
    /// `pool_millis`.
    pub fn step(&mut self, target: u64, pool_millis: u64, grow_step_percent: u8) -> SuppressStep {
        let dead_band = percent_of(pool_millis, 1).max(MIN_GRANT_MILLIS);
        let step = match self.budget {
            None => SuppressStep::Start(target),
            Some(b) if target < b => {
                if b - target < dead_band && target > 0 {
                    SuppressStep::Hold(b)
                } else {
                    SuppressStep::Cut {
                        from: b,
                        to: target,
                    }
                }
            }
            Some(b) => {
                if target - b < dead_band {
                    SuppressStep::Hold(b)
                } else {
                    let step = percent_of(pool_millis, grow_step_percent).max(MIN_GRANT_MILLIS);
                    SuppressStep::Grow {
                        from: b,
                        to: target.min(b + step),
                    }
                }
            }
        };
        self.budget = Some(step.budget());
        step
    }

    /// The current budget, if a step ran.
    pub fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// Forgets the budget (the feature was turned off).
    pub fn reset(&mut self) {
        self.budget = None;
    }
}

/// `budget` split among containers asking for `limits` (milli-CPU each, in order): in proportion
/// to the limits, each capped by its own, at least [`MIN_GRANT_MILLIS`]. A container that asked
/// for nothing (0) gets the minimum.
pub fn distribute(budget: u64, limits: &[u64]) -> Vec<u64> {
    let total: u64 = limits.iter().sum();
    limits
        .iter()
        .map(|&limit| {
            let share = if total == 0 {
                0
            } else if budget >= total {
                limit
            } else {
                // u128: budget × limit fits for any realistic amount, but never overflows.
                (u128::from(budget) * u128::from(limit) / u128::from(total)) as u64
            };
            share.min(limit).max(MIN_GRANT_MILLIS)
        })
        .collect()
}

/// The CFS quota (µs per [`PERIOD_US`]) of a grant of `millis`.
pub fn quota_us(millis: u64) -> i64 {
    let q = millis.max(MIN_GRANT_MILLIS) * PERIOD_US / 1000;
    i64::try_from(q).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rise_cuts_at_once_and_a_fall_grows_back_in_steps() {
        let mut s = Suppressor::new();
        assert_eq!(s.step(800, 1000, 10), SuppressStep::Start(800));
        assert_eq!(
            s.step(200, 1000, 10),
            SuppressStep::Cut { from: 800, to: 200 }
        );
        assert_eq!(
            s.step(800, 1000, 10),
            SuppressStep::Grow { from: 200, to: 300 }
        );
        assert_eq!(
            s.step(800, 1000, 10),
            SuppressStep::Grow { from: 300, to: 400 }
        );
        assert_eq!(
            s.step(350, 1000, 10),
            SuppressStep::Cut { from: 400, to: 350 }
        );
        assert_eq!(s.step(355, 1000, 10), SuppressStep::Hold(350));
        assert_eq!(s.step(345, 1000, 10), SuppressStep::Hold(350));
        assert_eq!(
            s.step(420, 1000, 10),
            SuppressStep::Grow { from: 350, to: 420 }
        );
        assert_eq!(s.step(0, 1000, 10), SuppressStep::Cut { from: 420, to: 0 });
        assert_eq!(s.step(5, 1000, 10), SuppressStep::Hold(0));
        assert_eq!(
            s.step(150, 1000, 10),
            SuppressStep::Grow { from: 0, to: 100 }
        );
        s.reset();
        assert_eq!(s.budget(), None);
    }

    #[test]
    fn noise_below_the_dead_band_never_moves_the_budget() {
        let mut s = Suppressor::new();
        s.step(500, 1000, 5);
        for target in [505, 509, 501, 500, 508, 495, 491] {
            assert_eq!(s.step(target, 1000, 5), SuppressStep::Hold(500));
        }
    }

    #[test]
    fn the_budget_is_split_by_limits_and_capped_by_each() {
        assert_eq!(distribute(600, &[400, 200]), vec![400, 200]);
        assert_eq!(distribute(300, &[400, 200]), vec![200, 100]);
        assert_eq!(distribute(0, &[400, 200]), vec![10, 10]);
        assert_eq!(distribute(300, &[400, 0]), vec![300, 10]);
        assert_eq!(distribute(100, &[]), Vec::<u64>::new());
    }

    #[test]
    fn quotas_are_per_100ms_and_never_below_a_millisecond() {
        assert_eq!(quota_us(500), 50_000);
        assert_eq!(quota_us(0), 1_000);
        assert_eq!(quota_us(2000), 200_000);
    }
}
