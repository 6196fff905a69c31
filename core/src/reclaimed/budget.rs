//! How much CPU is reclaimable, and when the amount is worth publishing.
//!
//! The one formula, for the node and for each NUMA node alike:
//!
//! ```text
//! reclaimable = pool − regular − margin          (never below 0)
//! ```
//!
//! - `pool`: the shared pool's CPUs that are neither reserved nor exclusive, in milli-CPU;
//! - `regular`: the regular (non-batch) use of those CPUs, smoothed: the chosen percentile (the
//!   peak by default) of one sample per interval over the window ([`UsageWindow`]), so the amount
//!   follows real load but does not rise the moment a burst ends;
//! - `margin`: a share of the pool kept free for the regular pods' next burst.
//!
//! [`Terms`] carries each term, so `topolet status` can print the sum an operator checks
//! ("pool 1000m − regular 210m − margin 200m = 590m"). [`Advertiser`] decides when a new amount
//! goes to the Node: a lower one at once (the scheduler must not place batch pods on CPU that is
//! no longer idle), a higher one only past a hysteresis or when the published one is old.
//! [`overrun`] lowers it between two samples: when the published amount is more than what is
//! really idle by the fast readings (the regular pods rose by more than the margin), the loop
//! need not wait for the interval's sample to say so.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use super::aging::Aging;
use super::settings::percent_of;

/// The formula's terms, in milli-CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Terms {
    pub pool_millis: u64,
    pub regular_millis: u64,
    pub margin_millis: u64,
    pub reclaimable_millis: u64,
}

impl Terms {
    /// The formula: `pool − regular − margin`, at least 0; the margin is `margin_percent` of the
    /// pool, rounded up.
    pub fn compute(pool_millis: u64, regular_millis: u64, margin_percent: u8) -> Terms {
        let margin_millis = percent_of(pool_millis, margin_percent);
        Terms {
            pool_millis,
            regular_millis,
            margin_millis,
            reclaimable_millis: pool_millis
                .saturating_sub(regular_millis)
                .saturating_sub(margin_millis),
        }
    }
}

impl std::fmt::Display for Terms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pool {}m − regular {}m − margin {}m = {}m",
            self.pool_millis, self.regular_millis, self.margin_millis, self.reclaimable_millis
        )
    }
}

/// The lower amount to publish at once when `published` is more than the pool's really idle CPU
/// by the fast readings (`now`: the formula over the mean of the suppress loop's readings of the
/// last interval, a rolling interval average: one busy 100 ms reading moves it by a tenth): `pool − regular < published`, the regular pods having risen by more than the
/// margin since the amount was computed. `None` while the published amount is still idle CPU:
/// a rise within the margin is what the margin is for, and the interval's sample decides.
pub fn overrun(published: u64, now: Terms) -> Option<u64> {
    let idle = now.pool_millis.saturating_sub(now.regular_millis);
    (published > idle).then_some(now.reclaimable_millis)
}

/// One sample per interval over a sliding window; the percentile of what it holds.
#[derive(Debug, Clone)]
pub struct UsageWindow {
    window: Duration,
    samples: VecDeque<(Instant, u64)>,
}

impl UsageWindow {
    pub fn new(window: Duration) -> UsageWindow {
        UsageWindow {
            window,
            samples: VecDeque::new(),
        }
    }

    /// Adds the sample taken at `now` and forgets those older than the window.
    pub fn push(&mut self, now: Instant, millis: u64) {
        while let Some(&(at, _)) = self.samples.front() {
            if now.saturating_duration_since(at) > self.window {
                self.samples.pop_front();
            } else {
                break;
            }
        }
        self.samples.push_back((now, millis));
    }

    /// The nearest-rank `percentile` (1–100; 100: the peak) of the window's samples; `None`
    /// before the first sample.
    pub fn percentile(&self, percentile: u8) -> Option<u64> {
        if self.samples.is_empty() {
            return None;
        }
        let mut values: Vec<u64> = self.samples.iter().map(|(_, v)| *v).collect();
        values.sort_unstable();
        let p = usize::from(percentile.clamp(1, 100));
        let rank = (p * values.len()).div_ceil(100).max(1);
        values.get(rank - 1).copied()
    }

