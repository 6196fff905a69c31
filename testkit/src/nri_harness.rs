//! A plugin behind the NRI SDK's stub, connected to the SDK's fake runtime: the harness the
//! protocol-level tests share (the handler tests, the security properties, the eviction loop's
//! tests). The plugin is any [`Plugin`]; what wires the stub's handles into it is the caller's.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use topolet_nri::fake_runtime::{FakeRuntime, PluginConn};
use topolet_nri::plugin::Plugin;
use topolet_nri::{Stub, StubConfig};

/// How long the harness waits for the plugin to connect and register: a guard against a hang,
/// never reached by a plugin that works, however loaded the machine.
pub const CONNECT_GUARD: Duration = Duration::from_secs(60);

/// A connected plugin: the runtime's end of the connection and the stub's task.
pub struct Connected {
    pub conn: PluginConn,
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts `plugin` behind a stub (name `topolet`, index 50) dialling `socket`, where `rt`
/// listens; `attach` wires the stub's handles into the plugin before it runs. Accepts the
/// connection, waits for the registration and configures it as containerd `runtime_version`
/// announcing NRI `nri_version` (empty: not announced).
pub async fn connect<P: Plugin>(
    rt: &FakeRuntime,
    socket: &Path,
    plugin: Arc<P>,
    attach: impl FnOnce(&Stub<P>),
    runtime_version: &str,
    nri_version: &str,
) -> Connected {
    let cfg = StubConfig::new("topolet", "50", socket.to_path_buf()).expect("stub config");
    let stub = Arc::new(Stub::new(plugin, cfg).expect("stub"));
    attach(&stub);
    let task = tokio::spawn(async move {
        let _ = stub.run().await;
    });
    let conn = tokio::time::timeout(CONNECT_GUARD, rt.accept())
        .await
        .expect("accepted in time")
        .expect("accepted");
    tokio::time::timeout(CONNECT_GUARD, conn.wait_registered())
        .await
        .expect("registered in time")
        .expect("registered");
    conn.configure_as(runtime_version, nri_version)
        .await
        .expect("configured");
    Connected { conn, task }
}
