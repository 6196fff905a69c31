//! The goals of reclaimed CPU's measured outcome (issue 34's "Measured"), judged from the
//! figures `tests/kubelet_colocation.rs` collects, met or not: pure, so the judging is unit
//! tested while the run itself needs the real stack (hack/bench.sh part `reclaimed`).
//!
//! - regular throughput colocated ≥ 97 % of solo;
//! - regular wake-up lateness p99 colocated ≤ 1.2 × solo;
//! - the resold CPUs ≥ 85 % busy while colocated, and the node's busy CPU rising by what the
//!   batch pods got (their work is on idle CPU, not instead of the regular pods');
//! - the suppress reaction: median within one `suppress_interval`, max within one `interval`;
//! - the advertised amount above the really idle CPU for no longer than the loop needs to see a
//!   load step: one `interval` (its sample) plus one sample of the run. A rise of regular use
//!   larger than the margin leaves the published amount above what is idle until the next
//!   sample shows it; every stretch is reported, and the raw count of samples above idle beside
//!   the goal.

pub const THROUGHPUT_MIN_RATIO: f64 = 0.97;
pub const LATE_P99_MAX_RATIO: f64 = 1.2;
pub const RESOLD_BUSY_MIN_PERCENT: f64 = 85.0;
/// The node's busy CPU must rise by at least this share of what the batch pods got.
pub const RISE_MIN_SHARE: f64 = 0.9;

/// What the run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub throughput_ratio: f64,
    pub late_p99_ratio: f64,
    /// The resold CPUs' busy time while colocated, in milli-CPU, and their capacity.
    pub pool_busy_millis: f64,
    pub pool_millis: f64,
    pub node_busy_rise_millis: f64,
    pub batch_millis: f64,
    pub cut_median_ms: f64,
    pub cut_max_ms: f64,
    pub suppress_interval_ms: f64,
    pub interval_ms: f64,
    pub exceeded_idle_samples: u64,
    /// The longest stretch of samples above the idle CPU, from the sample before it.
    pub exceeded_idle_longest_ms: f64,
    /// The run's sampling period.
    pub sample_ms: f64,
    pub advertised_samples: u64,
}

/// One goal, judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    pub name: &'static str,
    pub value: String,
    pub bound: String,
    pub met: bool,
}

/// The nearest-rank percentile (0–100) of `values`; `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * v.len() as f64).ceil() as usize;
    v.get(rank.max(1) - 1).copied()
}

/// Every goal, judged from `f`.
pub fn judge(f: &Figures) -> Vec<Goal> {
    let busy = if f.pool_millis > 0.0 {
        f.pool_busy_millis * 100.0 / f.pool_millis
    } else {
        0.0
    };
    vec![
        Goal {
            name: "regular throughput colocated / solo",
            value: format!("{:.3}x", f.throughput_ratio),
            bound: format!(">= {THROUGHPUT_MIN_RATIO}x"),
            met: f.throughput_ratio >= THROUGHPUT_MIN_RATIO,
        },
        Goal {
            name: "regular wake-up p99 colocated / solo",
            value: format!("{:.2}x", f.late_p99_ratio),
            bound: format!("<= {LATE_P99_MAX_RATIO}x"),
            met: f.late_p99_ratio > 0.0 && f.late_p99_ratio <= LATE_P99_MAX_RATIO,
        },
        Goal {
            name: "resold CPUs busy while colocated",
            value: format!("{busy:.1} %"),
            bound: format!(">= {RESOLD_BUSY_MIN_PERCENT} %"),
            met: busy >= RESOLD_BUSY_MIN_PERCENT,
        },
        Goal {
            name: "node busy CPU rise / what the batch pods got",
            value: format!("{:.0}m / {:.0}m", f.node_busy_rise_millis, f.batch_millis),
            bound: format!(">= {RISE_MIN_SHARE}"),
            met: f.batch_millis > 0.0 && f.node_busy_rise_millis >= RISE_MIN_SHARE * f.batch_millis,
        },
        Goal {
            name: "suppress reaction, median",
            value: format!("{:.1} ms", f.cut_median_ms),
            bound: format!("<= {} ms (suppress interval)", f.suppress_interval_ms),
            met: f.cut_median_ms <= f.suppress_interval_ms,
        },
        Goal {
            name: "suppress reaction, max",
            value: format!("{:.1} ms", f.cut_max_ms),
            bound: format!("<= {} ms (interval)", f.interval_ms),
            met: f.cut_max_ms <= f.interval_ms,
        },
        Goal {
            name: "advertised above the really idle CPU, longest",
            value: format!(
                "{:.0} ms ({} of {} samples)",
                f.exceeded_idle_longest_ms, f.exceeded_idle_samples, f.advertised_samples
            ),
            bound: format!("<= {} ms (interval + sample)", f.interval_ms + f.sample_ms),
            met: f.advertised_samples > 0
                && f.exceeded_idle_longest_ms <= f.interval_ms + f.sample_ms,
        },
    ]
}

