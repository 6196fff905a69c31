//! Eviction thresholds: `signal < value`, hard or soft (with a grace period), with an optional
//! minimum reclaim, and how a threshold value becomes an amount for an observed capacity.
//!
//! Mirrors `pkg/kubelet/eviction/api/types.go` (`Threshold`, `ThresholdValue`,
//! `GetThresholdQuantity`) and the statement parsers of `pkg/kubelet/eviction/helpers.go`
//! (`parseThresholdStatement`, `parsePercentage`, `parseMinimumReclaims`). Percentages are kept
//! as the kubelet keeps them, an `f32` fraction, so `10%` of a capacity rounds exactly as there.

use std::fmt;
use std::time::Duration;

use crate::eviction::signal::Signal;
use crate::kube::quantity::Quantity;

/// The comparison of a threshold. The kubelet has only one (`OpLessThan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// Met when the observed available amount is below the threshold amount.
    LessThan,
}

/// An absolute amount or a share of the observed capacity.
#[derive(Debug, Clone, PartialEq)]
pub enum ThresholdValue {
    /// Bytes, inodes or pids (a quantity such as `500Mi` or `1000`, rounded up to a whole unit).
    Quantity(u64),
    /// A fraction of capacity in `0.0..=1.0` (`10%` is `0.1`), `f32` as the kubelet's.
    Percentage(f32),
}

impl ThresholdValue {
    /// `GetThresholdQuantity`: the amount for an observed `capacity`. Percentages are
    /// `int64(float64(capacity) * float64(percentage))`, truncated, as the kubelet computes them.
    pub fn amount(&self, capacity: u64) -> u64 {
        match self {
            ThresholdValue::Quantity(q) => *q,
            ThresholdValue::Percentage(p) => (capacity as f64 * f64::from(*p)) as u64,
        }
    }
}

impl fmt::Display for ThresholdValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThresholdValue::Quantity(q) => write!(f, "{q}"),
            ThresholdValue::Percentage(p) => {
                let text = format!("{:.4}", f64::from(*p) * 100.0);
                write!(f, "{}%", text.trim_end_matches('0').trim_end_matches('.'))
            }
        }
    }
}

/// One eviction threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub operator: Operator,
    pub value: ThresholdValue,
    /// `None` for a hard threshold; the soft threshold's grace period otherwise.
    pub grace_period: Option<Duration>,
    /// Once met, eviction continues until `available ≥ value + min_reclaim`.
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// A hard threshold `signal < value`.
    pub fn hard(signal: Signal, value: ThresholdValue) -> Threshold {
        Threshold {
            signal,
            operator: Operator::LessThan,
            value,
            grace_period: None,
            min_reclaim: None,
        }
    }

    /// `isHardEvictionThreshold`: no grace period, or a zero one (the kubelet treats a soft
    /// threshold with a `0s` grace period as hard).
    pub fn is_hard(&self) -> bool {
        match self.grace_period {
            None => true,
            Some(g) => g.is_zero(),
        }
    }

    /// The grace period that must pass with the threshold continuously met (zero for hard).
    pub fn grace(&self) -> Duration {
        self.grace_period.unwrap_or(Duration::ZERO)
    }

    /// Which threshold of the signal this is, for tracking across intervals.
    pub fn key(&self) -> ThresholdKey {
        ThresholdKey {
            signal: self.signal,
            soft: self.grace_period.is_some(),
        }
    }

    /// The threshold amount for `capacity`, plus the minimum reclaim when `with_min_reclaim`.
    pub fn amount(&self, capacity: u64, with_min_reclaim: bool) -> u64 {
        let base = self.value.amount(capacity);
        match (&self.min_reclaim, with_min_reclaim) {
            (Some(r), true) => base.saturating_add(r.amount(capacity)),
            _ => base,
        }
    }

    /// `thresholdsMet` for one threshold: `available < amount` (with min reclaim added when
    /// `enforce_min_reclaim`).
    pub fn is_met(&self, available: i64, capacity: u64, enforce_min_reclaim: bool) -> bool {
        match self.operator {
            Operator::LessThan => {
                i128::from(available) < i128::from(self.amount(capacity, enforce_min_reclaim))
            }
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}<{}", self.signal, self.value)?;
        if let Some(g) = self.grace_period {
            write!(
                f,
                " (soft, grace {})",
                crate::eviction::duration::format_duration(g)
            )?;
        }
        if let Some(r) = &self.min_reclaim {
            write!(f, " (min reclaim {r})")?;
        }
        Ok(())
    }
}

/// Identifies a configured threshold: at most one hard and one soft threshold per signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThresholdKey {
    pub signal: Signal,
    pub soft: bool,
}

/// Why a threshold value does not parse. The caller adds the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("invalid quantity {0:?}")]
    InvalidQuantity(String),
    #[error("invalid percentage {0:?}")]
    InvalidPercentage(String),
    #[error("{0:?} must be positive")]
    NotPositive(String),
    #[error("{0:?} must not be negative")]
    Negative(String),
    #[error("{0:?} is over 100%")]
    OverHundred(String),
    #[error("quantity {0:?} is out of range")]
    OutOfRange(String),
}

/// `parsePercentage`: `"10%"` → `0.1` (parsed as `f32`, as Go's `ParseFloat(…, 32)`).
fn parse_percentage(text: &str) -> Result<f32, ValueError> {
    let number = text.trim_end_matches('%');
    let valid = !number.is_empty()
        && number
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-' || b == b'+')
        && number
            .trim_start_matches(['-', '+'])
            .bytes()
            .any(|b| b.is_ascii_digit());
    let value: f32 = number
        .parse()
        .ok()
        .filter(|_| valid && text.len() - number.len() == 1)
        .ok_or_else(|| ValueError::InvalidPercentage(text.to_string()))?;
    Ok(value / 100.0)
}

