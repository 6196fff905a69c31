//! The `[eviction]` section of the configuration file: its TOML form ([`EvictionSection`]) and
//! its mapping into the core's [`EvictionConfig`] ([`EvictionSection::settings`]), with errors
//! naming the key.
//!
//! Same vocabulary as KubeletConfiguration (`evictionHard`, `evictionSoft`,
//! `evictionSoftGracePeriod`, `evictionMinimumReclaim`, `evictionPressureTransitionPeriod`,
//! `evictionMaxPodGracePeriod`); parsing mirrors `ParseThresholdConfig` in
//! `pkg/kubelet/eviction/helpers.go`; the defaults are the core's
//! (`topolet_core::eviction::settings`).
//!
//! Where this is stricter than the kubelet (each is an error here, accepted silently there): a
//! grace period for a signal with no soft threshold, a minimum reclaim for a signal with no
//! threshold, a minimum reclaim over 100%, a zero `interval`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use topolet_core::eviction::duration::{format_duration, parse_duration};
use topolet_core::eviction::settings::{
    KubeletImageGc, ReclaimSettings, DEFAULT_IMAGE_MINIMUM_GC_AGE,
};
use topolet_core::eviction::settings::{
    DEFAULT_CONDITION_HEARTBEAT, DEFAULT_HARD, DEFAULT_INTERVAL, DEFAULT_NODEFS_PATH,
    DEFAULT_PRESSURE_TRANSITION_PERIOD,
};
use topolet_core::eviction::signal::Signal;
use topolet_core::eviction::threshold::{
    parse_min_reclaim, parse_threshold_value, Threshold, ThresholdValue,
};
use topolet_core::eviction::{EvictionAction, EvictionConfig};

/// A TOML scalar kept as text: a string, or a number written without quotes (`1000`, `30`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalarText(pub String);

impl From<&str> for ScalarText {
    fn from(s: &str) -> Self {
        ScalarText(s.to_string())
    }
}

impl<'de> Deserialize<'de> for ScalarText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Float(f64),
            Text(String),
        }
        Ok(ScalarText(
            match Raw::deserialize(d)
                .map_err(|_| serde::de::Error::custom("expected a string or a number"))?
            {
                Raw::Int(n) => n.to_string(),
                Raw::Float(f) => f.to_string(),
                Raw::Text(t) => t,
            },
        ))
    }
}

/// `[eviction]` as written in TOML. Threshold tables are keyed by signal name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvictionSection {
    /// `evictionHard`. Absent: [`DEFAULT_HARD`]. Present (even empty): exactly these.
    pub hard: Option<BTreeMap<String, ScalarText>>,
    /// `evictionSoft`.
    pub soft: BTreeMap<String, ScalarText>,
    /// `evictionSoftGracePeriod`: durations such as `"1m30s"`.
    pub soft_grace_period: BTreeMap<String, ScalarText>,
    /// `evictionMinimumReclaim`.
    pub minimum_reclaim: BTreeMap<String, ScalarText>,
    /// `evictionPressureTransitionPeriod`.
    pub pressure_transition_period: ScalarText,
    /// `evictionMaxPodGracePeriod`: a duration, or a number of seconds. 0 = the pod's own.
    pub max_pod_grace_period: ScalarText,
    /// How often signals are observed and one pod at most is evicted.
    pub interval: ScalarText,
    /// Absent: [`EvictionAction::default_for`] the Kubernetes client.
    pub action: Option<EvictionAction>,
    /// Publish topolet's node conditions (`TopoletMemoryPressure`, …) on the Node when the
    /// Kubernetes API client is on.
    pub node_conditions: bool,
    /// How often unchanged node conditions are re-sent (their `lastHeartbeatTime`).
    pub node_condition_heartbeat: ScalarText,
    /// Taint the Node `NoSchedule` while topolet sees pressure.
    pub pressure_taint: bool,
    /// The runtime's CRI endpoint (`action = "cri"`, node-level reclaim). Absent: the runtime's
    /// own default, by the name it registers with over NRI (containerd's, or CRI-O's).
    pub cri_endpoint: Option<String>,
    /// A path on the node filesystem (`nodefs.*` signals): statvfs of it.
    pub nodefs_path: std::path::PathBuf,
    /// A path on the image filesystem (`imagefs.*` signals); the same filesystem as nodefs is
    /// detected and treated as one. Absent: the runtime's image store, by the name it registers
    /// with over NRI (containerd's root, or CRI-O's containers/storage).
    pub imagefs_path: Option<std::path::PathBuf>,
    /// Remove dead containers and unused images before evicting a pod for a disk signal (the
    /// kubelet's node-level reclaim).
    pub node_reclaim: bool,
    /// `imageMinimumGCAge`: an image first seen less than this long ago is never removed.
    pub image_minimum_gc_age: ScalarText,
    /// Images (names or ids) never removed, besides those the runtime reports pinned.
    pub pinned_images: Vec<String>,
    /// The kubelet's `imageGCHighThresholdPercent`, when its image GC runs on this node.
    pub image_gc_high_threshold_percent: Option<i64>,
    /// The kubelet's `imageGCLowThresholdPercent`, when its image GC runs on this node.
    pub image_gc_low_threshold_percent: Option<i64>,
}

