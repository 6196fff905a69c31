//! One interval's pressure as `topolet status` shows it ([`pressure_report`]), which the loop
//! publishes to [`PressureReport`](crate::pressure::PressureReport).

use std::collections::{BTreeMap, BTreeSet};

use crate::pressure::observation::Observed;
use crate::pressure::psi::{self, PressureByResource};
use topolet_core::eviction::{EvictionConfig, NodeCondition, Signal};
use topolet_core::report::status::{Pressure as StatusPressure, Signal as StatusSignal, Stall};

/// One interval's pressure as `topolet status` shows it: each observed signal's value with its
/// thresholds (in the signal's unit), every node condition, and the node's PSI stall lines.
pub fn pressure_report(
    config: &EvictionConfig,
    observed: &BTreeMap<Signal, Observed>,
    conditions: &BTreeSet<NodeCondition>,
    node_psi: &PressureByResource,
) -> StatusPressure {
    let mut signals: BTreeMap<String, StatusSignal> = observed
        .iter()
        .map(|(signal, o)| {
            let s = StatusSignal {
                signal: signal.to_string(),
                value: Some(o.available as f64),
                ..StatusSignal::default()
            };
            (signal.to_string(), s)
        })
        .collect();
    // A threshold shows with its signal's value, in the unit of the capacity observed.
    for t in &config.thresholds {
        let (Some(o), Some(s)) = (
            observed.get(&t.signal),
            signals.get_mut(&t.signal.to_string()),
        ) else {
            continue;
        };
        let kind = if t.is_hard() { "hard" } else { "soft" };
        s.thresholds
            .insert(kind.to_string(), t.amount(o.capacity, false) as f64);
    }
    let stall = psi::stall_lines(node_psi)
        .into_iter()
        .map(|s| Stall {
            resource: s.resource.to_string(),
            kind: s.kind.to_string(),
            avg10: s.avg10,
            avg60: s.avg60,
            avg300: s.avg300,
            total_seconds: s.total_us as f64 / 1e6,
        })
        .collect();
    StatusPressure {
        stall,
        node_reclaim: None,
        conditions: NodeCondition::ALL
            .iter()
            .map(|c| (c.as_str().to_string(), conditions.contains(c)))
            .collect(),
        signals: signals.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `topolet status` shows of one interval: each observed signal with its thresholds in
    /// the signal's unit (one that was not observed has none), every condition, PSI lines.
    #[test]
    fn the_pressure_report_of_an_interval() {
        use crate::pressure::psi::{Pressure as Psi, Stall as Line};
        use topolet_core::eviction::threshold::{Threshold, ThresholdValue};
        let config = EvictionConfig {
            thresholds: vec![
                Threshold::hard(
                    Signal::MemoryAvailable,
                    ThresholdValue::Quantity(100_000_000),
                ),
                Threshold::hard(Signal::NodeFsAvailable, ThresholdValue::Percentage(0.1)),
            ],
            ..EvictionConfig::default()
        };
        let observed = BTreeMap::from([(
            Signal::MemoryAvailable,
            Observed {
                available: 1_500_000_000,
                capacity: 4_000_000_000,
            },
        )]);
        let line = |total_us: u64| Line {
            avg10: 1.5,
            avg60: 0.5,
            avg300: 0.25,
            total_us,
        };
        let psi = PressureByResource::from([
            (
                "cpu",
                Psi {
                    some: line(3_000_000),
                    full: None,
                },
            ),
            (
                "memory",
                Psi {
                    some: line(1_500_000),
                    full: Some(line(500_000)),
                },
            ),
        ]);
        let p = pressure_report(
            &config,
            &observed,
            &BTreeSet::from([NodeCondition::PidPressure]),
            &psi,
        );
        assert_eq!(p.signals.len(), 1);
        assert_eq!(p.signals[0].signal, "memory.available");
        assert_eq!(p.signals[0].value, Some(1.5e9));
        assert_eq!(p.signals[0].thresholds["hard"], 1e8);
        assert_eq!(p.conditions.len(), NodeCondition::ALL.len());
        assert!(p.conditions["PIDPressure"]);
        assert!(!p.conditions["MemoryPressure"]);
        assert_eq!(p.stall.len(), 3);
        assert_eq!(
            (p.stall[2].resource.as_str(), p.stall[2].kind.as_str()),
            ("memory", "full")
        );
        assert_eq!(p.stall[1].total_seconds, 1.5);
    }
}
