//! `[reclaimed]` as written in TOML: reclaimed CPU (`topolet_core::reclaimed`), its keys,
//! defaults and checks. Every key but `resource_name` is applied by a reload, without restarting
//! anything; `resource_name` is read at start (`crate::config::reload::READ_AT_START`).

use std::time::Duration;

use serde::Deserialize;

use topolet_core::eviction::duration::{format_duration, parse_duration};
use topolet_core::reclaimed::{ReclaimedSettings, UsageSource};

/// `[reclaimed]`. Durations are Go durations (`"200ms"`, `"1m"`); shares are percentages of the
/// pool (the shared pool's CPUs that are neither reserved nor exclusive).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReclaimedSection {
    pub enabled: bool,
    pub resource_name: String,
    pub interval: String,
    pub suppress_interval: String,
    pub window: String,
    pub percentile: u8,
    pub margin_percent: u8,
    pub usage: String,
    pub min_change_percent: u8,
    pub max_age: String,
    pub grow_step_percent: u8,
    pub starved_percent: u8,
    pub starved_for: String,
    pub sched_idle: bool,
    /// Whether a clean stop removes the amount from the Node: [`WithdrawOnStop`].
    pub withdraw_on_stop: WithdrawOnStop,
}

/// `[reclaimed] withdraw_on_stop`: whether a clean stop (SIGTERM) removes the amount from the Node.
/// - `"auto"` (default): `"never"` with the in-cluster service account, `"always"` with a
///   kubeconfig ([`WithdrawOnStop::withdraws`]).
/// - `"always"`: every clean stop removes it; the next topolet writes its own once its usage
///   window has filled (a Node write per restart more, and nothing to place batch pods on
///   meanwhile).
/// - `"never"`: a clean stop leaves the last amount; the uninstall hook (`topolet withdraw`)
///   or a reload turning the feature off removes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WithdrawOnStop {
    #[default]
    Auto,
    Always,
    Never,
}

impl WithdrawOnStop {
    /// Whether a clean stop withdraws, for a process whose API credentials are the in-cluster
    /// service account's (`in_cluster`) or not. With the service account, topolet is a pod of
    /// its DaemonSet: a stop is a restart (a rolling update, an eviction, a crash) whose next
    /// instance takes the amount over, or an uninstall, whose post-delete hook
    /// (deploy/helm/topolet/templates/withdraw.yaml) withdraws on every node; a withdrawal here
    /// would cost a Node write, and the successor's re-advertisement another, per node and
    /// restart (docs/src/fleet.md). With a kubeconfig (a host service, a test) neither is
    /// known to follow.
    pub fn withdraws(self, in_cluster: bool) -> bool {
        match self {
            WithdrawOnStop::Always => true,
            WithdrawOnStop::Never => false,
            WithdrawOnStop::Auto => !in_cluster,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WithdrawOnStop::Auto => "auto",
            WithdrawOnStop::Always => "always",
            WithdrawOnStop::Never => "never",
        }
    }
}

impl Default for ReclaimedSection {
    fn default() -> Self {
        let d = ReclaimedSettings::default();
        ReclaimedSection {
            enabled: d.enabled,
            resource_name: d.resource_name,
            interval: format_duration(d.interval),
            suppress_interval: format_duration(d.suppress_interval),
            window: format_duration(d.window),
            percentile: d.percentile,
            margin_percent: d.margin_percent,
            usage: d.usage.as_str().to_string(),
            min_change_percent: d.min_change_percent,
            max_age: format_duration(d.max_age),
            grow_step_percent: d.grow_step_percent,
            starved_percent: d.starved_percent,
            starved_for: format_duration(d.starved_for),
            sched_idle: d.sched_idle,
            withdraw_on_stop: WithdrawOnStop::default(),
        }
    }
}

/// A bad `[reclaimed]` value: the key (without the section) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimedError {
    pub key: &'static str,
    pub message: String,
}

impl ReclaimedSection {
    /// The settings, every value checked; the error names the key.
    pub fn settings(&self) -> Result<ReclaimedSettings, ReclaimedError> {
        let err = |key: &'static str, message: String| ReclaimedError { key, message };
        let duration = |key: &'static str, text: &str| -> Result<Duration, ReclaimedError> {
            let d = parse_duration(text).map_err(|e| err(key, e.to_string()))?;
            if d.is_zero() {
                return Err(err(key, format!("{text:?} must be above zero")));
            }
            Ok(d)
        };
        let percent = |key: &'static str, v: u8, max: u8| -> Result<u8, ReclaimedError> {
            if v > max {
                return Err(err(key, format!("{v} is above {max}")));
            }
            Ok(v)
        };
        check_resource_name(&self.resource_name).map_err(|m| err("resource_name", m))?;
        let interval = duration("interval", &self.interval)?;
        let suppress_interval = duration("suppress_interval", &self.suppress_interval)?;
        if suppress_interval > interval {
            return Err(err(
                "suppress_interval",
                format!(
                    "{} is longer than interval ({}): the suppress loop must react within one interval",
                    self.suppress_interval, self.interval
                ),
            ));
        }
        if suppress_interval < Duration::from_millis(10) {
            return Err(err(
                "suppress_interval",
                format!("{} is below 10ms", self.suppress_interval),
            ));
        }
        let window = duration("window", &self.window)?;
        if window < interval {
            return Err(err(
                "window",
                format!(
                    "{} is shorter than interval ({}): it would hold no sample",
                    self.window, self.interval
                ),
            ));
        }
        if self.percentile == 0 {
            return Err(err("percentile", "must be 1–100 (100: the peak)".into()));
        }
        let usage = UsageSource::parse(&self.usage).ok_or_else(|| {
            err(
                "usage",
                format!("{:?}: use \"cpus\" or \"pods\"", self.usage),
            )
        })?;
        let grow_step_percent = percent("grow_step_percent", self.grow_step_percent, 100)?;
        if grow_step_percent == 0 {
            return Err(err(
                "grow_step_percent",
                "0 would never give the CPU back".into(),
            ));
        }
        Ok(ReclaimedSettings {
            enabled: self.enabled,
            resource_name: self.resource_name.clone(),
            interval,
            suppress_interval,
            window,
            percentile: percent("percentile", self.percentile, 100)?,
            margin_percent: percent("margin_percent", self.margin_percent, 100)?,
            usage,
            min_change_percent: percent("min_change_percent", self.min_change_percent, 100)?,
            max_age: duration("max_age", &self.max_age)?,
            grow_step_percent,
            starved_percent: percent("starved_percent", self.starved_percent, 100)?,
            starved_for: duration("starved_for", &self.starved_for)?,
            sched_idle: self.sched_idle,
        })
    }
}

