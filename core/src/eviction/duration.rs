//! Durations written as Go's `time.ParseDuration` accepts them (`"1m30s"`, `"5m"`, `"10s"`,
//! `"1.5h"`, `"300ms"`, `"0"`), the form KubeletConfiguration uses for
//! `evictionSoftGracePeriod` and `evictionPressureTransitionPeriod`.
//!
//! Mirrors Go's `time/format.go` `ParseDuration`: an optional sign, then one or more
//! `number unit` pairs, unit one of `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`; a bare `0` is
//! zero. Negative durations are rejected here (every eviction duration must be ≥ 0), as is
//! anything beyond `u64` nanoseconds.

use std::time::Duration;

/// A duration that does not parse, naming the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("invalid duration {0:?} (use e.g. \"90s\", \"1m30s\", \"5m\")")]
    Invalid(String),
    #[error("duration {0:?} must not be negative")]
    Negative(String),
    #[error("duration {0:?} is out of range")]
    OutOfRange(String),
}

/// Parse a Go duration string (see the module docs).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(text.to_string());
    let mut rest = text;
    let mut negative = false;
    if let Some(r) = rest.strip_prefix('-') {
        negative = true;
        rest = r;
    } else if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        // number: digits [. digits]
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(r) = rest.strip_prefix('.') {
            let frac_len = r.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &r[..frac_len];
            rest = &r[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let unit: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_len..];
        let out_of_range = || DurationError::OutOfRange(text.to_string());
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse::<u128>().map_err(|_| out_of_range())?
        };
        let mut nanos = whole.checked_mul(unit).ok_or_else(out_of_range)?;
        // Fractional digits, truncated to nanoseconds as Go does.
        let mut scale = unit;
        for d in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(d - b'0') * scale;
        }
        total = total.checked_add(nanos).ok_or_else(out_of_range)?;
        if total > u128::from(u64::MAX) {
            return Err(out_of_range());
        }
    }
    if negative && total != 0 {
        return Err(DurationError::Negative(text.to_string()));
    }
    Ok(Duration::from_nanos(total as u64))
}

/// The shortest Go-style spelling of `d` (`1m30s`, `5m0s` is written `5m`, `0s`).
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let mut out = String::new();
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    let nanos = d.subsec_nanos();
    if nanos > 0 {
        if s > 0 || out.is_empty() && !nanos.is_multiple_of(1_000_000) {
            let frac = format!("{:09}", nanos);
            out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
        } else {
            out.push_str(&format!("{}ms", nanos / 1_000_000));
        }
    } else if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        for (text, want) in [
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("10s", Duration::from_secs(10)),
            ("+10s", Duration::from_secs(10)),
            ("1m30s", Duration::from_secs(90)),
            ("5m", Duration::from_secs(300)),
            ("1.5h", Duration::from_secs(5400)),
            (".5s", Duration::from_millis(500)),
            ("1.s", Duration::from_secs(1)),
            ("300ms", Duration::from_millis(300)),
            ("1h1m1s1ms1us1ns", Duration::new(3661, 1_001_001)),
            ("2µs", Duration::from_micros(2)),
            ("1.0000000009s", Duration::from_secs(1)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in [
            "", "10", "s", "1x", "1m 30s", " 1s", "1..5s", ".s", "-", "1s-",
        ] {
            assert_eq!(
                parse_duration(bad),
                Err(DurationError::Invalid(bad.into())),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_duration("-1s"),
            Err(DurationError::Negative("-1s".into()))
        );
        assert!(matches!(
            parse_duration("99999999999999999999h"),
            Err(DurationError::OutOfRange(_))
        ));
    }

    #[test]
    fn formatting() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(300), "300ms"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
    }
}