fn parse_quantity(text: &str) -> Result<Quantity, ValueError> {
    Quantity::parse(text).map_err(|_| ValueError::InvalidQuantity(text.to_string()))
}

fn quantity_value(q: &Quantity, text: &str) -> Result<u64, ValueError> {
    q.value()
        .map(i64::unsigned_abs)
        .map_err(|_| ValueError::OutOfRange(text.to_string()))
}

/// `parseThresholdStatement`: the value of a hard or soft threshold. `Ok(None)` for exactly `"0%"`
/// or `"100%"`, which the kubelet ignores (a way to switch a threshold off). A percentage must be
/// in `0%..=100%`; a quantity must be positive (zero is refused, as the kubelet refuses it).
pub fn parse_threshold_value(text: &str) -> Result<Option<ThresholdValue>, ValueError> {
    if text.ends_with('%') {
        if text == "0%" || text == "100%" {
            return Ok(None);
        }
        let p = parse_percentage(text)?;
        if p < 0.0 {
            return Err(ValueError::Negative(text.to_string()));
        }
        if p > 1.0 {
            return Err(ValueError::OverHundred(text.to_string()));
        }
        return Ok(Some(ThresholdValue::Percentage(p)));
    }
    let q = parse_quantity(text)?;
    if q.is_negative() {
        return Err(ValueError::Negative(text.to_string()));
    }
    if q.is_zero() {
        return Err(ValueError::NotPositive(text.to_string()));
    }
    Ok(Some(ThresholdValue::Quantity(quantity_value(&q, text)?)))
}

/// `parseMinimumReclaims` for one value: a positive percentage (at most 100%, which the kubelet
/// does not check) or a non-negative quantity (`"0Mi"` is allowed).
pub fn parse_min_reclaim(text: &str) -> Result<ThresholdValue, ValueError> {
    if text.ends_with('%') {
        let p = parse_percentage(text)?;
        if p <= 0.0 {
            return Err(ValueError::NotPositive(text.to_string()));
        }
        if p > 1.0 {
            return Err(ValueError::OverHundred(text.to_string()));
        }
        return Ok(ThresholdValue::Percentage(p));
    }
    let q = parse_quantity(text)?;
    if q.is_negative() {
        return Err(ValueError::Negative(text.to_string()));
    }
    Ok(ThresholdValue::Quantity(quantity_value(&q, text)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        use ThresholdValue::*;
        for (text, want) in [
            ("100Mi", Some(Quantity(100 << 20))),
            ("1Gi", Some(Quantity(1 << 30))),
            ("1000", Some(Quantity(1000))),
            ("0.5", Some(Quantity(1))),
            ("10%", Some(Percentage(0.1))),
            ("5.5%", Some(Percentage(0.055))),
            ("0%", None),
            ("100%", None),
            ("0.0%", Some(Percentage(0.0))),
        ] {
            assert_eq!(parse_threshold_value(text), Ok(want), "{text}");
        }
        for (text, want) in [
            ("-1Mi", ValueError::Negative("-1Mi".into())),
            ("0", ValueError::NotPositive("0".into())),
            ("0Mi", ValueError::NotPositive("0Mi".into())),
            ("-5%", ValueError::Negative("-5%".into())),
            ("101%", ValueError::OverHundred("101%".into())),
            ("lots", ValueError::InvalidQuantity("lots".into())),
            ("1 Gi", ValueError::InvalidQuantity("1 Gi".into())),
            ("%", ValueError::InvalidPercentage("%".into())),
            ("ten%", ValueError::InvalidPercentage("ten%".into())),
            ("10%%", ValueError::InvalidPercentage("10%%".into())),
        ] {
            assert_eq!(parse_threshold_value(text), Err(want), "{text}");
        }
    }

    #[test]
    fn min_reclaims() {
        assert_eq!(parse_min_reclaim("0Mi"), Ok(ThresholdValue::Quantity(0)));
        assert_eq!(
            parse_min_reclaim("500Mi"),
            Ok(ThresholdValue::Quantity(500 << 20))
        );
        assert_eq!(
            parse_min_reclaim("5%"),
            Ok(ThresholdValue::Percentage(0.05))
        );
        assert_eq!(
            parse_min_reclaim("0%"),
            Err(ValueError::NotPositive("0%".into()))
        );
        assert_eq!(
            parse_min_reclaim("-1"),
            Err(ValueError::Negative("-1".into()))
        );
        assert_eq!(
            parse_min_reclaim("150%"),
            Err(ValueError::OverHundred("150%".into()))
        );
    }

    /// `TestGetThresholdQuantity`-style: percentages truncate after an `f32` fraction.
    #[test]
    fn amounts() {
        assert_eq!(ThresholdValue::Quantity(500).amount(10_000), 500);
        assert_eq!(ThresholdValue::Percentage(0.1).amount(10_000), 1000);
        assert_eq!(ThresholdValue::Percentage(0.05).amount(1 << 30), 53_687_092);
        let t = Threshold {
            min_reclaim: Some(ThresholdValue::Quantity(50)),
            ..Threshold::hard(Signal::MemoryAvailable, ThresholdValue::Quantity(100))
        };
        assert!(t.is_met(99, 1000, false));
        assert!(!t.is_met(100, 1000, false));
        assert!(t.is_met(149, 1000, true));
        assert!(!t.is_met(150, 1000, true));
        assert!(t.is_met(-5, 1000, false));
        assert!(t.is_hard());
    }
}
