//! `CpuSet`: a set of logical CPU ids, in the Linux list format (`0-3,8,10-11`) used by
//! `cpuset.cpus`, `cpulist` files, OCI specs and NRI.
//!
//! Stored as a bitmap so that set algebra on 4096-CPU machines stays a few dozen word operations.
//! Parsing is strict (ranges must be ascending, ids below [`MAX_CPUS`]); `Display` always emits the
//! canonical, shortest form, so `parse(format(s)) == s` for every set.

use std::fmt;
use std::str::FromStr;

/// Highest CPU count topolet accepts (ids `0..MAX_CPUS`). Linux's default `NR_CPUS` on x86_64 is 8192.
pub const MAX_CPUS: usize = 8192;

const WORD: usize = 64;

/// A set of CPU ids.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// Bit `i % 64` of word `i / 64` is CPU `i`. Trailing zero words are trimmed, so equal sets are
    /// equal values.
    words: Vec<u64>,
}

/// Why a CPU list could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    #[error("invalid cpu list {text:?}: {reason}")]
    Invalid { text: String, reason: String },
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the Linux list format; whitespace around the text and around items is ignored, an empty
    /// string is the empty set.
    pub fn parse(text: &str) -> Result<Self, CpuSetError> {
        let invalid = |reason: String| CpuSetError::Invalid {
            text: text.to_string(),
            reason,
        };
        let mut set = CpuSet::new();
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Ok(set);
        }
        for item in trimmed.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(invalid("empty item".into()));
            }
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (parse_id(a, &invalid)?, parse_id(b, &invalid)?),
                None => {
                    let id = parse_id(item, &invalid)?;
                    (id, id)
                }
            };
            if lo > hi {
                return Err(invalid(format!("range {item:?} is descending")));
            }
            set.insert_range(lo, hi);
        }
        Ok(set)
    }

    /// The set `lo..=hi`.
    pub fn range(lo: usize, hi: usize) -> Self {
        let mut s = Self::new();
        if lo <= hi {
            s.insert_range(lo, hi);
        }
        s
    }

    fn insert_range(&mut self, lo: usize, hi: usize) {
        for id in lo..=hi {
            self.insert(id);
        }
    }

    /// Adds `cpu`; returns whether it was new.
    ///
    /// # Panics
    /// If `cpu >= MAX_CPUS` (a programming error: ids come from a parsed, bounded topology).
    pub fn insert(&mut self, cpu: usize) -> bool {
        assert!(cpu < MAX_CPUS, "cpu id {cpu} out of range");
        let (w, b) = (cpu / WORD, cpu % WORD);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        !was
    }

    /// Removes `cpu`; returns whether it was present.
    pub fn remove(&mut self, cpu: usize) -> bool {
        let (w, b) = (cpu / WORD, cpu % WORD);
        let Some(word) = self.words.get_mut(w) else {
            return false;
        };
        let was = *word & (1 << b) != 0;
        *word &= !(1 << b);
        self.trim();
        was
    }

    pub fn contains(&self, cpu: usize) -> bool {
        self.words
            .get(cpu / WORD)
            .is_some_and(|w| w & (1 << (cpu % WORD)) != 0)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Ascending iterator over the ids.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = usize> + '_ {
        self.words
            .iter()
            .enumerate()
            .flat_map(|(wi, &w)| Bits(w).map(move |b| wi * WORD + b))
    }

    /// Lowest id, if any.
    pub fn first(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .find(|(_, &w)| w != 0)
            .map(|(i, w)| i * WORD + w.trailing_zeros() as usize)
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n)
            .map(|i| self.word(i) | other.word(i))
            .collect::<Vec<_>>();
        CpuSet::from_words(words)
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().min(other.words.len());
        CpuSet::from_words((0..n).map(|i| self.word(i) & other.word(i)).collect())
    }

    /// `self − other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet::from_words(
            (0..self.words.len())
                .map(|i| self.word(i) & !other.word(i))
                .collect(),
        )
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        (0..self.words.len()).all(|i| self.word(i) & !other.word(i) == 0)
    }

    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        let n = self.words.len().min(other.words.len());
        (0..n).all(|i| self.word(i) & other.word(i) == 0)
    }

    /// In-place union.
    pub fn extend_from(&mut self, other: &CpuSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// In-place difference.
    pub fn remove_all(&mut self, other: &CpuSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= !b;
        }
        self.trim();
    }

    /// The lowest `n` ids of the set (all of it if it is smaller).
    pub fn lowest(&self, n: usize) -> CpuSet {
        self.iter().take(n).collect()
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    fn from_words(words: Vec<u64>) -> CpuSet {
        let mut s = CpuSet { words };
        s.trim();
        s
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }
}