    /// The mean of the window's samples, rounded down; `None` before the first sample.
    pub fn mean(&self) -> Option<u64> {
        let n = self.samples.len() as u64;
        (n > 0).then(|| self.samples.iter().map(|(_, v)| *v).sum::<u64>() / n)
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Forgets every sample (the pool changed shape: old samples measured other CPUs).
    pub fn clear(&mut self) {
        self.samples.clear();
    }
}

/// What the advertiser says about a new amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// Publish it (and call [`Advertiser::published`] once it is written).
    Now(u64),
    /// Keep the published amount.
    Keep,
}

/// When a new reclaimable amount is worth a write to the Node.
#[derive(Debug, Clone)]
pub struct Advertiser {
    min_change_percent: u8,
    aging: Aging,
    /// The amount written, when, and the age at which it falls due ([`Aging::draw`]).
    published: Option<(u64, Instant, Duration)>,
}

impl Advertiser {
    pub fn new(min_change_percent: u8, aging: Aging) -> Advertiser {
        Advertiser {
            min_change_percent,
            aging,
            published: None,
        }
    }

    /// What to do with `amount` (of a pool of `pool_millis`) at `now`: the first amount, any
    /// lower one and one that has aged (its age drawn up to `max_age`, [`Aging`]) are
    /// published; a higher one only when it moved by more than `min_change_percent` of the pool.
    pub fn decide(&self, amount: u64, pool_millis: u64, now: Instant) -> Publish {
        let Some((last, at, due)) = self.published else {
            return Publish::Now(amount);
        };
        if amount < last
            || amount.saturating_sub(last) > percent_of(pool_millis, self.min_change_percent)
            || now.saturating_duration_since(at) >= due
        {
            Publish::Now(amount)
        } else {
            Publish::Keep
        }
    }

    /// The rule of an advisory copy of the amount (the NodeResourceTopology zones,
    /// [`crate::reclaimed::zones`]): the first amount is published; then only a **material**
    /// change either way — by more than `min_change_percent` of the pool, or down to 0 — or
    /// a different amount once the written one has aged ([`Aging`]). A small fall is held,
    /// unlike [`Advertiser::decide`]'s, because the Node's own amount, written at once on any
    /// fall, is what bounds placement.
    pub fn decide_material(&self, amount: u64, pool_millis: u64, now: Instant) -> Publish {
        let Some((last, at, due)) = self.published else {
            return Publish::Now(amount);
        };
        if amount == last {
            return Publish::Keep;
        }
        if last.abs_diff(amount) > percent_of(pool_millis, self.min_change_percent)
            || (amount == 0 && last > 0)
            || now.saturating_duration_since(at) >= due
        {
            Publish::Now(amount)
        } else {
            Publish::Keep
        }
    }

    /// The amount an API object already holds, found at start (a restarted topolet's
    /// predecessor wrote it), taken as published at `written` ([`written_at`]), decided first
    /// at `now`: the next amount is decided against it, so a restart writes only a change this
    /// rule would have written anyway, or an amount due by its age (drawn now, as for a write;
    /// one already due by `now` falls due within half of `max_age` from `now`,
    /// [`Aging::overdue`]).
    pub fn seed(&mut self, amount: u64, written: Instant, now: Instant) {
        let mut due = self.aging.draw();
        let age = now.saturating_duration_since(written);
        if age >= due {
            due = age + self.aging.overdue();
        }
        self.published = Some((amount, written, due));
    }

    /// `amount` was written at `now`.
    pub fn published(&mut self, amount: u64, now: Instant) {
        self.published = Some((amount, now, self.aging.draw()));
    }

    /// The amount last written, if any.
    pub fn last(&self) -> Option<u64> {
        self.published.map(|(a, _, _)| a)
    }

    /// Forgets what was written (the next amount is published whatever it is).
    pub fn forget(&mut self) {
        self.published = None;
    }
}

