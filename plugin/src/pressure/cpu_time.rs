//! The process's CPU time ([`process_cpu_time`]), which the eviction loop counts per interval.

use std::time::Duration;

/// Process CPU time (user + system) so far.
pub fn process_cpu_time() -> Duration {
    // SAFETY: `libc::rusage` is plain old data (integers only): all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