/// The set bits of one word, lowest first (and highest first from the back), one
/// `trailing_zeros`/`leading_zeros` per bit instead of a test of all 64.
struct Bits(u64);

impl Iterator for Bits {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let b = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(b)
    }
}

impl DoubleEndedIterator for Bits {
    fn next_back(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let b = 63 - self.0.leading_zeros() as usize;
        self.0 &= !(1u64 << b);
        Some(b)
    }
}

fn parse_id(text: &str, invalid: &dyn Fn(String) -> CpuSetError) -> Result<usize, CpuSetError> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(format!("{t:?} is not a cpu id")));
    }
    match t.parse::<usize>() {
        Ok(id) if id < MAX_CPUS => Ok(id),
        _ => Err(invalid(format!(
            "cpu id {t} exceeds the limit of {MAX_CPUS}"
        ))),
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for id in iter {
            s.insert(id);
        }
        s
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse(s)
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(lo) = iter.next() {
            let mut hi = lo;
            while iter.peek() == Some(&(hi + 1)) {
                hi += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        CpuSet::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_formats_canonically() {
        for (input, canonical) in [
            ("", ""),
            ("0", "0"),
            ("0-3", "0-3"),
            ("0,1,2,3", "0-3"),
            (" 3, 1-2 ,0 ", "0-3"),
            ("0-1,4-5,8", "0-1,4-5,8"),
            ("4095", "4095"),
            ("1-1", "1"),
            ("0-2,2-4", "0-4"),
        ] {
            let s = CpuSet::parse(input).expect(input);
            assert_eq!(s.to_string(), canonical, "input {input:?}");
        }
    }

    #[test]
    fn rejects_malformed_lists_with_the_text_in_the_error() {
        for bad in [
            "a", "1-", "-1", "3-1", "1,,2", "1 2", "8192", "0x1", "1-2-3", "+1",
        ] {
            let err = CpuSet::parse(bad).expect_err(bad).to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn set_algebra() {
        let a = CpuSet::parse("0-7").unwrap();
        let b = CpuSet::parse("4-11").unwrap();
        assert_eq!(a.union(&b).to_string(), "0-11");
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert!(CpuSet::parse("1-2").unwrap().is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(a.difference(&b).is_disjoint(&b));
        assert_eq!(a.len(), 8);
        assert_eq!(b.first(), Some(4));
        assert_eq!(b.lowest(2).to_string(), "4-5");
        let mut c = a.clone();
        c.remove_all(&a);
        assert!(c.is_empty());
        assert_eq!(c, CpuSet::new());
    }

    #[test]
    fn removing_the_highest_cpu_keeps_equality() {
        let mut s = CpuSet::parse("1,200").unwrap();
        assert!(s.remove(200));
        assert_eq!(s, CpuSet::parse("1").unwrap());
        assert!(!s.remove(5000));
    }

    proptest! {
        #[test]
        fn format_parse_round_trip(ids in proptest::collection::btree_set(0usize..4096, 0..300)) {
            let s: CpuSet = ids.iter().copied().collect();
            let again = CpuSet::parse(&s.to_string()).unwrap();
            prop_assert_eq!(&again, &s);
            prop_assert_eq!(s.len(), ids.len());
            prop_assert_eq!(s.iter().collect::<Vec<_>>(), ids.into_iter().collect::<Vec<_>>());
        }

        #[test]
        fn algebra_matches_btreeset(
            a in proptest::collection::btree_set(0usize..300, 0..100),
            b in proptest::collection::btree_set(0usize..300, 0..100),
        ) {
            let (sa, sb): (CpuSet, CpuSet) = (a.iter().copied().collect(), b.iter().copied().collect());
            prop_assert_eq!(sa.iter().rev().collect::<Vec<_>>(), a.iter().rev().copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.union(&sb).iter().collect::<Vec<_>>(), a.union(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.intersection(&sb).iter().collect::<Vec<_>>(), a.intersection(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.difference(&sb).iter().collect::<Vec<_>>(), a.difference(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.is_subset(&sb), a.is_subset(&b));
            prop_assert_eq!(sa.is_disjoint(&sb), a.is_disjoint(&b));
        }

        #[test]
        fn parse_never_panics(text in ".{0,40}") {
            let _ = CpuSet::parse(&text);
        }
    }
}
