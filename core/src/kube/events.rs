//! Kubernetes Event correlation, as client-go's event recorder does it (`tools/record`'s
//! `EventCorrelator`), as pure logic with the time passed in: what the recorder should send the
//! API for one occurrence of an Event.
//!
//! - **Series.** The same (object, type, reason, message) seen again within [`SERIES_WINDOW`] of
//!   its last occurrence is not a new Event object: the existing one's `count` and
//!   `lastTimestamp` are patched. Later than that, a new object starts.
//! - **Spam filter.** A token bucket per object (client-go's `EventSourceObjectSpamFilter`):
//!   [`BURST`] tokens, one more every [`REFILL`]. An occurrence finding no token is counted into
//!   its series but sends nothing; the next one that finds a token carries the whole count. The
//!   kubelet retries a refused in-place resize every second: 25 requests, then one per five
//!   minutes, whatever the retry rate.
//! - **Bounded.** At most [`MAX_SERIES`] series and [`MAX_OBJECTS`] buckets (client-go's LRU
//!   size): the least recently seen are forgotten first; [`Correlator::forget_object`] drops a
//!   removed pod's at once.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// How long after its last occurrence an Event still counts up instead of starting a new object.
pub const SERIES_WINDOW: Duration = Duration::from_secs(10 * 60);
/// Requests one object may send at once (client-go `defaultSpamBurst`).
pub const BURST: u32 = 25;
/// One more request per object every this long (client-go `defaultSpamQPS` = 1/300).
pub const REFILL: Duration = Duration::from_secs(5 * 60);
/// Series remembered (client-go `maxLruCacheEntries`).
pub const MAX_SERIES: usize = 4096;
/// Objects whose buckets are remembered.
pub const MAX_OBJECTS: usize = 4096;
/// Longest Event message the API accepts (`NoteLengthLimit`, 1 KiB).
pub const MAX_MESSAGE: usize = 1024;
/// Longest object name.
const MAX_NAME: usize = 253;

/// The object an Event is about: a pod, or the Node ([`ObjectRef::node`]); the recorder fills in
/// `kind` and `apiVersion: v1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl ObjectRef {
    /// The Node `name`: cluster-scoped (no namespace), its name as uid, as the kubelet's node
    /// reference is.
    pub fn node(name: &str) -> ObjectRef {
        ObjectRef {
            namespace: String::new(),
            name: name.to_string(),
            uid: name.to_string(),
        }
    }

    /// A cluster-scoped object: the Node (the only one topolet reports on).
    pub fn is_node(&self) -> bool {
        self.namespace.is_empty()
    }

    /// The namespace its Events live in: its own; `default` for the Node, where the kubelet
    /// records node Events.
    pub fn event_namespace(&self) -> &str {
        if self.is_node() {
            "default"
        } else {
            &self.namespace
        }
    }
}

/// `type` of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One occurrence of an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occurrence {
    pub object: ObjectRef,
    pub type_: EventType,
    /// CamelCase, e.g. `TopologyAffinityError`.
    pub reason: String,
    pub message: String,
}

impl Occurrence {
    /// An occurrence with `message` cut to [`MAX_MESSAGE`] bytes (at a character boundary).
    pub fn new(object: ObjectRef, type_: EventType, reason: &str, message: &str) -> Occurrence {
        Occurrence {
            object,
            type_,
            reason: reason.to_string(),
            message: truncate(message, MAX_MESSAGE).to_string(),
        }
    }
}

/// What to send the API for one occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create Event object `name` (namespace: the object's).
    Create {
        name: String,
        count: u32,
        first: SystemTime,
        last: SystemTime,
    },
    /// Patch Event object `name`'s `count` and `lastTimestamp`.
    Patch {
        name: String,
        count: u32,
        first: SystemTime,
        last: SystemTime,
    },
    /// The object's bucket is empty: send nothing (the occurrence is counted in its series).
    RateLimited,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    uid: String,
    type_: EventType,
    reason: String,
    message: String,
}

#[derive(Debug, Clone)]
struct Series {
    name: String,
    count: u32,
    first: SystemTime,
    last: SystemTime,
    /// A Create was handed out (and not reported failed): later occurrences patch.
    created: bool,
}

