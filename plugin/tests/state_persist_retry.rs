//! A state-file write that fails (disk full, read-only, missing directory) does not stop the
//! plugin, and the file catches up by itself: the state-file writer (`topolet::state::persister`, its own
//! thread) writes the newest assignments again every second until it succeeds.

use std::time::Duration;

use topolet::config::Config;
use topolet::nri::handlers::{TopoletPlugin, STATE_FILE};
use topolet::state::file as state_file;
use topolet::state::NodeState;

/// Long enough never to be what ends a wait on a busy machine: the waits end on the writer's
/// recorded attempts, not on time.
const PATIENCE: Duration = Duration::from_secs(600);

#[test]
fn a_failed_state_write_is_retried_until_it_succeeds() {
    let root = topolet_testkit::sysfs::fixture("ci-host-1s2c");
    let topology = topolet::host::sysfs::discover(&root).expect("fixture ci-host-1s2c");
    let tmp = tempfile::tempdir().expect("tempdir");
    // The state dir's path is taken by a regular file: every write fails (as on a full disk:
    // the temporary file cannot be created), even for root.
    let state_dir = tmp.path().join("state");
    std::fs::write(&state_dir, b"in the way").expect("blocker file");
    let mut config = Config::default();
    config.cpu.reserved_cpus = Some("0".into());
    config.state.dir = state_dir.clone();
    let plugin = TopoletPlugin::new(config, topology).expect("plugin");
    let state_path = state_dir.join(STATE_FILE);

    assert!(!plugin.persist_pending(), "nothing submitted yet");
    plugin.flush_state_on_exit(); // one write, waited for: it fails
    let st = plugin.flush_state(PATIENCE); // waits for the first retry, failing too
    assert!(
        st.failing && st.pending(),
        "the failed write is remembered: {st:?}"
    );
    assert!(plugin.persist_pending());
    let st = plugin.flush_state(PATIENCE); // the second retry, failing again
    assert!(
        st.failing && st.pending(),
        "still failing while blocked: {st:?}"
    );
    assert!(!state_path.exists());

    std::fs::remove_file(&state_dir).expect("remove blocker");
    let st = plugin.flush_state(PATIENCE); // the next retry succeeds
    assert!(!st.failing && !st.pending(), "the retry succeeded: {st:?}");
    assert!(!plugin.persist_pending());
    let saved = state_file::load::<NodeState>(&state_path)
        .expect("state file readable")
        .expect("state file written by the retry");
    assert_eq!(saved, NodeState::default());
}
