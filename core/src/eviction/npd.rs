//! Node conditions in node-problem-detector's custom plugin protocol, for `topolet conditions`.
//!
//! Mirrors `pkg/custompluginmonitor/types/types.go` and `config.go` of
//! kubernetes/node-problem-detector: the plugin's exit status is the result (`OK` = 0,
//! `NonOK` = 1, `Unknown` = 2) and its standard output the condition message, of which NPD keeps
//! `max_output_length` bytes (default 80). The message here is one line, already cut to that
//! length on a character boundary.
//!
//! From one snapshot of observations (no history, so no grace or transition periods): a condition
//! is NonOK when any threshold (hard or soft) of its signals is met now, as the kubelet's
//! `nodeConditions` does before grace periods; Unknown when none is met but a configured signal
//! of the condition could not be observed; OK otherwise.

use std::collections::BTreeSet;

use crate::eviction::observe::{thresholds_met, Observations};
use crate::eviction::settings::EvictionConfig;
use crate::eviction::signal::{NodeCondition, Signal};

/// NPD's `defaultMaxOutputLength`.
pub const NPD_MAX_OUTPUT_LENGTH: usize = 80;

/// A custom plugin result status (its exit code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NpdStatus {
    Ok = 0,
    NonOk = 1,
    Unknown = 2,
}

impl NpdStatus {
    /// The process exit code NPD reads.
    pub fn exit_code(self) -> u8 {
        self as u8
    }
}

/// The plugin result: exit status and the one-line message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpdReport {
    pub status: NpdStatus,
    pub message: String,
}

/// Cut `text` to at most `max` bytes on a character boundary, first line only.
pub fn truncate_message(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.len() <= max {
        return line.to_string();
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

/// The report for `conditions` (all three when empty) from one snapshot of `observations`.
pub fn npd_report(
    config: &EvictionConfig,
    observations: &Observations,
    conditions: &BTreeSet<NodeCondition>,
) -> NpdReport {
    let wanted = |c: NodeCondition| conditions.is_empty() || conditions.contains(&c);
    let relevant: Vec<_> = config
        .thresholds
        .iter()
        .filter(|t| wanted(t.signal.condition()))
        .collect();
    let met = thresholds_met(relevant.iter().copied(), observations, false);
    if !met.is_empty() {
        let mut parts: Vec<String> = Vec::new();
        for c in NodeCondition::ALL {
            let of_c: Vec<String> = met
                .iter()
                .filter(|t| t.signal.condition() == c)
                .filter_map(|t| {
                    let o = observations.get(&t.signal)?;
                    Some(format!(
                        "{} {}<{}",
                        t.signal,
                        o.available,
                        t.value.amount(o.capacity)
                    ))
                })
                .collect();
            if !of_c.is_empty() {
                parts.push(format!("{c}: {}", of_c.join(", ")));
            }
        }
        return NpdReport {
            status: NpdStatus::NonOk,
            message: truncate_message(&parts.join("; "), NPD_MAX_OUTPUT_LENGTH),
        };
    }
    let unobserved: BTreeSet<Signal> = relevant
        .iter()
        .map(|t| t.signal)
        .filter(|s| !observations.contains_key(s))
        .collect();
    if !unobserved.is_empty() {
        let names: Vec<&str> = unobserved.iter().map(|s| s.as_str()).collect();
        return NpdReport {
            status: NpdStatus::Unknown,
            message: truncate_message(
                &format!("not observed: {}", names.join(", ")),
                NPD_MAX_OUTPUT_LENGTH,
            ),
        };
    }
    let names: Vec<&str> = NodeCondition::ALL
        .into_iter()
        .filter(|c| wanted(*c))
        .map(NodeCondition::as_str)
        .collect();
    NpdReport {
        status: NpdStatus::Ok,
        message: truncate_message(
            &format!("no {}", names.join(", no ")),
            NPD_MAX_OUTPUT_LENGTH,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::observe::observations_of;

    fn o(pairs: &[(Signal, i64, u64)]) -> Observations {
        observations_of(pairs)
    }

    #[test]
    fn ok_nonok_unknown() {
        let c = EvictionConfig::default();
        let all = BTreeSet::new();
        let fine = o(&[
            (Signal::MemoryAvailable, 4 << 30, 8 << 30),
            (Signal::NodeFsAvailable, 50, 100),
            (Signal::NodeFsInodesFree, 50, 100),
            (Signal::ImageFsAvailable, 50, 100),
            (Signal::ImageFsInodesFree, 50, 100),
        ]);
        let r = npd_report(&c, &fine, &all);
        assert_eq!(r.status, NpdStatus::Ok);
        assert_eq!(
            r.message,
            "no MemoryPressure, no DiskPressure, no PIDPressure"
        );
        let mut low = fine.clone();
        low.insert(
            Signal::NodeFsAvailable,
            o(&[(Signal::NodeFsAvailable, 5, 100)])[&Signal::NodeFsAvailable],
        );
        let r = npd_report(&c, &low, &all);
        assert_eq!((r.status, r.status.exit_code()), (NpdStatus::NonOk, 1));
        assert_eq!(r.message, "DiskPressure: nodefs.available 5<10");
        // Only the condition asked for.
        let mem = BTreeSet::from([NodeCondition::MemoryPressure]);
        assert_eq!(npd_report(&c, &low, &mem).status, NpdStatus::Ok);
        // Unobserved signals of the asked condition.
        let r = npd_report(&c, &o(&[]), &mem);
        assert_eq!(
            (r.status, r.message.as_str()),
            (NpdStatus::Unknown, "not observed: memory.available")
        );
        assert_eq!(r.status.exit_code(), 2);
    }

    #[test]
    fn messages_are_cut_to_one_short_line() {
        assert_eq!(truncate_message("a\nb", 80), "a");
        let long = "é".repeat(60);
        let cut = truncate_message(&long, NPD_MAX_OUTPUT_LENGTH);
        assert!(cut.len() <= NPD_MAX_OUTPUT_LENGTH && cut.chars().all(|c| c == 'é'));
        assert_eq!(cut.chars().count(), 40);
    }
}
