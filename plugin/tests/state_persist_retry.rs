//! A state-file write that fails (disk full, read-only, missing directory) does not stop the
//! plugin, and the file catches up by itself: `TopoletPlugin::retry_persist` (called every second
//! by the plugin's flusher task) writes it again until it succeeds.

use topolet::config::Config;
use topolet::shell::nri_plugin::{NodeState, TopoletPlugin, STATE_FILE};
use topolet::shell::state_file;

#[test]
fn a_failed_state_write_is_retried_until_it_succeeds() {
    let root = topolet_testkit::sysfs::fixture("ci-host-1s2c");
    let topology = topolet::shell::sysfs::discover(&root).expect("fixture ci-host-1s2c");
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

    assert!(!plugin.persist_pending(), "nothing failed yet");
    plugin.shutdown(); // one write
    assert!(plugin.persist_pending(), "the failed write is remembered");
    plugin.retry_persist();
    assert!(plugin.persist_pending(), "still failing while blocked");
    assert!(!state_path.exists());

    std::fs::remove_file(&state_dir).expect("remove blocker");
    plugin.retry_persist();
    assert!(!plugin.persist_pending(), "the retry succeeded");
    let saved = state_file::load::<NodeState>(&state_path)
        .expect("state file readable")
        .expect("state file written by the retry");
    assert_eq!(saved, NodeState::default());

    // Once written, a retry does nothing (no write without a failure).
    std::fs::remove_file(&state_path).expect("remove state file");
    plugin.retry_persist();
    assert!(
        !state_path.exists(),
        "retry wrote although nothing had failed"
    );
}
