//! The per-NUMA amounts of the NodeResourceTopology zones, damped: each zone keeps its own
//! [`Advertiser`], and a zone's amount is rewritten only on a material change
//! ([`Advertiser::decide_material`]: by more than `min_change_percent` of the zone's pool either
//! way, or down to 0) or, changed at all, once the written one has aged (an age drawn per write
//! up to `max_age`, [`crate::reclaimed::aging`], each zone its own). Without
//! it each interval's new per-NUMA amount was a full-object write of the NodeResourceTopology a
//! second later; with the Node's rule (any fall at once) every fall of the Node's amount was one
//! too (hack/fleet.sh: as many NodeResourceTopology updates as Node patches, docs/src/fleet.md).
//! The zones are advisory for batch pods: the kubelet admits an extended resource against the
//! Node's allocatable only (`pkg/kubelet/lifecycle/predicate.go`), and the Node's amount falls at
//! once.

use std::collections::BTreeMap;
use std::time::Instant;

use super::aging::Aging;
use super::budget::{Advertiser, Publish};
use super::report::ZoneTerms;

/// One advertiser per NUMA node.
#[derive(Debug, Clone)]
pub struct ZoneAdvertisers {
    min_change_percent: u8,
    /// Each zone's ages are derived from it ([`Aging::derive`] with the NUMA node).
    aging: Aging,
    zones: BTreeMap<usize, Advertiser>,
}

impl ZoneAdvertisers {
    pub fn new(min_change_percent: u8, aging: Aging) -> ZoneAdvertisers {
        ZoneAdvertisers {
            min_change_percent,
            aging,
            zones: BTreeMap::new(),
        }
    }

    fn advertiser(&mut self, numa_node: usize) -> &mut Advertiser {
        let (min, aging) = (self.min_change_percent, &self.aging);
        self.zones
            .entry(numa_node)
            .or_insert_with(|| Advertiser::new(min, aging.derive(numa_node as u64)))
    }

    /// The amount zone `numa_node` of the object already holds, found at start, taken as
    /// written at `written` and decided first at `now` ([`Advertiser::seed`]).
    pub fn seed(&mut self, numa_node: usize, amount: u64, written: Instant, now: Instant) {
        self.advertiser(numa_node).seed(amount, written, now);
    }

