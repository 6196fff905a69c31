//! The state file's writer, off the NRI event path: handlers [`Persister::submit`] a snapshot
//! and return; one thread of its own encodes, writes and fsyncs it (`crate::state::file`) outside
//! every lock.
//!
//! - **Latest wins.** Snapshots are numbered; one slot holds the newest not yet written, so a
//!   burst of events is one write (or two: the one in progress and the newest), never a queue
//!   growing behind a slow disk.
//! - **Retried.** A failed write (disk full, read-only) is counted
//!   (`topolet_state_file_writes_total{result="error"}`), logged once, and the newest snapshot is
//!   written again every [`RETRY`] until a write succeeds; containers keep being placed from
//!   memory meanwhile (the file only breaks ties at a restart, see `crate::state::file`).
//! - **Observable.** [`Persister::status`] says what was submitted, written and whether the last
//!   write failed; `topolet_state_file_pending` is 1 while a submitted snapshot is not on disk.
//! - **Flushed on exit.** [`Persister::flush`] waits (bounded) until everything submitted before
//!   it is written or has failed; dropping the persister flushes (bounded) and stops the thread.
//!
//! Writes go through a [`StateWriter`], the file in production and an injected one in tests
//! (a writer that blocks shows that handlers do not wait on it).

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::state::file::{self as state_file, StateFileError};
use crate::state::NodeState;
use crate::telemetry::metrics::Metrics;

/// How often a failed write is tried again.
pub const RETRY: Duration = Duration::from_secs(1);

/// Where snapshots go.
pub trait StateWriter: Send + 'static {
    fn write(&mut self, state: &NodeState) -> Result<(), StateFileError>;
    /// What the writer writes to, for logs.
    fn describe(&self) -> String;
}

/// The state file at `path` (`state_file::save`: temporary file, fsync, rename, directory fsync).
pub struct FileWriter(pub PathBuf);

impl StateWriter for FileWriter {
    fn write(&mut self, state: &NodeState) -> Result<(), StateFileError> {
        state_file::save(&self.0, state)
    }
    fn describe(&self) -> String {
        self.0.display().to_string()
    }
}

/// What the persister has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PersistStatus {
    /// Snapshots submitted (the newest one's number).
    pub submitted: u64,
    /// The number of the newest snapshot on disk (0: none yet).
    pub written: u64,
    /// The last write failed; it is being retried.
    pub failing: bool,
}

impl PersistStatus {
    /// A submitted snapshot is not on disk yet.
    pub fn pending(&self) -> bool {
        self.written < self.submitted
    }
}

#[derive(Default)]
struct Slot {
    /// The newest snapshot not yet written, with its number.
    next: Option<(u64, NodeState)>,
    status: PersistStatus,
    /// Write attempts completed, failed or not, and the snapshot number of the latest one (for
    /// [`Persister::flush`]: an attempt of the newest snapshot ends the wait even if it failed).
    attempts: u64,
    last_attempted: u64,
    stop: bool,
}

struct Shared {
    slot: Mutex<Slot>,
    /// Signalled on submit and stop.
    wake: Condvar,
    /// Signalled after every write attempt.
    done: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        // The slot holds plain values consistent between statements: a poisoned lock is usable.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The persister: a slot and the thread that drains it.
pub struct Persister {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    metrics: Arc<Metrics>,
}

impl Persister {
    /// Starts the writer thread. Fails only if the thread cannot be spawned.
    pub fn start(writer: Box<dyn StateWriter>, metrics: Arc<Metrics>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
        });
        let thread = {
            let shared = shared.clone();
            let metrics = metrics.clone();
            std::thread::Builder::new()
                .name("topolet-state".into())
                .spawn(move || drain(&shared, writer, &metrics))?
        };
        Ok(Persister {
            shared,
            thread: Some(thread),
            metrics,
        })
    }

    /// Hands `state` to the writer thread and returns at once (replacing an older snapshot that
    /// was not written yet).
    pub fn submit(&self, state: NodeState) {
        let mut slot = self.shared.lock();
        slot.status.submitted += 1;
        let n = slot.status.submitted;
        slot.next = Some((n, state));
        self.metrics.state_pending(true);
        drop(slot);
        self.shared.wake.notify_one();
    }

    pub fn status(&self) -> PersistStatus {
        self.shared.lock().status
    }

    /// Waits until every snapshot submitted before this call is written, or a write of the
    /// newest of them completed after this call and failed; at most `limit`. Returns the status.
    pub fn flush(&self, limit: Duration) -> PersistStatus {
        let deadline = Instant::now() + limit;
        let mut slot = self.shared.lock();
        let target = slot.status.submitted;
        let attempts = slot.attempts;
        while slot.status.written < target
            && !(slot.attempts > attempts && slot.last_attempted >= target)
        {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            slot = self
                .shared
                .done
                .wait_timeout(slot, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        slot.status
    }
}

/// How long dropping a persister waits for a write in progress.
pub const DROP_FLUSH: Duration = Duration::from_secs(5);

impl Drop for Persister {
    /// Writes what was submitted (unless the writer is failing: it would retry forever), then
    /// stops the thread. A writer stuck in the kernel (a hung disk) is left behind rather than
    /// joined, so it cannot hang the process's exit.
    fn drop(&mut self) {
        let st = self.status();
        if st.pending() && !st.failing {
            self.flush(DROP_FLUSH);
        }
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            if t.is_finished() || !self.status().pending() || self.status().failing {
                let _ = t.join();
            }
        }
    }
}

