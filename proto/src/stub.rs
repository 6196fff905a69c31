//! The plugin stub: connects to the runtime (dialing the socket or adopting the
//! inherited fd), runs the Plugin service on mux conn 1 and the Runtime client on
//! conn 2, registers, and keeps reconnecting with backoff after the runtime goes
//! away (external plugins). Exposes connection status and the update handle.

use std::io;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::Arc;

use futures::StreamExt;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::{Client, Server};

use crate::api::RegisterPluginRequest;
use crate::api_ttrpc::{create_plugin, RuntimeClient};
use crate::config::{ConfigError, Endpoint, StubConfig};
use crate::events::EventMask;
use crate::mux::{Mux, MuxError, TrunkState, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::plugin::{Plugin, RuntimeInfo};
use crate::service::{PluginService, SessionEvent};
use crate::sync_fields::SlimSynchronize;
use crate::updater::{spawn_updater, ContainerUpdater};

/// NRI module version this crate's schema matches (sent in RegisterPlugin).
pub const NRI_VERSION: &str = "v0.12.2";

/// Errors of the stub.
#[derive(Debug, thiserror::Error)]
pub enum StubError {
    /// Bad name/index/endpoint.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Dialing the runtime socket failed.
    #[error("cannot connect to nri socket {path}: {source}")]
    Connect {
        /// Socket path.
        path: String,
        /// Cause.
        source: io::Error,
    },
    /// The inherited fd cannot be used.
    #[error("cannot adopt inherited nri socket fd {fd}: {reason}")]
    InheritedFd {
        /// The fd.
        fd: RawFd,
        /// Cause.
        reason: String,
    },
    /// The inherited fd was already used by an earlier run.
    #[error("inherited nri socket was already consumed; pre-installed plugins cannot reconnect")]
    FdConsumed,
    /// Mux setup failed.
    #[error("nri mux setup failed: {0}")]
    Mux(#[from] MuxError),
    /// ttrpc server or client setup failed.
    #[error("nri ttrpc setup failed: {0}")]
    Ttrpc(String),
    /// RegisterPlugin failed or timed out.
    #[error("nri plugin registration failed: {0}")]
    Register(String),
}

/// Connection state of the stub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnState {
    /// `run` not called yet.
    #[default]
    Idle,
    /// Dialing / setting up.
    Connecting,
    /// RegisterPlugin succeeded.
    Registered,
    /// Configure answered.
    Configured,
    /// Final Synchronize answered; events flow.
    Synchronized,
    /// Trunk closed; a reconnect may follow.
    Disconnected,
    /// `run` returned.
    Stopped,
}

/// Observable stub status (see [`Stub::status`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnectionStatus {
    /// Current state.
    pub state: ConnState,
    /// Successful registrations so far.
    pub connects: u64,
    /// Successful registrations after the first.
    pub reconnects: u64,
    /// Dials of the runtime's socket that failed (no runtime listening, refused, …).
    pub dial_failures: u64,
    /// Runtime facts from the latest Configure.
    pub runtime: Option<RuntimeInfo>,
    /// Mask sent in the latest Configure.
    pub events: EventMask,
    /// Latest connection error, if any.
    pub last_error: Option<String>,
    /// Process id of the runtime end of the socket (`SO_PEERCRED`), when the kernel reports it.
    pub runtime_pid: Option<u32>,
}

impl ConnectionStatus {
    /// A session the runtime registered: one more connection, a reconnection after the first.
    fn registered(&mut self) {
        self.connects += 1;
        if self.connects > 1 {
            self.reconnects += 1;
        }
        self.last_error = None;
    }
}

/// The plugin stub. Create inside a tokio runtime.
pub struct Stub<P: Plugin> {
    plugin: Arc<P>,
    config: StubConfig,
    status_tx: watch::Sender<ConnectionStatus>,
    client_tx: watch::Sender<Option<Arc<RuntimeClient>>>,
    updater: ContainerUpdater,
    inherited: std::sync::Mutex<Option<RawFd>>,
}

impl<P: Plugin> Stub<P> {
    /// Validates `config` and starts the update sender task.
    pub fn new(plugin: Arc<P>, config: StubConfig) -> Result<Stub<P>, StubError> {
        config.validate()?;
        let (status_tx, _) = watch::channel(ConnectionStatus::default());
        let (client_tx, client_rx) = watch::channel(None);
        let updater = spawn_updater(
            client_rx,
            std::time::Duration::from_secs(2),
            config.backoff.max * 2,
        );
        let inherited = match config.endpoint {
            Endpoint::InheritedFd(fd) => Some(fd),
            Endpoint::Socket(_) => None,
        };
        Ok(Stub {
            plugin,
            config,
            status_tx,
            client_tx,
            updater,
            inherited: std::sync::Mutex::new(inherited),
        })
    }