/// An extended resource name the API server accepts (`pkg/apis/core/validation`
/// `validateResourceName` with `IsExtendedResourceName`): `domain/name`, the domain not
/// `kubernetes.io` or `requests.`-prefixed, both parts a qualified name's.
fn check_resource_name(name: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "{name:?}: {why} (e.g. \"topolet.io/reclaimed-cpu\")"
        ))
    };
    let Some((domain, rest)) = name.split_once('/') else {
        return bad("an extended resource name needs a domain prefix");
    };
    if domain.is_empty()
        || domain.len() > 253
        || !domain.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
    {
        return bad("the prefix must be a DNS subdomain");
    }
    if domain == "kubernetes.io"
        || domain.ends_with(".kubernetes.io")
        || domain == "k8s.io"
        || domain.ends_with(".k8s.io")
    {
        return bad("the kubernetes.io and k8s.io prefixes are reserved for native resources");
    }
    if name.starts_with("requests.") {
        return bad("the \"requests.\" prefix is reserved for quotas");
    }
    let ok_char = |b: u8| b.is_ascii_alphanumeric() || b"-_.".contains(&b);
    if rest.is_empty()
        || rest.len() > 63
        || !rest.bytes().all(ok_char)
        || !rest.as_bytes()[0].is_ascii_alphanumeric()
        || !rest.as_bytes()[rest.len() - 1].is_ascii_alphanumeric()
    {
        return bad("the name must be 1–63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_cores() {
        assert_eq!(
            ReclaimedSection::default().settings().unwrap(),
            ReclaimedSettings::default()
        );
    }

    /// "auto" keeps the amount over a stop only under the DaemonSet (the in-cluster service
    /// account), where a next instance or the uninstall hook follows.
    #[test]
    fn a_clean_stop_withdraws_unless_the_daemonset_restarts_topolet() {
        let parse = |v: &str| -> WithdrawOnStop {
            let s: ReclaimedSection =
                toml::from_str(&format!("withdraw_on_stop = \"{v}\"")).expect("parses");
            s.withdraw_on_stop
        };
        assert_eq!(
            ReclaimedSection::default().withdraw_on_stop,
            WithdrawOnStop::Auto
        );
        for (v, in_cluster, kubeconfig) in [
            ("auto", false, true),
            ("always", true, true),
            ("never", false, false),
        ] {
            let w = parse(v);
            assert_eq!(w.as_str(), v);
            assert_eq!(w.withdraws(true), in_cluster, "{v} in cluster");
            assert_eq!(w.withdraws(false), kubeconfig, "{v} with a kubeconfig");
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        type Change = fn(&mut ReclaimedSection);
        let cases: [(&str, Change); 9] = [
            ("resource_name", |s| {
                s.resource_name = "reclaimed-cpu".into()
            }),
            ("resource_name", |s| {
                s.resource_name = "kubernetes.io/batch-cpu".into()
            }),
            ("interval", |s| s.interval = "0".into()),
            ("interval", |s| s.interval = "soon".into()),
            ("suppress_interval", |s| s.suppress_interval = "2s".into()),
            ("window", |s| s.window = "500ms".into()),
            ("percentile", |s| s.percentile = 0),
            ("margin_percent", |s| s.margin_percent = 101),
            ("usage", |s| s.usage = "all".into()),
        ];
        for (key, change) in cases {
            let mut s = ReclaimedSection::default();
            change(&mut s);
            let e = s.settings().unwrap_err();
            assert_eq!(e.key, key, "{e:?}");
        }
    }

    #[test]
    fn resource_names_follow_the_api_servers_rule() {
        for ok in ["topolet.io/reclaimed-cpu", "example.com/batch_cpu.v2"] {
            assert_eq!(check_resource_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "cpu",
            "/x",
            "Example.com/x",
            "a.k8s.io/x",
            "example.com/-x",
            "example.com/",
        ] {
            assert!(check_resource_name(bad).is_err(), "{bad}");
        }
    }
}