/// The writer thread: takes the newest snapshot, writes it with no lock held, records the
/// outcome; after a failure, writes the newest snapshot again every [`RETRY`].
fn drain(shared: &Shared, mut writer: Box<dyn StateWriter>, metrics: &Metrics) {
    let mut retry: Option<(u64, NodeState)> = None;
    loop {
        let (n, state) = {
            let mut slot = shared.lock();
            loop {
                if let Some(next) = slot.next.take() {
                    break next;
                }
                if slot.stop {
                    return;
                }
                if let Some(again) = retry.take() {
                    let (s, _) = shared
                        .wake
                        .wait_timeout(slot, RETRY)
                        .unwrap_or_else(|p| p.into_inner());
                    slot = s;
                    match slot.next.take() {
                        Some(next) => break next,
                        None if slot.stop => return,
                        None => break again,
                    }
                }
                slot = shared.wake.wait(slot).unwrap_or_else(|p| p.into_inner());
            }
        };
        let result = writer.write(&state);
        let ok = result.is_ok();
        let mut slot = shared.lock();
        slot.attempts += 1;
        slot.last_attempted = n;
        let was_failing = slot.status.failing;
        match result {
            Ok(()) => {
                slot.status.written = slot.status.written.max(n);
                slot.status.failing = false;
                if was_failing {
                    tracing::info!(path = %writer.describe(), "state file written again");
                }
            }
            Err(e) => {
                slot.status.failing = true;
                if !was_failing {
                    // Not fatal: containers keep being placed from memory and the write is
                    // retried; a restart rebuilds from the runtime's view anyway.
                    tracing::error!(
                        error = %e,
                        "state file not written; placing from memory and retrying every second"
                    );
                } else {
                    tracing::debug!(error = %e, "state file still not written");
                }
                if slot.next.is_none() {
                    retry = Some((n, state));
                }
            }
        }
        // Counted after the failure's log line: whoever sees the count can read the line.
        metrics.state_write(ok);
        metrics.state_pending(slot.status.pending());
        drop(slot);
        shared.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A writer that reports each write as it starts, then waits for the test's verdict.
    struct Gated {
        started: mpsc::Sender<NodeState>,
        verdicts: mpsc::Receiver<Result<(), ()>>,
    }

    impl StateWriter for Gated {
        fn write(&mut self, state: &NodeState) -> Result<(), StateFileError> {
            self.started.send(state.clone()).ok();
            self.verdicts
                .recv()
                .unwrap_or(Err(()))
                .map_err(|()| StateFileError::Io {
                    path: PathBuf::from("gated"),
                    op: "write",
                    source: std::io::Error::other("injected failure"),
                })
        }
        fn describe(&self) -> String {
            "gated".into()
        }
    }

    fn state(n: u8) -> NodeState {
        let mut s = NodeState::default();
        s.left_alone
            .insert(topolet_core::kube::container_key::ContainerKey::new(
                format!("pod-{n}"),
                "c",
            ));
        s
    }

    type Verdicts = mpsc::Sender<Result<(), ()>>;

    fn gated() -> (Persister, mpsc::Receiver<NodeState>, Verdicts) {
        let (started, started_rx) = mpsc::channel();
        let (verdict_tx, verdicts) = mpsc::channel();
        let writer = Gated { started, verdicts };
        let p = Persister::start(Box::new(writer), Arc::new(Metrics::new())).expect("thread");
        (p, started_rx, verdict_tx)
    }

    #[test]
    fn submit_returns_while_a_write_is_stuck_and_the_newest_snapshot_wins() {
        let (p, started, verdict) = gated();
        p.submit(state(1));
        assert_eq!(started.recv().unwrap(), state(1));
        // The writer is stuck inside write(1): submitting does not wait for it.
        p.submit(state(2));
        p.submit(state(3));
        let st = p.status();
        assert!(
            st.submitted == 3 && st.written == 0 && st.pending(),
            "{st:?}"
        );
        verdict.send(Ok(())).unwrap();
        assert_eq!(
            started.recv().unwrap(),
            state(3),
            "2 was replaced before it was written"
        );
        verdict.send(Ok(())).unwrap();
        let st = p.flush(Duration::from_secs(3600));
        let want = PersistStatus {
            submitted: 3,
            written: 3,
            failing: false,
        };
        assert_eq!(st, want);
    }

    #[test]
    fn a_failed_write_is_retried_until_it_succeeds() {
        let (p, started, verdict) = gated();
        p.submit(state(1));
        assert_eq!(started.recv().unwrap(), state(1));
        verdict.send(Err(())).unwrap();
        // Retried with nothing new submitted: the same snapshot again. A retry starts only
        // after the failure is recorded.
        assert_eq!(started.recv().unwrap(), state(1));
        let st = p.status();
        assert!(st.failing && st.pending(), "{st:?}");
        verdict.send(Err(())).unwrap();
        assert_eq!(started.recv().unwrap(), state(1));
        verdict.send(Ok(())).unwrap();
        // Returns once the successful attempt is recorded.
        let st = p.flush(Duration::from_secs(3600));
        let want = PersistStatus {
            submitted: 1,
            written: 1,
            failing: false,
        };
        assert_eq!(st, want);
    }

    #[test]
    fn the_file_writer_writes_the_state_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let p = Persister::start(Box::new(FileWriter(path.clone())), Arc::new(Metrics::new()))
            .expect("thread");
        p.submit(state(7));
        let st = p.flush(Duration::from_secs(3600));
        assert_eq!(st.written, 1, "{st:?}");
        let back = state_file::load::<NodeState>(&path).expect("readable");
        assert_eq!(back, Some(state(7)));
    }
}
