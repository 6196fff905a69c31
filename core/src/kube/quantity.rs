//! Kubernetes resource quantities ("500m", "2", "1.5", "128Mi", "1G", "1e3", "10Ki").
//!
//! Owns the parsing of the quantity strings found in pod specs and their conversion to integer
//! millicores and bytes. Mirrors `k8s.io/apimachinery/pkg/api/resource` (quantity.go
//! `ParseQuantity` / `parseQuantityString`, suffix.go): the grammar is
//!
//! ```text
//! quantity        ::= signedNumber suffix
//! signedNumber    ::= number | sign number          sign ::= "+" | "-"
//! number          ::= digits | digits "." digits | digits "." | "." digits
//! suffix          ::= binarySI | decimalExponent | decimalSI
//! binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei   (powers of 1024)
//! decimalSI       ::= m | "" | k | M | G | T | P | E
//! decimalExponent ::= ("e" | "E") signedInteger     ("E" alone is exa)
//! ```
//!
//! No whitespace is allowed anywhere. Conversions round up (towards +infinity for positive values,
//! away from zero for negative ones) exactly as apimachinery's `MilliValue()` / `Value()` do, so
//! "0.1m" of CPU is 1 millicore and "0.5" bytes is 1 byte. Values are held exactly (up to 38
//! significant decimal digits; further digits only ever push a rounded-up result up by one, as they
//! would upstream). Percentages are not quantities: the eviction module owns those.

use thiserror::Error;

/// Errors from quantity parsing and conversion; each names the offending text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    /// The text does not follow the quantity grammar.
    #[error("invalid quantity {0:?}")]
    Invalid(String),
    /// The text is a valid quantity but its value does not fit the requested integer unit.
    #[error("quantity {0:?} is out of range")]
    OutOfRange(String),
    /// A negative value where only non-negative ones make sense (resource requests and limits).
    #[error("quantity {0:?} must not be negative")]
    Negative(String),
    /// A fractional value where a whole number is required (extended resources).
    #[error("quantity {0:?} must be a whole number")]
    NotInteger(String),
}

/// Maximum significant decimal digits kept exactly (fits `u128`).
const MAX_DIGITS: usize = 38;

/// A parsed quantity: `(-1)^negative * mantissa * 10^exp10 * 2^exp2`, plus `sticky` when
/// significant digits beyond `MAX_DIGITS` were dropped (the true magnitude is then slightly larger).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    text: String,
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
    sticky: bool,
}