impl Default for EvictionSection {
    fn default() -> Self {
        EvictionSection {
            hard: None,
            soft: BTreeMap::new(),
            soft_grace_period: BTreeMap::new(),
            minimum_reclaim: BTreeMap::new(),
            pressure_transition_period: ScalarText(format_duration(
                DEFAULT_PRESSURE_TRANSITION_PERIOD,
            )),
            max_pod_grace_period: ScalarText("0s".into()),
            interval: ScalarText(format_duration(DEFAULT_INTERVAL)),
            action: None,
            node_conditions: true,
            node_condition_heartbeat: ScalarText(format_duration(DEFAULT_CONDITION_HEARTBEAT)),
            pressure_taint: false,
            cri_endpoint: None,
            nodefs_path: DEFAULT_NODEFS_PATH.into(),
            imagefs_path: None,
            node_reclaim: true,
            image_minimum_gc_age: ScalarText(format_duration(DEFAULT_IMAGE_MINIMUM_GC_AGE)),
            pinned_images: Vec::new(),
            image_gc_high_threshold_percent: None,
            image_gc_low_threshold_percent: None,
        }
    }
}

/// A problem with one `[eviction]` key. `key` is the full dotted path
/// (`eviction.hard."memory.available"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct EvictionConfigError {
    pub key: String,
    pub message: String,
}

fn key(table: &str, signal: &str) -> String {
    format!("eviction.{table}.\"{signal}\"")
}

fn err(key: String, message: impl Into<String>) -> EvictionConfigError {
    EvictionConfigError {
        key,
        message: message.into(),
    }
}

fn signal_of(table: &str, name: &str) -> Result<Signal, EvictionConfigError> {
    Signal::parse(name).map_err(|e| err(key(table, name), e.to_string()))
}

/// Parse a threshold table (`hard` or `soft`) into signal → value (dropping `0%`/`100%`).
fn parse_table(
    table: &str,
    entries: &BTreeMap<String, ScalarText>,
) -> Result<BTreeMap<Signal, Option<ThresholdValue>>, EvictionConfigError> {
    let mut out = BTreeMap::new();
    for (name, text) in entries {
        let signal = signal_of(table, name)?;
        let value =
            parse_threshold_value(&text.0).map_err(|e| err(key(table, name), e.to_string()))?;
        out.insert(signal, value);
    }
    Ok(out)
}

fn duration(
    key: &str,
    text: &ScalarText,
    seconds_ok: bool,
) -> Result<Duration, EvictionConfigError> {
    if seconds_ok {
        if let Ok(n) = text.0.parse::<i64>() {
            return u64::try_from(n)
                .map(Duration::from_secs)
                .map_err(|_| err(key.to_string(), format!("{n} must not be negative")));
        }
    }
    parse_duration(&text.0).map_err(|e| err(key.to_string(), e.to_string()))
}

