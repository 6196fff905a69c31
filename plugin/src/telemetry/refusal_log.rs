//! Log a repeated refusal once, not at every retry.
//!
//! The kubelet retries a refused in-place resize about every second (and a refused creation with
//! back-off): each retry is refused with the same message. The first refusal of a container is
//! logged; identical ones after it are counted (`topolet_refusal_logs_suppressed_total`) and
//! logged again at most every [`INTERVAL`], with how many were not logged. A different message
//! (the free CPUs changed, or another request) is logged at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use topolet_core::kube::container_key::ContainerKey;

/// How long an identical refusal of one container stays unlogged.
pub const INTERVAL: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Seen {
    message: String,
    logged_at: Instant,
    suppressed: u64,
}

/// The last refusal of each container (by operation).
#[derive(Debug, Default)]
pub struct RefusalLog {
    seen: HashMap<(&'static str, ContainerKey), Seen>,
}

/// What to do with one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log it; `repeats` identical refusals were not logged since the last time.
    Log { repeats: u64 },
    /// Count it only.
    Suppress,
}

impl RefusalLog {
    /// Records a refusal of `key` at `operation` (`create`, `resize`) with `message` at `now`.
    pub fn note(
        &mut self,
        operation: &'static str,
        key: &ContainerKey,
        message: &str,
        now: Instant,
    ) -> Verdict {
        let entry = self.seen.get_mut(&(operation, key.clone()));
        match entry {
            Some(s) if s.message == message && now.duration_since(s.logged_at) < INTERVAL => {
                s.suppressed += 1;
                Verdict::Suppress
            }
            Some(s) => {
                let repeats = if s.message == message {
                    s.suppressed
                } else {
                    0
                };
                s.message = message.to_string();
                s.logged_at = now;
                s.suppressed = 0;
                Verdict::Log { repeats }
            }
            None => {
                self.seen.insert(
                    (operation, key.clone()),
                    Seen {
                        message: message.to_string(),
                        logged_at: now,
                        suppressed: 0,
                    },
                );
                Verdict::Log { repeats: 0 }
            }
        }
    }

    /// Forgets `key`'s refusals at `operation` (it was admitted, or is gone).
    pub fn clear(&mut self, operation: &'static str, key: &ContainerKey) {
        self.seen.remove(&(operation, key.clone()));
    }

    /// Forgets every refusal of pod `uid`'s containers.
    pub fn clear_pod(&mut self, uid: &str) {
        self.seen.retain(|(_, k), _| k.pod_uid != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identical_refusal_is_logged_once_then_every_interval() {
        let mut log = RefusalLog::default();
        let key = ContainerKey::new("u", "main");
        let t0 = Instant::now();
        let sec = Duration::from_secs(1);
        assert_eq!(
            log.note("resize", &key, "m1", t0),
            Verdict::Log { repeats: 0 }
        );
        for i in 1..=10 {
            assert_eq!(
                log.note("resize", &key, "m1", t0 + sec * i),
                Verdict::Suppress
            );
        }
        // Another message: at once. The same again: quiet.
        assert_eq!(
            log.note("resize", &key, "m2", t0 + sec * 11),
            Verdict::Log { repeats: 0 }
        );
        assert_eq!(
            log.note("resize", &key, "m2", t0 + sec * 12),
            Verdict::Suppress
        );
        // Past the interval: logged with the count of those not logged.
        assert_eq!(
            log.note("resize", &key, "m2", t0 + sec * 11 + INTERVAL),
            Verdict::Log { repeats: 1 }
        );
        // Other operations and containers are separate; clear forgets.
        assert_eq!(
            log.note("create", &key, "m2", t0 + sec * 12),
            Verdict::Log { repeats: 0 }
        );
        log.clear("resize", &key);
        assert_eq!(
            log.note("resize", &key, "m2", t0 + sec * 13 + INTERVAL),
            Verdict::Log { repeats: 0 }
        );
        log.clear_pod("u");
        assert_eq!(
            log.note("create", &key, "m2", t0 + sec * 14 + INTERVAL),
            Verdict::Log { repeats: 0 }
        );
    }
}
