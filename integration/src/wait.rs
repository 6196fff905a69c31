//! Polling with a deadline.

use std::time::{Duration, Instant};

use anyhow::bail;

/// Default poll interval.
pub const INTERVAL: Duration = Duration::from_millis(50);

/// Calls `probe` every [`INTERVAL`] until it returns `Ok(Some(value))`, and returns that value.
/// `Ok(None)` means "not yet"; an `Err` is remembered and reported if the deadline passes (it
/// does not stop the polling). On timeout the error names `what` and the last probe error.
pub fn until<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last_err: Option<anyhow::Error> = None;
    loop {
        match probe() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() >= deadline {
            match last_err {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {what}; last error: {e:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        std::thread::sleep(INTERVAL);
    }
}

/// Like [`until`] for a condition: polls until `probe` returns `Ok(true)`.
pub fn until_true(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    until(what, timeout, || Ok(probe()?.then_some(())))
}