impl EvictionSection {
    /// The core's settings from this section (see the module docs for every rule).
    pub fn settings(&self) -> Result<EvictionConfig, EvictionConfigError> {
        let section = self;
        let hard = match &section.hard {
            Some(t) => parse_table("hard", t)?,
            None => DEFAULT_HARD
                .iter()
                .map(|(s, v)| {
                    Ok((
                        *s,
                        parse_threshold_value(v)
                            .map_err(|e| err(key("hard", s.as_str()), e.to_string()))?,
                    ))
                })
                .collect::<Result<_, EvictionConfigError>>()?,
        };
        let soft = parse_table("soft", &section.soft)?;
        let mut grace = BTreeMap::new();
        for (name, text) in &section.soft_grace_period {
            let signal = signal_of("soft_grace_period", name)?;
            let k = key("soft_grace_period", name);
            let d = parse_duration(&text.0).map_err(|e| err(k.clone(), e.to_string()))?;
            if !soft.contains_key(&signal) {
                return Err(err(
                    k,
                    format!("grace period without a soft threshold: set eviction.soft.\"{name}\" too or remove it"),
                ));
            }
            grace.insert(signal, d);
        }
        let mut reclaim = BTreeMap::new();
        for (name, text) in &section.minimum_reclaim {
            let signal = signal_of("minimum_reclaim", name)?;
            let k = key("minimum_reclaim", name);
            let v = parse_min_reclaim(&text.0).map_err(|e| err(k.clone(), e.to_string()))?;
            let has_threshold = hard.get(&signal).is_some_and(Option::is_some)
                || soft.get(&signal).is_some_and(Option::is_some);
            if !has_threshold {
                return Err(err(
                    k,
                    format!("minimum reclaim for a signal with no hard or soft threshold ({name})"),
                ));
            }
            reclaim.insert(signal, v);
        }
        let mut thresholds = Vec::new();
        for (signal, value) in &hard {
            if let Some(value) = value {
                thresholds.push(Threshold {
                    min_reclaim: reclaim.get(signal).cloned(),
                    ..Threshold::hard(*signal, value.clone())
                });
            }
        }
        for (signal, value) in &soft {
            // A soft "0%"/"100%" is dropped before the grace period check, as in the kubelet.
            let Some(value) = value else { continue };
            let Some(period) = grace.get(signal) else {
                return Err(err(
                    key("soft", signal.as_str()),
                    format!(
                        "soft threshold without a grace period: set eviction.soft_grace_period.\"{signal}\""
                    ),
                ));
            };
            thresholds.push(Threshold {
                grace_period: Some(*period),
                min_reclaim: reclaim.get(signal).cloned(),
                ..Threshold::hard(*signal, value.clone())
            });
        }
        let pressure_transition_period = duration(
            "eviction.pressure_transition_period",
            &section.pressure_transition_period,
            false,
        )?;
        let max_pod_grace_period = duration(
            "eviction.max_pod_grace_period",
            &section.max_pod_grace_period,
            true,
        )?;
        let interval = duration("eviction.interval", &section.interval, false)?;
        if interval.is_zero() {
            return Err(err("eviction.interval".into(), "must be longer than 0s"));
        }
        let node_condition_heartbeat = duration(
            "eviction.node_condition_heartbeat",
            &section.node_condition_heartbeat,
            false,
        )?;
        if node_condition_heartbeat.is_zero() {
            return Err(err(
                "eviction.node_condition_heartbeat".into(),
                "must be longer than 0s",
            ));
        }
        if section
            .cri_endpoint
            .as_deref()
            .is_some_and(|e| e.trim().is_empty())
        {
            return Err(err(
                "eviction.cri_endpoint".into(),
                "must not be empty (leave it out for the runtime's own)",
            ));
        }
        for (key, path) in [
            ("eviction.nodefs_path", Some(&section.nodefs_path)),
            ("eviction.imagefs_path", section.imagefs_path.as_ref()),
        ] {
            let Some(path) = path else { continue };
            if !path.is_absolute() {
                return Err(err(
                    key.into(),
                    format!("{} is not an absolute path", path.display()),
                ));
            }
        }
        let reclaim = section.reclaim_settings()?;
        Ok(EvictionConfig {
            thresholds,
            pressure_transition_period,
            max_pod_grace_period,
            interval,
            action: section.action,
            node_conditions: section.node_conditions,
            node_condition_heartbeat,
            pressure_taint: section.pressure_taint,
            cri_endpoint: section.cri_endpoint.clone(),
            nodefs_path: section.nodefs_path.clone(),
            imagefs_path: section.imagefs_path.clone(),
            reclaim,
        })
    }