    /// Handle for unsolicited updates (Runtime.UpdateContainers).
    pub fn updater(&self) -> ContainerUpdater {
        self.updater.clone()
    }

    /// Status receiver; `changed().await` wakes on every (re)connect and state change.
    pub fn status(&self) -> watch::Receiver<ConnectionStatus> {
        self.status_tx.subscribe()
    }

    /// The plugin.
    pub fn plugin(&self) -> &Arc<P> {
        &self.plugin
    }

    fn set_state(&self, state: ConnState) {
        self.status_tx.send_modify(|s| s.state = state);
    }

    /// Runs until the connection ends for good: for pre-installed plugins when the
    /// runtime closes the inherited socket (returns `Ok`), for external plugins
    /// never (reconnects with backoff) unless `config.reconnect` is false.
    /// Cancel by dropping the future / aborting its task.
    pub async fn run(&self) -> Result<(), StubError> {
        let mut attempt: u32 = 0;
        loop {
            self.set_state(ConnState::Connecting);
            let result = match self.connect().await {
                Ok(trunk) => self.session(trunk).await,
                Err(e) => {
                    self.status_tx.send_modify(|s| s.dial_failures += 1);
                    Err(e)
                }
            };
            match &result {
                Ok(()) => attempt = 0,
                Err(e) => {
                    tracing::warn!(error = %e, attempt, "nri connection failed");
                    let msg = e.to_string();
                    self.status_tx.send_modify(|s| s.last_error = Some(msg));
                }
            }
            self.set_state(ConnState::Disconnected);
            if !self.config.reconnect {
                self.set_state(ConnState::Stopped);
                tracing::info!("nri connection closed; not reconnecting");
                return result;
            }
            let delay = self.config.backoff.delay(attempt);
            attempt = attempt.saturating_add(1);
            tracing::info!(delay_ms = delay.as_millis() as u64, "nri reconnecting");
            tokio::time::sleep(delay).await;
        }
    }

    async fn connect(&self) -> Result<UnixStream, StubError> {
        match &self.config.endpoint {
            Endpoint::Socket(path) => {
                tracing::debug!(path = %path.display(), "nri dialing runtime");
                UnixStream::connect(path)
                    .await
                    .map_err(|source| StubError::Connect {
                        path: path.display().to_string(),
                        source,
                    })
            }
            Endpoint::InheritedFd(_) => {
                let fd = self
                    .inherited
                    .lock()
                    .ok()
                    .and_then(|mut g| g.take())
                    .ok_or(StubError::FdConsumed)?;
                tracing::debug!(fd, "nri adopting inherited socket");
                adopt_socket_fd(fd)
            }
        }
    }

    /// Whether the runtime configured this session before it ended during registration (the
    /// Configure handler queues its event before its reply goes out): the session's events so
    /// far are applied to the status, and the session counts as a connection (the runtime
    /// registered us: it configures only a registered plugin), as one whose RegisterPlugin reply
    /// arrived in time does.
    fn configured_before_close(&self, nrx: &mut mpsc::UnboundedReceiver<SessionEvent>) -> bool {
        let mut configured = None;
        while let Ok(ev) = nrx.try_recv() {
            if let SessionEvent::Configured(info, mask) = ev {
                configured = Some((info, mask));
            }
        }
        let Some((info, mask)) = configured else {
            return false;
        };
        self.status_tx.send_modify(|st| {
            st.state = ConnState::Configured;
            st.runtime = Some(info);
            st.events = mask;
            st.registered();
        });
        true
    }