    /// Decides every zone of `zones` at `now` and records what is to be written; returns the
    /// amount each zone publishes now (the new one, or the one written before). Zones no longer
    /// listed are forgotten.
    pub fn publish(&mut self, zones: &[ZoneTerms], now: Instant) -> BTreeMap<usize, u64> {
        self.zones
            .retain(|n, _| zones.iter().any(|z| z.numa_node == *n));
        zones
            .iter()
            .map(|z| {
                let a = self.advertiser(z.numa_node);
                let amount = z.terms.reclaimable_millis;
                if let Publish::Now(v) = a.decide_material(amount, z.terms.pool_millis, now) {
                    a.published(v, now);
                }
                (z.numa_node, a.last().unwrap_or(amount))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reclaimed::Terms;
    use std::time::Duration;

    fn zones(amounts: &[(usize, u64)]) -> Vec<ZoneTerms> {
        amounts
            .iter()
            .map(|&(n, used)| ZoneTerms {
                numa_node: n,
                terms: Terms::compute(1000, used, 20),
                advertised_millis: None,
            })
            .collect()
    }

    #[test]
    fn a_rise_below_min_change_is_not_written_one_above_is() {
        let t0 = Instant::now();
        let mut z = ZoneAdvertisers::new(10, Aging::exact(Duration::from_secs(60)));
        // Regular 300m: 1000 − 300 − 200 = 500m on both zones.
        assert_eq!(
            z.publish(&zones(&[(0, 300), (1, 300)]), t0),
            BTreeMap::from([(0, 500), (1, 500)])
        );
        let t1 = t0 + Duration::from_secs(1);
        // Zone 0 rises by 100m (10 % of its pool: not more than it), zone 1 by 101m.
        assert_eq!(
            z.publish(&zones(&[(0, 200), (1, 199)]), t1),
            BTreeMap::from([(0, 500), (1, 601)])
        );
    }

    #[test]
    fn a_small_drop_waits_a_material_one_is_written_at_once() {
        let t0 = Instant::now();
        let mut z = ZoneAdvertisers::new(10, Aging::exact(Duration::from_secs(60)));
        z.publish(&zones(&[(0, 300), (1, 300)]), t0);
        let t1 = t0 + Duration::from_secs(1);
        // Zone 0 falls by 100m (10 % of its pool: not more), zone 1 by 101m.
        assert_eq!(
            z.publish(&zones(&[(0, 400), (1, 401)]), t1),
            BTreeMap::from([(0, 500), (1, 399)])
        );
        // Down to nothing is written however small the fall: 50m → 0.
        let mut z = ZoneAdvertisers::new(10, Aging::exact(Duration::from_secs(60)));
        z.publish(&zones(&[(0, 750)]), t0);
        assert_eq!(z.publish(&zones(&[(0, 800)]), t1), BTreeMap::from([(0, 0)]));
        // A small fall is written once the written amount has aged.
        let mut z = ZoneAdvertisers::new(10, Aging::exact(Duration::from_secs(60)));
        z.publish(&zones(&[(0, 300)]), t0);
        assert_eq!(
            z.publish(&zones(&[(0, 350)]), t1),
            BTreeMap::from([(0, 500)])
        );
        assert_eq!(
            z.publish(&zones(&[(0, 350)]), t0 + Duration::from_secs(60)),
            BTreeMap::from([(0, 450)])
        );
    }

    #[test]
    fn an_unchanged_amount_is_not_rewritten_when_it_ages() {
        let t0 = Instant::now();
        let mut a = Advertiser::new(10, Aging::exact(Duration::from_secs(60)));
        a.published(500, t0);
        let aged = t0 + Duration::from_secs(600);
        assert_eq!(a.decide_material(500, 1000, aged), Publish::Keep);
        assert_eq!(a.decide_material(490, 1000, aged), Publish::Now(490));
    }

    #[test]
    fn max_age_forces_a_write_of_a_small_rise() {
        let t0 = Instant::now();
        let mut z = ZoneAdvertisers::new(10, Aging::exact(Duration::from_secs(60)));
        z.publish(&zones(&[(0, 300)]), t0);
        let before = t0 + Duration::from_secs(59);
        assert_eq!(
            z.publish(&zones(&[(0, 250)]), before),
            BTreeMap::from([(0, 500)])
        );
        let aged = t0 + Duration::from_secs(60);
        assert_eq!(
            z.publish(&zones(&[(0, 250)]), aged),
            BTreeMap::from([(0, 550)])
        );
        // The write at `aged` starts the age over.
        assert_eq!(
            z.publish(&zones(&[(0, 240)]), aged + Duration::from_secs(1)),
            BTreeMap::from([(0, 550)])
        );
    }

    #[test]
    fn a_seeded_zone_is_not_rewritten_within_min_change_an_unseeded_one_is() {
        let written = Instant::now();
        let t0 = written + Duration::from_secs(10);
        let mut z = ZoneAdvertisers::new(10, Aging::exact(Duration::from_secs(60)));
        // The object held 480m on zone 0, written 10 s before; zone 1 held nothing.
        z.seed(0, 480, written, t0);
        assert_eq!(
            z.publish(&zones(&[(0, 300), (1, 300)]), t0),
            BTreeMap::from([(0, 480), (1, 500)])
        );
        // A material change is written as before.
        assert_eq!(
            z.publish(&zones(&[(0, 100), (1, 300)]), t0 + Duration::from_secs(1)),
            BTreeMap::from([(0, 700), (1, 500)])
        );
    }

    #[test]
    fn a_zone_that_leaves_starts_over_when_it_comes_back() {
        let t0 = Instant::now();
        let mut z = ZoneAdvertisers::new(10, Aging::exact(Duration::from_secs(60)));
        z.publish(&zones(&[(0, 300), (1, 300)]), t0);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            z.publish(&zones(&[(0, 300)]), t1),
            BTreeMap::from([(0, 500)])
        );
        assert_eq!(
            z.publish(&zones(&[(0, 300), (1, 250)]), t1),
            BTreeMap::from([(0, 500), (1, 550)])
        );
    }
}