impl Quantity {
    /// Parse a quantity string as apimachinery's `ParseQuantity` does.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let invalid = || QuantityError::Invalid(text.to_string());
        let bytes = text.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if let Some(&c) = bytes.first() {
            if c == b'+' || c == b'-' {
                negative = c == b'-';
                i = 1;
            }
        }
        let int_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = &text[int_start..i];
        let mut frac_digits = "";
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let frac_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            frac_digits = &text[frac_start..i];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid());
        }
        let suffix = &text[i..];
        let (exp10_suffix, exp2) = match suffix {
            "" => (0, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => {
                let exp = &s[1..];
                let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(invalid());
                }
                // Bound the exponent: anything this large overflows every unit we convert to,
                // anything this small rounds up to one unit.
                let e: i64 = exp.parse().map_err(|_| invalid())?;
                (e.clamp(-10_000, 10_000) as i32, 0)
            }
            _ => return Err(invalid()),
        };

        // Collect significant digits: strip leading zeros, keep at most MAX_DIGITS.
        let mut mantissa: u128 = 0;
        let mut kept = 0usize;
        let mut sticky = false;
        let mut exp10: i32 = exp10_suffix;
        let mut seen_nonzero = false;
        for (pos, b) in int_digits.bytes().chain(frac_digits.bytes()).enumerate() {
            let d = u128::from(b - b'0');
            let in_fraction = pos >= int_digits.len();
            if !seen_nonzero && d == 0 {
                if in_fraction {
                    exp10 -= 1;
                }
                continue;
            }
            seen_nonzero = true;
            if kept < MAX_DIGITS {
                mantissa = mantissa * 10 + d;
                kept += 1;
                if in_fraction {
                    exp10 -= 1;
                }
            } else {
                if d != 0 {
                    sticky = true;
                }
                if !in_fraction {
                    exp10 += 1;
                }
            }
        }
        Ok(Quantity {
            text: text.to_string(),
            negative: negative && mantissa != 0,
            mantissa,
            exp10,
            exp2,
            sticky,
        })
    }

    /// The text this quantity was parsed from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True when the value is exactly zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0 && !self.sticky
    }

    /// True when the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// The value scaled by `10^scale` rounded up (away from zero), as apimachinery's
    /// `ScaledValue(-scale)` does; `scale = 3` is `MilliValue()`, `scale = 0` is `Value()`.
    fn scaled_ceil(&self, scale: i32) -> Result<i64, QuantityError> {
        let out_of_range = || QuantityError::OutOfRange(self.text.clone());
        if self.mantissa == 0 {
            return Ok(0);
        }
        // exp2 is at most 60 (Ei), so the shift cannot overflow.
        let base = self
            .mantissa
            .checked_mul(1u128 << self.exp2)
            .ok_or_else(out_of_range)?;
        let e = self.exp10 + scale;
        let magnitude: u128 = if e >= 0 {
            if self.sticky {
                // Dropped digits sit above the unit: the value cannot be represented exactly.
                return Err(out_of_range());
            }
            let factor = 10u128.checked_pow(e as u32).ok_or_else(out_of_range)?;
            base.checked_mul(factor).ok_or_else(out_of_range)?
        } else {
            let neg = e.unsigned_abs();
            match 10u128.checked_pow(neg) {
                None => 1, // divisor above any u128 numerator: a non-zero value rounds up to 1
                Some(div) => {
                    let q = base / div;
                    if base % div != 0 || self.sticky {
                        q + 1
                    } else {
                        q
                    }
                }
            }
        };
        let v = i64::try_from(magnitude).map_err(|_| out_of_range())?;
        Ok(if self.negative { -v } else { v })
    }

    /// The value in thousandths, rounded up: CPU millicores (apimachinery `MilliValue()`).
    pub fn milli_value(&self) -> Result<i64, QuantityError> {
        self.scaled_ceil(3)
    }

    /// The value in units, rounded up: bytes for memory (apimachinery `Value()`).
    pub fn value(&self) -> Result<i64, QuantityError> {
        self.scaled_ceil(0)
    }

    /// True when the value is a whole number of units.
    pub fn is_integer(&self) -> bool {
        if self.mantissa == 0 {
            return true;
        }
        if self.sticky {
            return false;
        }
        if self.exp10 >= 0 {
            return true;
        }
        let base = match self.mantissa.checked_mul(1u128 << self.exp2) {
            Some(b) => b,
            None => return true, // astronomically large binary value: certainly integral
        };
        match 10u128.checked_pow(self.exp10.unsigned_abs()) {
            Some(div) => base % div == 0,
            None => false,
        }
    }
}