    /// One connection: setup, register, serve until the trunk closes.
    async fn session(&self, trunk: UnixStream) -> Result<(), StubError> {
        let runtime_pid = trunk
            .peer_cred()
            .ok()
            .and_then(|c| c.pid())
            .and_then(|p| u32::try_from(p).ok());
        self.status_tx.send_modify(|s| s.runtime_pid = runtime_pid);
        let (mux, mut conns) = Mux::new(trunk, &[PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN])?;
        let runtime_conn = conns.pop().ok_or(MuxError::Closed)?;
        let plugin_conn = conns.pop().ok_or(MuxError::Closed)?;

        let (ntx, mut nrx) = mpsc::unbounded_channel();
        let skip = self.plugin.synchronize_skips();
        let service: Arc<dyn crate::api_ttrpc::Plugin + Send + Sync> =
            Arc::new(PluginService::new(self.plugin.clone(), ntx));
        let mut services = create_plugin(service.clone());
        if !skip.is_empty() {
            for s in services.values_mut() {
                if let Some(m) = s.methods.get_mut("Synchronize") {
                    *m = Box::new(SlimSynchronize {
                        service: service.clone(),
                        skip,
                    });
                }
            }
        }
        let incoming = futures::stream::once(async move { Ok::<_, io::Error>(plugin_conn) })
            .chain(futures::stream::pending());
        let mut server = Server::new()
            .register_service(services)
            .add_listener(Listener::new(incoming));
        server
            .start()
            .await
            .map_err(|e| StubError::Ttrpc(e.to_string()))?;

        let client = RuntimeClient::new(Client::new(Socket::new(runtime_conn)));
        let req = RegisterPluginRequest {
            plugin_name: self.config.name.clone(),
            plugin_idx: self.config.idx.clone(),
            NRI_version: NRI_VERSION.to_string(),
            ..Default::default()
        };
        tracing::info!(name = %self.config.name, idx = %self.config.idx, "nri registering plugin");
        let timeout = self.config.registration_timeout;
        let ctx = ttrpc::context::with_duration(timeout);
        let registered = tokio::select! {
            r = tokio::time::timeout(timeout, client.register_plugin(ctx, &req)) => r,
            s = mux.closed() => {
                // The runtime may answer Configure before our RegisterPlugin reply arrives: if it
                // configured us, the connection was established and has now ended normally.
                if self.configured_before_close(&mut nrx) {
                    tracing::info!("nri connection closed by runtime right after configuring us");
                    return Ok(());
                }
                return Err(StubError::Register(format!("connection closed during registration: {s:?}")));
            }
        };
        match registered {
            Ok(Ok(_)) => {}
            // The same end seen from the other side: the runtime configured us and closed, and
            // the close reached the ttrpc client before our RegisterPlugin reply did (it then
            // fails the call), while `select!` picked this branch over `mux.closed()`.
            Ok(Err(_)) if self.configured_before_close(&mut nrx) => {
                tracing::info!("nri connection closed by runtime right after configuring us");
                return Ok(());
            }
            Ok(Err(e)) => return Err(StubError::Register(e.to_string())),
            Err(_) => {
                return Err(StubError::Register(format!(
                    "no reply within {} ms",
                    timeout.as_millis()
                )))
            }
        }
        self.status_tx.send_modify(|s| {
            if s.state < ConnState::Registered || s.state == ConnState::Disconnected {
                s.state = ConnState::Registered;
            }
            s.registered();
        });
        tracing::info!(name = %self.config.name, idx = %self.config.idx, "nri plugin registered");
        self.client_tx.send_replace(Some(Arc::new(client)));

        let closed = mux.closed();
        tokio::pin!(closed);
        let end = loop {
            tokio::select! {
                ev = nrx.recv() => match ev {
                    Some(SessionEvent::Configured(info, mask)) => {
                        self.status_tx.send_modify(|s| {
                            s.state = ConnState::Configured;
                            s.runtime = Some(info);
                            s.events = mask;
                        });
                    }
                    Some(SessionEvent::Synchronized { pods, containers }) => {
                        tracing::info!(pods, containers, "nri synchronized");
                        self.set_state(ConnState::Synchronized);
                    }
                    None => {}
                },
                s = &mut closed => break s,
            }
        };
        self.client_tx.send_replace(None);
        drop(server);
        match end {
            TrunkState::Failed(_, msg) => tracing::warn!(error = %msg, "nri connection lost"),
            _ => tracing::info!("nri connection closed by runtime"),
        }
        Ok(())
    }
}

impl PartialOrd for ConnState {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some((*self as u8).cmp(&(*other as u8)))
    }
}

/// Adopts an inherited connected unix stream socket fd.
fn adopt_socket_fd(fd: RawFd) -> Result<UnixStream, StubError> {
    let bad = |reason: String| StubError::InheritedFd { fd, reason };
    // SAFETY: `libc::stat` is plain old data (integers only): all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fstat` only writes into the `stat` buffer we own; an invalid fd makes it fail
    // with EBADF, which we report instead of adopting.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(bad(io::Error::last_os_error().to_string()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(bad("not a socket".to_string()));
    }
    // SAFETY: the fd is open (fstat succeeded) and is a socket. Ownership: the runtime
    // hands this fd to the plugin process exclusively (NRI_PLUGIN_SOCKET contract), and
    // the stub takes it out of its `Option` before this call, so it is adopted at most
    // once in this process and nothing else closes it; the returned stream owns it.
    let std_stream = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    // Keep it out of child processes from here on.
    // SAFETY: fcntl on an fd we own; failure is harmless (only affects CLOEXEC).
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
    std_stream
        .set_nonblocking(true)
        .map_err(|e| bad(e.to_string()))?;
    UnixStream::from_std(std_stream).map_err(|e| bad(e.to_string()))
}