/// The monotonic instant at which an amount found on an API object was written, for
/// [`Advertiser::seed`]: `written` is the object's own record of the write (a wall-clock time,
/// e.g. its `managedFields` entry's `time`), `wall_now` and `now` the same moment on both clocks.
/// An age over `max_age` counts as `max_age` (the amount is due either way), a time in the
/// future as 0; when the monotonic clock cannot go back that far (the host booted less than
/// `max_age` ago), the amount counts as written at `now`.
pub fn written_at(
    written: SystemTime,
    wall_now: SystemTime,
    now: Instant,
    max_age: Duration,
) -> Instant {
    let age = wall_now
        .duration_since(written)
        .unwrap_or(Duration::ZERO)
        .min(max_age);
    now.checked_sub(age).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_amount_is_kept_until_a_change_the_rule_writes_or_its_age() {
        // The Node held 500m of a 1000m pool, written 100 s before this topolet's first amount.
        // Ahead of the monotonic clock's start by more than max_age, wherever the host is.
        let now = Instant::now() + Duration::from_secs(3600);
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let max_age = Duration::from_secs(300);
        let at = written_at(wall - Duration::from_secs(100), wall, now, max_age);
        assert_eq!(now.saturating_duration_since(at), Duration::from_secs(100));
        let mut a = Advertiser::new(10, Aging::exact(max_age));
        a.seed(500, at, now);
        assert_eq!(a.last(), Some(500));
        // A rise within 10 % of the pool is kept, a fall is written at once, as before a restart.
        assert_eq!(a.decide(500, 1000, now), Publish::Keep);
        assert_eq!(a.decide(600, 1000, now), Publish::Keep);
        assert_eq!(a.decide(499, 1000, now), Publish::Now(499));
        assert_eq!(a.decide_material(450, 1000, now), Publish::Keep);
        // Due 300 s after the object's write: 200 s after this topolet's first amount.
        let due = now + Duration::from_secs(200);
        assert_eq!(
            a.decide(500, 1000, due - Duration::from_secs(1)),
            Publish::Keep
        );
        assert_eq!(a.decide(550, 1000, due), Publish::Now(550));
    }

    #[test]
    fn an_amount_older_than_max_age_or_from_the_future_is_due_or_fresh() {
        // Ahead of the monotonic clock's start by more than max_age, wherever the host is.
        let now = Instant::now() + Duration::from_secs(3600);
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let max_age = Duration::from_secs(300);
        // Written an hour ago: due at once (the age is capped at max_age, not an hour).
        let old = written_at(wall - Duration::from_secs(3600), wall, now, max_age);
        assert!(now.saturating_duration_since(old) <= max_age);
        let mut a = Advertiser::new(10, Aging::exact(max_age));
        a.seed(500, old, now);
        assert_eq!(a.decide(520, 1000, now), Publish::Now(520));
        // A clock skewed ahead: written "now".
        assert_eq!(
            written_at(wall + Duration::from_secs(60), wall, now, max_age),
            now
        );
    }

    #[test]
    fn the_formula_subtracts_regular_and_margin_from_the_pool() {
        let t = Terms::compute(1000, 210, 35);
        assert_eq!(t.margin_millis, 350);
        assert_eq!(t.reclaimable_millis, 440);
        assert_eq!(
            t.to_string(),
            "pool 1000m − regular 210m − margin 350m = 440m"
        );
    }

    #[test]
    fn the_formula_never_goes_below_zero() {
        assert_eq!(Terms::compute(1000, 900, 20).reclaimable_millis, 0);
        assert_eq!(Terms::compute(1000, 5000, 0).reclaimable_millis, 0);
        assert_eq!(Terms::compute(0, 0, 20).reclaimable_millis, 0);
    }

    #[test]
    fn an_amount_above_the_idle_cpu_is_lowered_at_once_and_one_within_the_margin_is_not() {
        // Published 700m of a 1000m pool (regular 200m, margin 100m): regular at 250m is within
        // the margin (750m idle), regular at 400m leaves 600m idle, less than the 700m published.
        assert_eq!(overrun(700, Terms::compute(1000, 250, 10)), None);
        assert_eq!(overrun(700, Terms::compute(1000, 300, 10)), None);
        assert_eq!(overrun(700, Terms::compute(1000, 400, 10)), Some(500));
        // The whole pool taken: withdrawn (0: the key is removed).
        assert_eq!(overrun(700, Terms::compute(1000, 1000, 10)), Some(0));
        // Nothing published is never above anything.
        assert_eq!(overrun(0, Terms::compute(1000, 1000, 10)), None);
    }

    #[test]
    fn the_mean_is_of_the_samples_in_the_window() {
        let t0 = Instant::now();
        let mut w = UsageWindow::new(Duration::from_secs(1));
        assert_eq!(w.mean(), None);
        w.push(t0, 100);
        w.push(t0 + Duration::from_millis(100), 1000);
        assert_eq!(w.mean(), Some(550));
        // The first sample is older than the window at 1.05 s, the second is not.
        w.push(t0 + Duration::from_millis(1050), 400);
        assert_eq!(w.mean(), Some(700));
    }

    #[test]
    fn the_margin_rounds_up() {
        assert_eq!(Terms::compute(1001, 0, 10).margin_millis, 101);
    }

    #[test]
    fn the_window_keeps_its_span_and_gives_the_peak_or_a_percentile() {
        let t0 = Instant::now();
        let mut w = UsageWindow::new(Duration::from_secs(10));
        assert_eq!(w.percentile(100), None);
        for (i, v) in [100, 900, 300, 200, 400].into_iter().enumerate() {
            w.push(t0 + Duration::from_secs(i as u64), v);
        }
        assert_eq!(w.percentile(100), Some(900));
        assert_eq!(w.percentile(50), Some(300));
        assert_eq!(w.percentile(1), Some(100));
        // 12 s later the first three (t0, t0+1, t0+2 → older than 10 s at t0+13) are gone.
        w.push(t0 + Duration::from_secs(13), 50);
        assert_eq!(w.len(), 3);
        assert_eq!(w.percentile(100), Some(400));
    }

    #[test]
    fn a_peak_holds_the_amount_down_for_the_window() {
        let t0 = Instant::now();
        let mut w = UsageWindow::new(Duration::from_secs(5));
        w.push(t0, 800);
        for s in 1..=5 {
            w.push(t0 + Duration::from_secs(s), 100);
            assert_eq!(w.percentile(100), Some(800), "second {s}");
        }
        w.push(t0 + Duration::from_secs(6), 100);
        assert_eq!(w.percentile(100), Some(100));
    }

    #[test]
    fn lower_amounts_publish_at_once_higher_ones_past_the_hysteresis_or_age() {
        let t0 = Instant::now();
        let mut a = Advertiser::new(10, Aging::exact(Duration::from_secs(60)));
        assert_eq!(a.decide(500, 1000, t0), Publish::Now(500));
        a.published(500, t0);
        assert_eq!(a.last(), Some(500));
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(a.decide(499, 1000, t1), Publish::Now(499));
        assert_eq!(a.decide(600, 1000, t1), Publish::Keep);
        assert_eq!(a.decide(601, 1000, t1), Publish::Now(601));
        assert_eq!(a.decide(500, 1000, t1), Publish::Keep);
        let old = t0 + Duration::from_secs(60);
        assert_eq!(a.decide(550, 1000, old), Publish::Now(550));
        assert_eq!(a.decide(500, 1000, old), Publish::Now(500));
        a.forget();
        assert_eq!(a.decide(500, 1000, t1), Publish::Now(500));
    }

    #[test]
    fn a_load_step_never_leaves_the_published_amount_above_the_idle_cpu() {
        // Regular usage steps from 100m to 700m at second 10 and back at second 20; every
        // published amount is at most what the formula gives for the usage at that second.
        let t0 = Instant::now();
        let mut w = UsageWindow::new(Duration::from_secs(5));
        let mut a = Advertiser::new(10, Aging::exact(Duration::from_secs(300)));
        let mut changes = 0;
        for s in 0..40u64 {
            let usage = if (10..20).contains(&s) { 700 } else { 100 };
            let now = t0 + Duration::from_secs(s);
            w.push(now, usage);
            let t = Terms::compute(1000, w.percentile(100).unwrap_or(0), 20);
            if let Publish::Now(v) = a.decide(t.reclaimable_millis, 1000, now) {
                a.published(v, now);
                changes += 1;
            }
            let idle = Terms::compute(1000, usage, 20).reclaimable_millis;
            assert!(
                a.last().unwrap() <= idle,
                "second {s}: {:?} > {idle}",
                a.last()
            );
        }
        // Published: 700 at start, 100 at the step up, 700 once the window forgot the step.
        assert_eq!(changes, 3);
    }

    /// Each second from `from` for `seconds`, every advertiser of `fleet` still at 500m (of a
    /// 1000m pool) is offered 520m (a rise within min_change_percent: written only once aged);
    /// how many wrote it in each second.
    fn first_rewrites_per_second(
        fleet: &mut [Advertiser],
        from: Instant,
        seconds: usize,
    ) -> Vec<usize> {
        let mut per_second = vec![0usize; seconds];
        for (s, n) in per_second.iter_mut().enumerate() {
            let t = from + Duration::from_secs(s as u64);
            for a in fleet.iter_mut().filter(|a| a.last() == Some(500)) {
                if a.decide(520, 1000, t) == Publish::Now(520) {
                    a.published(520, t);
                    *n += 1;
                }
            }
        }
        per_second
    }

    #[test]
    fn a_fleet_that_wrote_together_rewrites_its_aged_amounts_spread_over_half_max_age() {
        // 100 instances publish 500m at the same instant; from then on each sees a small rise
        // (within min_change_percent), written only once aged. Each second, count the writes.
        let t0 = Instant::now();
        let max_age = Duration::from_secs(300);
        let mut fleet: Vec<Advertiser> = (0..100u64)
            .map(|seed| Advertiser::new(10, Aging::spread(max_age, seed)))
            .collect();
        for a in &mut fleet {
            a.published(500, t0);
        }
        let per_second = first_rewrites_per_second(&mut fleet, t0, 301);
        // Every one is due by max_age, none before half of it.
        assert_eq!(per_second.iter().sum::<usize>(), 100);
        assert_eq!(per_second[..150].iter().sum::<usize>(), 0);
        // No minute holds more than 60 of them (an even spread puts 40 % in any 60 s of the
        // 150 s, 54 in this fleet's busiest); without the spread all 100 fell in one second.
        let most = (0..=240)
            .map(|s| per_second[s..s + 61].iter().sum::<usize>())
            .max();
        assert!(
            most.is_some_and(|m| m <= 60),
            "{most:?} in one minute: {per_second:?}"
        );
    }

    #[test]
    fn a_fleet_restarted_with_its_amounts_overdue_rewrites_them_over_half_max_age() {
        // 100 instances restart and decide first at the same instant; every amount their
        // predecessors wrote is 400 s old (past max_age: the fleet was down). A small rise.
        let now = Instant::now() + Duration::from_secs(3600);
        let max_age = Duration::from_secs(300);
        let mut fleet: Vec<Advertiser> = (0..100u64)
            .map(|seed| Advertiser::new(10, Aging::spread(max_age, seed)))
            .collect();
        for a in &mut fleet {
            a.seed(500, now - Duration::from_secs(400), now);
        }
        let per_second = first_rewrites_per_second(&mut fleet, now, 151);
        // All within half of max_age; no 10 s holds more than 20 (an even spread: 6.7).
        assert_eq!(per_second.iter().sum::<usize>(), 100);
        let most = (0..=140)
            .map(|s| per_second[s..s + 10].iter().sum::<usize>())
            .max();
        assert!(
            most.is_some_and(|m| m <= 20),
            "{most:?} in 10 s: {per_second:?}"
        );
        // A fall is still written at once.
        let mut a = Advertiser::new(10, Aging::spread(max_age, 7));
        a.seed(500, now - Duration::from_secs(400), now);
        assert_eq!(a.decide(499, 1000, now), Publish::Now(499));
    }
}
