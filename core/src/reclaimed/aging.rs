//! When a published amount falls due for a rewrite though the damping kept it
//! ([`crate::reclaimed::Advertiser`]): at an age drawn afresh for each write, from half of
//! `max_age` to `max_age`. `max_age` stays the most an amount can age; the spread keeps a fleet
//! whose instances first wrote together — a cluster's first install, a DaemonSet rolling update
//! with a large `maxUnavailable` — from rewriting together every `max_age` ever after
//! (hack/fleet.sh measured 97 of 100 NodeResourceTopology rewrites in one minute, 300 s after
//! the fleet's first writes, docs/src/fleet.md). Each draw is new, so instances that happen to
//! draw alike once drift apart at the next write; client-go's `wait.Jitter`
//! (`apimachinery/pkg/util/wait`) spreads periodic work the same way.

use std::time::Duration;

use crate::jitter;

/// The due ages of one advertiser's writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aging {
    max_age: Duration,
    seed: u64,
    /// How many ages were drawn (each draw is the seed's next value).
    draws: u64,
    /// Every age is `max_age` (the damping rules' own tests).
    exact: bool,
}

impl Aging {
    /// Ages from `max_age / 2` to `max_age`, drawn by `seed` (each instance draws its own).
    pub fn spread(max_age: Duration, seed: u64) -> Aging {
        Aging {
            max_age,
            seed,
            draws: 0,
            exact: false,
        }
    }

    /// Every age `max_age`.
    #[cfg(test)]
    pub(crate) fn exact(max_age: Duration) -> Aging {
        Aging {
            exact: true,
            ..Aging::spread(max_age, 0)
        }
    }

    /// The ages of another object's writes by the same instance (a NodeResourceTopology zone
    /// beside the Node): the same `max_age`, unrelated draws.
    pub fn derive(&self, salt: u64) -> Aging {
        Aging {
            seed: jitter::mix(self.seed ^ jitter::mix(salt)),
            draws: 0,
            ..self.clone()
        }
    }

    /// The most an amount ages.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// The age at which the write made now falls due.
    pub fn draw(&mut self) -> Duration {
        if self.exact {
            return self.max_age;
        }
        self.between(self.max_age / 2, self.max_age)
    }

    /// How long after a restart's first decision an amount its predecessor wrote, already due
    /// by then, is rewritten: from 0 to half of `max_age`. A fleet restarted together decides
    /// first together (its usage windows fill together), and without it every amount that fell
    /// due while the fleet was down — all of them, after a fleet-wide outage — is rewritten in
    /// that same second.
    pub fn overdue(&mut self) -> Duration {
        if self.exact {
            return Duration::ZERO;
        }
        self.between(Duration::ZERO, self.max_age / 2)
    }

    fn between(&mut self, low: Duration, high: Duration) -> Duration {
        self.draws = self.draws.wrapping_add(1);
        let seed = self
            .seed
            .wrapping_add(self.draws.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        jitter::between(low, high, seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_age_is_from_half_max_age_to_max_age_and_each_write_draws_anew() {
        let max = Duration::from_secs(300);
        let mut a = Aging::spread(max, 42);
        let ages: Vec<Duration> = (0..200).map(|_| a.draw()).collect();
        assert!(ages.iter().all(|d| (max / 2..=max).contains(d)), "{ages:?}");
        // Anew at each write: one instance's ages are not one value.
        let distinct: std::collections::BTreeSet<_> = ages.iter().collect();
        assert!(distinct.len() > 190, "{} distinct of 200", distinct.len());
        assert_eq!(Aging::exact(max).draw(), max);
        let overdue: Vec<Duration> = (0..200).map(|_| a.overdue()).collect();
        assert!(overdue.iter().all(|d| *d <= max / 2), "{overdue:?}");
        assert!(overdue.iter().any(|d| *d < max / 10) && overdue.iter().any(|d| *d > max * 2 / 5));
        assert_eq!(Aging::exact(max).overdue(), Duration::ZERO);
        assert_eq!(a.max_age(), max);
    }

    #[test]
    fn instances_and_their_zones_draw_unrelated_ages() {
        let max = Duration::from_secs(300);
        let firsts: std::collections::BTreeSet<Duration> =
            (0..100).map(|s| Aging::spread(max, s).draw()).collect();
        assert_eq!(firsts.len(), 100);
        let a = Aging::spread(max, 9);
        assert_ne!(a.derive(0).draw(), a.derive(1).draw());
        assert_ne!(a.derive(0).draw(), a.clone().draw());
    }
}