/// The goals as a table, one line each: name, value, bound, `met` or `NOT MET`.
pub fn render(goals: &[Goal]) -> String {
    let w = goals.iter().map(|g| g.name.len()).max().unwrap_or(0);
    let v = goals.iter().map(|g| g.value.len()).max().unwrap_or(0);
    let b = goals.iter().map(|g| g.bound.len()).max().unwrap_or(0);
    goals
        .iter()
        .map(|g| {
            format!(
                "{:w$}  {:v$}  {:b$}  {}\n",
                g.name,
                g.value,
                g.bound,
                if g.met { "met" } else { "NOT MET" }
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Figures {
        Figures {
            throughput_ratio: 0.99,
            late_p99_ratio: 1.1,
            pool_busy_millis: 900.0,
            pool_millis: 1000.0,
            node_busy_rise_millis: 580.0,
            batch_millis: 600.0,
            cut_median_ms: 60.0,
            cut_max_ms: 400.0,
            suppress_interval_ms: 100.0,
            interval_ms: 1000.0,
            exceeded_idle_samples: 3,
            exceeded_idle_longest_ms: 800.0,
            sample_ms: 200.0,
            advertised_samples: 100,
        }
    }

    #[test]
    fn every_goal_met_on_good_figures() {
        let goals = judge(&good());
        assert_eq!(goals.len(), 7);
        assert!(goals.iter().all(|g| g.met), "{goals:?}");
    }

    #[test]
    fn each_goal_fails_on_its_own_figure() {
        let cases: Vec<(usize, Figures)> = vec![
            (
                0,
                Figures {
                    throughput_ratio: 0.969,
                    ..good()
                },
            ),
            (
                1,
                Figures {
                    late_p99_ratio: 1.21,
                    ..good()
                },
            ),
            (
                2,
                Figures {
                    pool_busy_millis: 849.0,
                    ..good()
                },
            ),
            (
                3,
                Figures {
                    node_busy_rise_millis: 500.0,
                    ..good()
                },
            ),
            (
                4,
                Figures {
                    cut_median_ms: 101.0,
                    ..good()
                },
            ),
            (
                5,
                Figures {
                    cut_max_ms: 1001.0,
                    ..good()
                },
            ),
            (
                6,
                Figures {
                    exceeded_idle_longest_ms: 1201.0,
                    ..good()
                },
            ),
        ];
        for (i, f) in cases {
            let goals = judge(&f);
            let failed: Vec<usize> = (0..goals.len()).filter(|&k| !goals[k].met).collect();
            assert_eq!(failed, vec![i], "{goals:?}");
        }
    }

    #[test]
    fn no_figures_is_no_goal_met() {
        assert!(judge(&Figures::default()).iter().any(|g| !g.met));
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&v, 50.0), Some(3.0));
        assert_eq!(percentile(&v, 99.0), Some(5.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn the_table_says_met_or_not() {
        let mut f = good();
        f.throughput_ratio = 0.5;
        let t = render(&judge(&f));
        let first = t.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("regular throughput colocated / solo"),
            "{t}"
        );
        assert!(first.ends_with("NOT MET"), "{t}");
        assert!(
            t.lines().nth(1).unwrap_or_default().ends_with("  met"),
            "{t}"
        );
    }
}