/// A token bucket kept in exact units: refill time banked (a token is [`REFILL`] of it).
#[derive(Debug, Clone)]
struct Bucket {
    credit: Duration,
    at: SystemTime,
}

/// The recorder's memory of recent Events (see the module doc).
#[derive(Debug, Default)]
pub struct Correlator {
    series: HashMap<SeriesKey, Series>,
    buckets: HashMap<String, Bucket>,
    /// The last name's timestamp part, so that two Events of one instant get distinct names.
    last_name_nanos: u128,
}

fn elapsed(from: SystemTime, to: SystemTime) -> Duration {
    // A clock stepped back counts as no time passed.
    to.duration_since(from).unwrap_or(Duration::ZERO)
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Correlator {
    pub fn new() -> Correlator {
        Correlator::default()
    }

    /// Records `occ` at `now` and says what to send.
    pub fn observe(&mut self, occ: &Occurrence, now: SystemTime) -> Action {
        let key = SeriesKey {
            uid: occ.object.uid.clone(),
            type_: occ.type_,
            reason: occ.reason.clone(),
            message: occ.message.clone(),
        };
        let fresh = match self.series.get(&key) {
            Some(s) => elapsed(s.last, now) >= SERIES_WINDOW,
            None => true,
        };
        if fresh {
            if !self.series.contains_key(&key) && self.series.len() >= MAX_SERIES {
                self.evict_series(now);
            }
            let name = self.new_name(&occ.object.name, now);
            self.series.insert(
                key.clone(),
                Series {
                    name,
                    count: 0,
                    first: now,
                    last: now,
                    created: false,
                },
            );
        }
        let allowed = self.take_token(&occ.object.uid, now);
        let Some(s) = self.series.get_mut(&key) else {
            return Action::RateLimited;
        };
        s.count = s.count.saturating_add(1);
        s.last = now;
        if !allowed {
            return Action::RateLimited;
        }
        if s.created {
            Action::Patch {
                name: s.name.clone(),
                count: s.count,
                first: s.first,
                last: s.last,
            }
        } else {
            s.created = true;
            Action::Create {
                name: s.name.clone(),
                count: s.count,
                first: s.first,
                last: s.last,
            }
        }
    }

    /// The Create for `occ` handed out last did not make it (an API error): the next occurrence
    /// creates again.
    pub fn create_failed(&mut self, occ: &Occurrence) {
        let key = SeriesKey {
            uid: occ.object.uid.clone(),
            type_: occ.type_,
            reason: occ.reason.clone(),
            message: occ.message.clone(),
        };
        if let Some(s) = self.series.get_mut(&key) {
            s.created = false;
        }
    }

    /// Forgets everything about object `uid` (the pod is gone).
    pub fn forget_object(&mut self, uid: &str) {
        self.series.retain(|k, _| k.uid != uid);
        self.buckets.remove(uid);
    }

    /// Series and buckets remembered (tests, status).
    pub fn len(&self) -> (usize, usize) {
        (self.series.len(), self.buckets.len())
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty() && self.buckets.is_empty()
    }

    fn take_token(&mut self, uid: &str, now: SystemTime) -> bool {
        if !self.buckets.contains_key(uid) && self.buckets.len() >= MAX_OBJECTS {
            // The least recently used bucket goes (a full one would be re-created full anyway).
            if let Some(oldest) = self
                .buckets
                .iter()
                .min_by_key(|(_, b)| b.at)
                .map(|(k, _)| k.clone())
            {
                self.buckets.remove(&oldest);
            }
        }
        let full = REFILL * BURST;
        let b = self.buckets.entry(uid.to_string()).or_insert(Bucket {
            credit: full,
            at: now,
        });
        b.credit = (b.credit + elapsed(b.at, now)).min(full);
        // The bucket's clock only moves forward.
        if now > b.at {
            b.at = now;
        }
        if b.credit >= REFILL {
            b.credit -= REFILL;
            true
        } else {
            false
        }
    }

    /// Drops series past their window; if none are, the least recently seen one.
    fn evict_series(&mut self, now: SystemTime) {
        let before = self.series.len();
        self.series
            .retain(|_, s| elapsed(s.last, now) < SERIES_WINDOW);
        if self.series.len() < before {
            return;
        }
        if let Some(oldest) = self
            .series
            .iter()
            .min_by_key(|(_, s)| s.last)
            .map(|(k, _)| k.clone())
        {
            self.series.remove(&oldest);
        }
    }

    /// client-go's Event name: `<object name>.<unix nanoseconds in hex>`, unique per recorder.
    fn new_name(&mut self, object: &str, now: SystemTime) -> String {
        let nanos = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            .max(self.last_name_nanos + 1);
        self.last_name_nanos = nanos;
        let suffix = format!(".{nanos:x}");
        let prefix = truncate(object, MAX_NAME - suffix.len()).trim_end_matches(['.', '-']);
        format!("{prefix}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> ObjectRef {
        ObjectRef {
            namespace: "default".into(),
            name: format!("pod-{uid}"),
            uid: uid.into(),
        }
    }

    fn warning(uid: &str, reason: &str, message: &str) -> Occurrence {
        Occurrence::new(pod(uid), EventType::Warning, reason, message)
    }

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    const SEC: Duration = Duration::from_secs(1);

    fn name_of(a: &Action) -> &str {
        match a {
            Action::Create { name, .. } | Action::Patch { name, .. } => name,
            Action::RateLimited => panic!("rate limited"),
        }
    }

    #[test]
    fn a_repeat_within_the_window_patches_the_same_object() {
        let mut c = Correlator::new();
        let e = warning("u1", "TopologyAffinityError", "no room");
        let first = c.observe(&e, t0());
        let Action::Create {
            ref name,
            count: 1,
            first: f,
            last: l,
        } = first
        else {
            panic!("{first:?}")
        };
        assert_eq!((f, l), (t0(), t0()));
        assert!(name.starts_with("pod-u1."), "{name}");
        let second = c.observe(&e, t0() + 30 * SEC);
        assert_eq!(
            second,
            Action::Patch {
                name: name.clone(),
                count: 2,
                first: t0(),
                last: t0() + 30 * SEC
            }
        );
        // Another message, reason, type or object: another object.
        for other in [
            warning("u1", "TopologyAffinityError", "other"),
            warning("u1", "SMTAlignmentError", "no room"),
            Occurrence::new(
                pod("u1"),
                EventType::Normal,
                "TopologyAffinityError",
                "no room",
            ),
            warning("u2", "TopologyAffinityError", "no room"),
        ] {
            let a = c.observe(&other, t0() + 31 * SEC);
            assert!(matches!(a, Action::Create { count: 1, .. }), "{a:?}");
            assert_ne!(name_of(&a), name);
        }
        // Just inside the window of the last occurrence: still the series.
        let a = c.observe(&e, t0() + 30 * SEC + SERIES_WINDOW - SEC);
        assert!(matches!(a, Action::Patch { count: 3, .. }), "{a:?}");
        // A full window after the last: a new object.
        let later = t0() + 30 * SEC + 2 * SERIES_WINDOW;
        let a = c.observe(&e, later);
        assert!(
            matches!(a, Action::Create { count: 1, first, .. } if first == later),
            "{a:?}"
        );
        assert_ne!(name_of(&a), name);
    }

    /// The kubelet's 1-second resize retry loop: 25 requests at once, then one per refill
    /// period, each carrying the count of every occurrence since.
    #[test]
    fn a_retry_loop_is_rate_limited_per_object_and_counts_everything() {
        let mut c = Correlator::new();
        let e = warning("u1", "InsufficientExclusiveCPUs", "asks 2");
        let mut sent = Vec::new();
        for i in 0..600u32 {
            match c.observe(&e, t0() + SEC * i) {
                Action::RateLimited => {}
                a => sent.push((i, a)),
            }
        }
        // 25 in the first 25 seconds, then one when a token has refilled: the bucket refills
        // continuously from the start, so at 300 s.
        assert_eq!(sent.len(), 26, "{sent:?}");
        assert!(matches!(sent[0].1, Action::Create { count: 1, .. }));
        for (k, (i, a)) in sent.iter().enumerate().take(25) {
            assert_eq!(*i, k as u32);
            if k > 0 {
                assert!(matches!(a, Action::Patch { count, .. } if *count == k as u32 + 1));
            }
        }
        let (i, a) = &sent[25];
        assert_eq!(
            *i, 300,
            "one token refilled 5 minutes after the first request"
        );
        assert!(
            matches!(a, Action::Patch { count, .. } if *count == i + 1),
            "the patch carries every occurrence: {a:?}"
        );
        // Another object has its own bucket.
        let other = warning("u2", "InsufficientExclusiveCPUs", "asks 2");
        assert!(matches!(
            c.observe(&other, t0() + SEC * 600),
            Action::Create { .. }
        ));
        // The same object's other Events share its bucket.
        let grant = Occurrence::new(pod("u1"), EventType::Normal, "ExclusiveCPUsAssigned", "1");
        assert_eq!(c.observe(&grant, t0() + SEC * 599), Action::RateLimited);
    }

    #[test]
    fn a_rate_limited_first_occurrence_is_created_later_and_a_failed_create_is_retried() {
        let mut c = Correlator::new();
        let noise = warning("u1", "A", "noise");
        for i in 0..BURST {
            assert!(!matches!(
                c.observe(&noise, t0() + SEC * i),
                Action::RateLimited
            ));
        }
        let e = warning("u1", "B", "late");
        assert_eq!(c.observe(&e, t0() + SEC * 25), Action::RateLimited);
        let a = c.observe(&e, t0() + REFILL + SEC * 30);
        assert!(
            matches!(a, Action::Create { count: 2, first, .. } if first == t0() + SEC * 25),
            "never created yet: created now, with both occurrences: {a:?}"
        );
        c.create_failed(&e);
        let a = c.observe(&e, t0() + 2 * REFILL + SEC * 30);
        assert!(matches!(a, Action::Create { count: 3, .. }), "{a:?}");
    }

    #[test]
    fn memory_is_bounded_and_removed_pods_are_forgotten() {
        let mut c = Correlator::new();
        for i in 0..(MAX_SERIES + 10) {
            let e = warning(&format!("u{i}"), "R", "m");
            c.observe(&e, t0() + SEC * i as u32);
        }
        let (series, buckets) = c.len();
        assert!(
            series <= MAX_SERIES && buckets <= MAX_OBJECTS,
            "{series} {buckets}"
        );
        // The newest is still known (patched), the oldest forgotten (created again).
        let newest = warning(&format!("u{}", MAX_SERIES + 9), "R", "m");
        let t = t0() + SEC * (MAX_SERIES as u32 + 20);
        assert!(matches!(c.observe(&newest, t), Action::Patch { .. }));
        c.forget_object(&format!("u{}", MAX_SERIES + 9));
        assert!(matches!(c.observe(&newest, t), Action::Create { .. }));
        let oldest = warning("u0", "R", "m");
        assert!(matches!(c.observe(&oldest, t), Action::Create { .. }));
    }

    #[test]
    fn names_are_unique_and_valid_and_messages_fit() {
        let mut c = Correlator::new();
        let long = "p".repeat(300);
        let obj = ObjectRef {
            namespace: "ns".into(),
            name: long,
            uid: "u".into(),
        };
        let a = c.observe(
            &Occurrence::new(obj.clone(), EventType::Warning, "A", "m"),
            t0(),
        );
        let b = c.observe(&Occurrence::new(obj, EventType::Warning, "B", "m"), t0());
        assert_ne!(name_of(&a), name_of(&b), "same instant, distinct names");
        assert!(name_of(&a).len() <= 253);
        let msg = "é".repeat(MAX_MESSAGE);
        let o = Occurrence::new(pod("u"), EventType::Warning, "A", &msg);
        assert!(o.message.len() <= MAX_MESSAGE && msg.starts_with(&o.message));
        // A clock stepped back neither panics nor refills.
        let mut c = Correlator::new();
        let e = warning("u1", "A", "m");
        c.observe(&e, t0());
        assert!(matches!(
            c.observe(&e, t0() - 60 * SEC),
            Action::Patch { count: 2, .. }
        ));
    }
}