impl std::fmt::Display for Quantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Parse a non-negative quantity to millicores, rounding up (the kubelet's `MilliValue()` of a CPU quantity).
pub fn parse_millis(text: &str) -> Result<u64, QuantityError> {
    let q = Quantity::parse(text)?;
    if q.is_negative() {
        return Err(QuantityError::Negative(text.to_string()));
    }
    Ok(q.milli_value()?.unsigned_abs())
}

/// Parse a non-negative quantity to whole units (bytes for memory), rounding up (`Value()`).
pub fn parse_value(text: &str) -> Result<u64, QuantityError> {
    let q = Quantity::parse(text)?;
    if q.is_negative() {
        return Err(QuantityError::Negative(text.to_string()));
    }
    Ok(q.value()?.unsigned_abs())
}

/// Parse a non-negative whole-number quantity (extended resources such as `nvidia.com/gpu`).
pub fn parse_integer(text: &str) -> Result<u64, QuantityError> {
    let q = Quantity::parse(text)?;
    if q.is_negative() {
        return Err(QuantityError::Negative(text.to_string()));
    }
    if !q.is_integer() {
        return Err(QuantityError::NotInteger(text.to_string()));
    }
    Ok(q.value()?.unsigned_abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_forms() {
        for (text, millis) in [
            ("500m", 500),
            ("2", 2000),
            ("1.5", 1500),
            ("0.5", 500),
            (".5", 500),
            ("1.", 1000),
            ("0", 0),
            ("0m", 0),
            ("100m", 100),
            ("0.1m", 1), // rounds up like MilliValue
            ("1.0001", 1001),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("1e-3", 1),
            ("5e-4", 1),
            ("+3", 3000),
            ("1k", 1_000_000),
            ("0.000000000000000000000000000000000000000001", 1),
        ] {
            assert_eq!(parse_millis(text), Ok(millis), "{text}");
        }
    }

    #[test]
    fn memory_forms() {
        for (text, bytes) in [
            ("128Mi", 128 * 1024 * 1024),
            ("1G", 1_000_000_000),
            ("1Gi", 1 << 30),
            ("1.5Gi", 1_610_612_736),
            ("10Ki", 10_240),
            ("1k", 1000),
            ("1M", 1_000_000),
            ("1T", 1_000_000_000_000),
            ("1P", 1_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("1Ti", 1 << 40),
            ("1Pi", 1 << 50),
            ("1Ei", 1 << 60),
            ("1e3", 1000),
            ("1e+3", 1000),
            ("12e6", 12_000_000),
            ("129e6", 129_000_000),
            ("123Mi", 128_974_848),
            ("0.5", 1), // Value() rounds up
            ("100m", 1),
            ("1000m", 1),
            ("7999999999", 7_999_999_999),
        ] {
            assert_eq!(parse_value(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn malformed_inputs_name_the_text() {
        for text in [
            "", "abc", "1.2.3", "1 Gi", " 1", "1 ", "Gi", "1gi", "1ki", "1KI", "1e", "1e+", "1ee3",
            "1e3.5", "e3", ".", "+", "-", "1m5", "1Kib", "0x10", "1,5", "--1", "1%",
        ] {
            let err = parse_value(text).unwrap_err();
            assert_eq!(err, QuantityError::Invalid(text.to_string()), "{text}");
            assert_eq!(err.to_string(), format!("invalid quantity {text:?}"));
        }
    }

    #[test]
    fn range_and_sign() {
        assert_eq!(
            parse_value("-1"),
            Err(QuantityError::Negative("-1".to_string()))
        );
        assert_eq!(parse_value("-0"), Ok(0));
        assert_eq!(
            parse_value("100Ei"),
            Err(QuantityError::OutOfRange("100Ei".to_string()))
        );
        assert_eq!(
            parse_millis("1e30"),
            Err(QuantityError::OutOfRange("1e30".to_string()))
        );
        assert_eq!(parse_millis("1e-99999"), Ok(1));
        assert_eq!(
            Quantity::parse("-1.5").and_then(|q| q.milli_value()),
            Ok(-1500)
        );
        assert_eq!(
            parse_integer("1.5"),
            Err(QuantityError::NotInteger("1.5".to_string()))
        );
        assert_eq!(parse_integer("2"), Ok(2));
        assert_eq!(parse_integer("2000m"), Ok(2));
        assert_eq!(parse_integer("1k"), Ok(1000));
    }

    proptest::proptest! {
        #[test]
        fn integer_millis_round_trip(m in 0u64..10_000_000_000) {
            proptest::prop_assert_eq!(parse_millis(&format!("{m}m")), Ok(m));
            proptest::prop_assert_eq!(parse_value(&format!("{m}")), Ok(m));
            proptest::prop_assert_eq!(parse_value(&format!("{m}Ki")), Ok(m * 1024));
        }
    }
}
