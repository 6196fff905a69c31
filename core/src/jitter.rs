//! Spreading a fleet's periodic work: a seed (one per process, drawn by the shell) turned into
//! well-spread draws, so that instances started together — a DaemonSet rolling update with a
//! large `maxUnavailable` — do not send their writes in the same second. client-go's
//! `wait.Jitter` (`apimachinery/pkg/util/wait`) spreads its clients' periodic work the same way.
//! Deterministic: the same seed gives the same draws.

use std::time::Duration;

/// splitmix64's finaliser: neighbouring seeds give unrelated values.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A duration from `low` to `high` inclusive (`high` below `low` counts as `low`), drawn by
/// `seed`, at nanosecond grain.
pub fn between(low: Duration, high: Duration, seed: u64) -> Duration {
    // At most 2^64 − 1 ns (584 years), so that the product below stays within u128.
    let span = high
        .saturating_sub(low)
        .as_nanos()
        .min(u128::from(u64::MAX));
    if span == 0 {
        return low;
    }
    // The draw scaled onto 0..=span: (draw × (span + 1)) / 2^64, below span + 1.
    let off = (u128::from(mix(seed)) * (span + 1)) >> 64;
    low.saturating_add(Duration::from_nanos(u64::try_from(off).unwrap_or(u64::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draw_stays_within_its_bounds_and_spreads_over_them() {
        let (low, high) = (Duration::from_secs(150), Duration::from_secs(300));
        let draws: Vec<Duration> = (0..1500).map(|s| between(low, high, s)).collect();
        assert!(draws.iter().all(|d| (low..=high).contains(d)));
        // Every 15 s of the 150 s span gets some of them (a tenth each, 150 on average).
        for tenth in 0..10u64 {
            let from = low + Duration::from_secs(15 * tenth);
            let n = draws
                .iter()
                .filter(|d| (from..from + Duration::from_secs(15)).contains(d))
                .count();
            assert!((100..=200).contains(&n), "{from:?}: {n} of 1500");
        }
        assert_eq!(between(high, high, 7), high);
        assert_eq!(
            between(high, low, 7),
            high,
            "an empty span is its low bound"
        );
        assert!(
            between(Duration::ZERO, Duration::from_nanos(1), u64::MAX) <= Duration::from_nanos(1)
        );
        assert!(between(Duration::ZERO, Duration::MAX, 3) <= Duration::MAX);
    }

    #[test]
    fn neighbouring_seeds_give_unrelated_values() {
        assert_ne!(mix(0), mix(1));
        assert_ne!(mix(1) >> 56, mix(2) >> 56);
    }
}