    /// The node-level reclaim keys. The kubelet's image GC thresholds come as a pair, each
    /// 0–100, low under high (the kubelet's own validation, `validation.go`).
    fn reclaim_settings(&self) -> Result<ReclaimSettings, EvictionConfigError> {
        let image_minimum_age = duration(
            "eviction.image_minimum_gc_age",
            &self.image_minimum_gc_age,
            false,
        )?;
        let percent = |key: &str, v: Option<i64>| -> Result<Option<u8>, EvictionConfigError> {
            v.map(|n| {
                u8::try_from(n)
                    .ok()
                    .filter(|p| *p <= 100)
                    .ok_or_else(|| err(key.into(), format!("{n} is not a percentage (0 to 100)")))
            })
            .transpose()
        };
        let high = percent(
            "eviction.image_gc_high_threshold_percent",
            self.image_gc_high_threshold_percent,
        )?;
        let low = percent(
            "eviction.image_gc_low_threshold_percent",
            self.image_gc_low_threshold_percent,
        )?;
        let kubelet_image_gc = match (high, low) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(err(
                    "eviction.image_gc_low_threshold_percent".into(),
                    "must be set with eviction.image_gc_high_threshold_percent (the kubelet's \
                     imageGCLowThresholdPercent)",
                ))
            }
            (None, Some(_)) => {
                return Err(err(
                    "eviction.image_gc_high_threshold_percent".into(),
                    "must be set with eviction.image_gc_low_threshold_percent (the kubelet's \
                     imageGCHighThresholdPercent)",
                ))
            }
            (Some(high_percent), Some(low_percent)) => {
                if low_percent >= high_percent {
                    return Err(err(
                        "eviction.image_gc_low_threshold_percent".into(),
                        format!(
                            "{low_percent} must be less than \
                             eviction.image_gc_high_threshold_percent ({high_percent})"
                        ),
                    ));
                }
                Some(KubeletImageGc {
                    high_percent,
                    low_percent,
                })
            }
        };
        for (i, name) in self.pinned_images.iter().enumerate() {
            if name.trim().is_empty() {
                return Err(err(
                    format!("eviction.pinned_images[{i}]"),
                    "must not be empty",
                ));
            }
        }
        Ok(ReclaimSettings {
            enabled: self.node_reclaim,
            image_minimum_age,
            pinned_images: self.pinned_images.clone(),
            kubelet_image_gc,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: u64 = 1 << 20;

    fn section(hard: &[(&str, &str)]) -> EvictionSection {
        EvictionSection {
            hard: Some(
                hard.iter()
                    .map(|(k, v)| (k.to_string(), ScalarText::from(*v)))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    /// The default section is the core's default settings.
    #[test]
    fn default_section_is_the_default_settings() {
        assert_eq!(
            EvictionSection::default().settings().unwrap(),
            EvictionConfig::default()
        );
        for (signal, text) in DEFAULT_HARD {
            assert!(
                parse_threshold_value(text).unwrap().is_some(),
                "{signal} {text}"
            );
        }
    }

    /// `TestParseThresholdConfig`'s cases, with errors naming the key.
    #[test]
    fn parse_threshold_config() {
        let tbl = |pairs: &[(&str, &str)]| -> BTreeMap<String, ScalarText> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ScalarText::from(*v)))
                .collect()
        };
        // no values: the kubelet's defaults.
        let d = EvictionSection::default().settings().unwrap();
        let got: Vec<String> = d.thresholds.iter().map(|t| t.to_string()).collect();
        assert_eq!(
            got,
            [
                "memory.available<104857600",
                "nodefs.available<10%",
                "nodefs.inodesFree<5%",
                "imagefs.available<15%",
                "imagefs.inodesFree<5%"
            ]
        );
        // all memory eviction values
        let s = EvictionSection {
            hard: Some(tbl(&[("memory.available", "150Mi")])),
            soft: tbl(&[("memory.available", "300Mi")]),
            soft_grace_period: tbl(&[("memory.available", "30s")]),
            minimum_reclaim: tbl(&[("memory.available", "0")]),
            ..Default::default()
        };
        let c = s.settings().unwrap();
        assert_eq!(
            c.thresholds,
            [
                Threshold {
                    min_reclaim: Some(ThresholdValue::Quantity(0)),
                    ..Threshold::hard(Signal::MemoryAvailable, ThresholdValue::Quantity(150 * MI))
                },
                Threshold {
                    grace_period: Some(Duration::from_secs(30)),
                    min_reclaim: Some(ThresholdValue::Quantity(0)),
                    ..Threshold::hard(Signal::MemoryAvailable, ThresholdValue::Quantity(300 * MI))
                },
            ]
        );
        // percentage values; "0%" and "100%" disable.
        let s = EvictionSection {
            hard: Some(tbl(&[
                ("memory.available", "10%"),
                ("nodefs.available", "0%"),
                ("pid.available", "100%"),
            ])),
            soft: tbl(&[("memory.available", "30%")]),
            soft_grace_period: tbl(&[("memory.available", "30s")]),
            minimum_reclaim: tbl(&[("memory.available", "5%")]),
            ..Default::default()
        };
        let c = s.settings().unwrap();
        assert_eq!(c.thresholds.len(), 2);
        assert_eq!(c.thresholds[0].value, ThresholdValue::Percentage(0.1));
        assert_eq!(
            c.thresholds[1].min_reclaim,
            Some(ThresholdValue::Percentage(0.05))
        );
        // An empty hard table: no hard thresholds at all.
        assert!(section(&[]).settings().unwrap().thresholds.is_empty());
        // Errors, each naming the key.
        let cases: Vec<(EvictionSection, &str)> = vec![
            (section(&[("memory.availble", "1Gi")]), "eviction.hard.\"memory.availble\": unknown signal"),
            (section(&[("allocatableMemory.available", "1Gi")]), "eviction.hard.\"allocatableMemory.available\": unknown signal"),
            (section(&[("memory.available", "-150Mi")]), "eviction.hard.\"memory.available\": \"-150Mi\" must not be negative"),
            (section(&[("memory.available", "0")]), "eviction.hard.\"memory.available\": \"0\" must be positive"),
            (section(&[("memory.available", "-15%")]), "eviction.hard.\"memory.available\": \"-15%\" must not be negative"),
            (section(&[("memory.available", "150%")]), "eviction.hard.\"memory.available\": \"150%\" is over 100%"),
            (section(&[("memory.available", "lots")]), "eviction.hard.\"memory.available\": invalid quantity"),
            (
                EvictionSection { soft: tbl(&[("memory.available", "-150Mi")]), soft_grace_period: tbl(&[("memory.available", "30s")]), ..Default::default() },
                "eviction.soft.\"memory.available\": \"-150Mi\" must not be negative",
            ),
            (
                EvictionSection { soft: tbl(&[("memory.available", "150Mi")]), ..Default::default() },
                "eviction.soft.\"memory.available\": soft threshold without a grace period",
            ),
            (
                EvictionSection { soft: tbl(&[("memory.available", "150Mi")]), soft_grace_period: tbl(&[("memory.available", "-30s")]), ..Default::default() },
                "eviction.soft_grace_period.\"memory.available\": duration \"-30s\" must not be negative",
            ),
            (
                EvictionSection { soft: tbl(&[("memory.available", "150Mi")]), soft_grace_period: tbl(&[("memory.available", "30")]), ..Default::default() },
                "eviction.soft_grace_period.\"memory.available\": invalid duration",
            ),
            (
                EvictionSection { soft_grace_period: tbl(&[("memory.available", "30s")]), ..Default::default() },
                "eviction.soft_grace_period.\"memory.available\": grace period without a soft threshold",
            ),
            (
                EvictionSection { minimum_reclaim: tbl(&[("memory.available", "-300Mi")]), ..Default::default() },
                "eviction.minimum_reclaim.\"memory.available\": \"-300Mi\" must not be negative",
            ),
            (
                EvictionSection { minimum_reclaim: tbl(&[("memory.available", "-15%")]), ..Default::default() },
                "eviction.minimum_reclaim.\"memory.available\": \"-15%\" must be positive",
            ),
            (
                EvictionSection { minimum_reclaim: tbl(&[("pid.available", "10")]), ..Default::default() },
                "eviction.minimum_reclaim.\"pid.available\": minimum reclaim for a signal with no hard or soft threshold",
            ),
            (
                EvictionSection { minimum_reclaim: tbl(&[("nodefs.avail", "10")]), ..Default::default() },
                "eviction.minimum_reclaim.\"nodefs.avail\": unknown signal",
            ),
            (
                EvictionSection { pressure_transition_period: ScalarText::from("5 minutes"), ..Default::default() },
                "eviction.pressure_transition_period: invalid duration",
            ),
            (
                EvictionSection { interval: ScalarText::from("0s"), ..Default::default() },
                "eviction.interval: must be longer than 0s",
            ),
            (
                EvictionSection { max_pod_grace_period: ScalarText::from("-1"), ..Default::default() },
                "eviction.max_pod_grace_period: -1 must not be negative",
            ),
            (
                EvictionSection { image_minimum_gc_age: ScalarText::from("2 minutes"), ..Default::default() },
                "eviction.image_minimum_gc_age: invalid duration",
            ),
            (
                EvictionSection { image_gc_high_threshold_percent: Some(101), image_gc_low_threshold_percent: Some(80), ..Default::default() },
                "eviction.image_gc_high_threshold_percent: 101 is not a percentage",
            ),
            (
                EvictionSection { image_gc_high_threshold_percent: Some(85), ..Default::default() },
                "eviction.image_gc_low_threshold_percent: must be set with",
            ),
            (
                EvictionSection { image_gc_high_threshold_percent: Some(80), image_gc_low_threshold_percent: Some(80), ..Default::default() },
                "eviction.image_gc_low_threshold_percent: 80 must be less than",
            ),
            (
                EvictionSection { pinned_images: vec![" ".into()], ..Default::default() },
                "eviction.pinned_images[0]: must not be empty",
            ),
        ];
        for (s, want) in cases {
            let err = s.settings().unwrap_err().to_string();
            assert!(err.starts_with(want), "want {want:?}, got {err:?}");
        }
    }

    #[test]
    fn node_reclaim_keys_map_into_the_settings() {
        let section: EvictionSection = toml::from_str(
            "node_reclaim = false\nimage_minimum_gc_age = \"0s\"\npinned_images = [\"registry.k8s.io/pause:3.10.1\"]\nimage_gc_high_threshold_percent = 85\nimage_gc_low_threshold_percent = 80\n",
        )
        .unwrap();
        let r = section.settings().unwrap().reclaim;
        assert!(!r.enabled);
        assert_eq!(r.image_minimum_age, Duration::ZERO);
        assert_eq!(r.pinned_images, ["registry.k8s.io/pause:3.10.1"]);
        assert_eq!(
            r.kubelet_image_gc,
            Some(KubeletImageGc {
                high_percent: 85,
                low_percent: 80
            })
        );
        let d = EvictionSection::default().settings().unwrap().reclaim;
        assert_eq!(d, ReclaimSettings::default());
        assert!(
            toml::from_str::<EvictionSection>("image_gc_high_threshold_percent = \"85\"").is_err()
        );
    }
}
