//! Configuration reload while running: on SIGHUP, and when the file changes.
//!
//! What says the file changed is its identity through the path (a `stat`: inode, size, mtime):
//! a Kubernetes ConfigMap volume replaces the file by swapping a `..data` symlink, editors
//! replace it by rename, and `stat` through the path sees every one of them. When to look is
//! said by inotify (through libc: no dependency) on the directories, not the file: the file's
//! own directory and the one its symlinks resolve into, where a ConfigMap's symlink swap and an
//! editor's rename both show (a watch on the file itself would be lost with its inode). An
//! event is followed by a look once the directory has been still for [`SETTLE`] (a file being
//! written is not read half done); a look every [`FALLBACK_POLL`] catches what inotify cannot
//! see (a file system without it). An idle node is so woken by nothing but that slow look.
//! Without inotify (it failed to start), the file is looked at every [`POLL_INTERVAL`].
//!
//! A changed file is parsed and validated exactly as `topolet config check` does, then the
//! placement is migrated (`topolet_core::placement::migrate`): a valid configuration takes effect for containers
//! created from then on; an invalid one, or one that would break running containers, is
//! rejected and logged naming file and key, and the running configuration stays. The parts of
//! [`READ_AT_START`] (`[nri]`, `[state]`, `[reclaimed] resource_name`, ...) are only read at
//! start: a change there is logged as needing a restart and the rest of the file is applied.
//! With the Kubernetes API client on, a rejected or refused file is also a Warning Event on the
//! Node ([`REJECTED_REASON`], [`REFUSED_REASON`]). Every outcome is
//! counted in `topolet_config_reloads_total` ([`trigger`], [`result`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use topolet_core::kube::events::EventType;
use topolet_core::placement::migrate::MigrateError;

/// The Warning Event on the Node for a file that does not parse or does not fit the machine.
pub const REJECTED_REASON: &str = "TopoletConfigRejected";
/// The Warning Event on the Node for a valid file that would break running containers.
pub const REFUSED_REASON: &str = "TopoletConfigRefused";

/// What started a reload (`trigger` of `topolet_config_reloads_total`).
pub mod trigger {
    pub const SIGHUP: &str = "sighup";
    pub const FILE_CHANGE: &str = "file_change";
}

/// How a reload ended (`result` of `topolet_config_reloads_total`).
pub mod result {
    /// Valid and in effect for containers created from now on.
    pub const APPLIED: &str = "applied";
    /// Valid, and nothing in it differs from the running configuration.
    pub const UNCHANGED: &str = "unchanged";
    /// Unreadable, does not parse, or does not fit the machine: the running one stays.
    pub const REJECTED: &str = "rejected";
    /// Valid but would break a running container: the running one stays.
    pub const REFUSED: &str = "refused";
}

/// How often the file is looked at when inotify is not available.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How often the file is looked at besides inotify's events.
pub const FALLBACK_POLL: Duration = Duration::from_secs(60);
/// How long a directory must be still after an event before the file is looked at.
pub const SETTLE: Duration = Duration::from_millis(200);

/// What identifies one version of the file on disk (through symlinks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(FileId {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
    })
}

/// What a successful reload did, for the log.
#[derive(Debug, Clone)]
pub struct ReloadOutcome {
    /// Warnings about the new configuration (as at start-up).
    pub warnings: Vec<String>,
    /// Containers whose assignments were carried over.
    pub carried: usize,
    pub shared: topolet_core::machine::cpuset::CpuSet,
    pub reserved: topolet_core::machine::cpuset::CpuSet,
}

/// A new file's content measured against the running configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The configuration to migrate to (with the running values of [`READ_AT_START`]).
    pub config: Config,
    /// Sections whose change needs a restart, with what changed.
    pub restart_needed: Vec<String>,
    /// Sections that change now.
    pub changed: Vec<&'static str>,
}

/// One part of the file a reload does not apply: it is read only at start.
pub struct ReadAtStart {
    /// The part as the log, `topolet config check` and the manual name it.
    pub key: &'static str,
    /// The part's value in a configuration, as the log shows it beside the file's (`None`: too
    /// large to show; the log names the part).
    show: Option<fn(&Config) -> String>,
    /// Puts the running value of the part into a configuration.
    keep: fn(running: &Config, into: &mut Config),
}

/// The parts of the file a reload does not apply, read only at start: the sockets and the state
/// directory (bound and locked at start), the endpoints, the eviction loop and the API client
/// with its publishers (built at start), and the reclaimed-CPU resource's name (the Node's
/// publisher and the pods' classification are bound to it). A change to one is logged as needing
/// a restart of topolet and its running value kept; the rest of the file is applied. The one list
/// of them: [`candidate`] keeps each, and `topolet config check` prints their keys
/// ([`read_at_start_line`]).
pub const READ_AT_START: &[ReadAtStart] = &[
    ReadAtStart {
        key: "[nri]",
        show: Some(|c| {
            format!(
                "{} {}-{} drift_check_s {:?}",
                c.nri.socket.display(),
                c.nri.index.as_nri(),
                c.nri.name,
                c.nri.drift_check_s
            )
        }),
        keep: |running, into| into.nri = running.nri.clone(),
    },
    ReadAtStart {
        key: "[state]",
        show: Some(|c| c.state.dir.display().to_string()),
        keep: |running, into| into.state = running.state.clone(),
    },
    ReadAtStart {
        key: "[admin]",
        show: Some(|c| c.admin.socket.display().to_string()),
        keep: |running, into| into.admin = running.admin.clone(),
    },
    ReadAtStart {
        key: "[metrics]",
        show: Some(|c| {
            format!(
                "enabled {} address {}",
                c.metrics.enabled, c.metrics.address
            )
        }),
        keep: |running, into| into.metrics = running.metrics.clone(),
    },
    ReadAtStart {
        key: "[eviction]",
        show: None,
        keep: |running, into| into.eviction = running.eviction.clone(),
    },
    ReadAtStart {
        key: "[kubernetes]",
        show: None,
        keep: |running, into| into.kubernetes = running.kubernetes.clone(),
    },
    ReadAtStart {
        key: "[kubelet]",
        show: None,
        keep: |running, into| into.kubelet = running.kubelet.clone(),
    },
    ReadAtStart {
        key: "[reclaimed] resource_name",
        show: Some(|c| c.reclaimed.resource_name.clone()),
        keep: |running, into| {
            into.reclaimed.resource_name = running.reclaimed.resource_name.clone()
        },
    },
];

/// The line `topolet config check` prints for a valid file: the keys of [`READ_AT_START`].
pub fn read_at_start_line() -> String {
    let keys: Vec<&str> = READ_AT_START.iter().map(|p| p.key).collect();
    format!(
        "read only at start (a change needs a restart of topolet; a reload applies the rest): {}",
        keys.join(", ")
    )
}

/// The sections a reload applies; every other part of the file is in [`READ_AT_START`].
const APPLIED: [&str; 6] = ["cpu", "topology", "memory", "devices", "qos", "reclaimed"];

/// Compares `new` with `running`: keeps the running value of every part of [`READ_AT_START`]
/// (read only at start) and lists the sections that change.
pub fn candidate(running: &Config, new: Config) -> Candidate {
    let mut kept = new.clone();
    let mut restart_needed = Vec::new();
    for part in READ_AT_START {
        let before = kept.clone();
        (part.keep)(running, &mut kept);
        if kept != before {
            restart_needed.push(match part.show {
                Some(show) => format!(
                    "{} (running: {}; file: {})",
                    part.key,
                    show(running),
                    show(&new)
                ),
                None => format!("{} (read at start)", part.key),
            });
        }
    }
    // Only the sections of APPLIED are taken from the file: a section added to `Config` and
    // missing from both lists keeps its running value, and is named, rather than be applied
    // by nothing.
    let mut applied = running.clone();
    applied.cpu = kept.cpu.clone();
    applied.topology = kept.topology.clone();
    applied.memory = kept.memory.clone();
    applied.devices = kept.devices.clone();
    applied.qos = kept.qos.clone();
    applied.reclaimed = kept.reclaimed.clone();
    if applied != kept {
        restart_needed.push(format!(
            "a section that is neither in [{}] nor read at start (kept as running)",
            APPLIED.join("] [")
        ));
    }
    let mut changed = Vec::new();
    for (name, differs) in APPLIED.into_iter().zip([
        applied.cpu != running.cpu,
        applied.topology != running.topology,
        applied.memory != running.memory,
        applied.devices != running.devices,
        applied.qos != running.qos,
        applied.reclaimed != running.reclaimed,
    ]) {
        if differs {
            changed.push(name);
        }
    }
    Candidate {
        config: applied,
        restart_needed,
        changed,
    }
}

/// What the watcher needs of the plugin it reloads: owned here, implemented by the NRI handlers
/// (`crate::nri::handlers::TopoletPlugin`), so that the configuration does not depend on them.
pub trait Reloadable: Send + Sync {
    /// The configuration in effect, which a successful [`Reloadable::reload`] replaces.
    fn config(&self) -> Arc<Config>;
    /// Switches to `config` for containers created from now on, keeping every running one; or
    /// refuses it, changing nothing.
    fn reload(&self, config: &Config) -> Result<ReloadOutcome, MigrateError>;
    /// Counts one reload in `topolet_config_reloads_total` ([`trigger`], [`result`]).
    fn count_reload(&self, trigger: &'static str, result: &'static str);
    /// An Event on the Node (nothing without the Kubernetes API client).
    fn node_event(&self, type_: EventType, reason: &str, message: &str);
}

/// Watches `path` and reloads `plugin` on SIGHUP or when the file changes; runs until the task
/// is dropped. A new file is measured against the plugin's configuration in effect
/// ([`Reloadable::config`]), which a successful reload replaces.
pub async fn watch(plugin: Arc<dyn Reloadable>, path: PathBuf) {
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "cannot install the SIGHUP handler; reload on file change only");
            None
        }
    };
    let mut w = Watcher::new(plugin, path);
    let mut dirs = match DirWatch::new(&w.path) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!(path = %w.path.display(), error = %e, "inotify unavailable: looking at the configuration file every {} s", POLL_INTERVAL.as_secs());
            None
        }
    };
    let poll = if dirs.is_some() {
        FALLBACK_POLL
    } else {
        POLL_INTERVAL
    };
    tracing::info!(path = %w.path.display(), inotify = dirs.is_some(), poll_seconds = poll.as_secs(), "watching the configuration file (reload also on SIGHUP)");
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.reset();
    loop {
        tokio::select! {
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                tracing::info!(path = %w.path.display(), "SIGHUP: reloading the configuration");
                w.seen = file_id(&w.path);
                w.reload(true);
            }
            changed = async { match dirs.as_mut() { Some(d) => d.settled().await, None => std::future::pending().await } } => {
                if let Err(e) = changed {
                    tracing::warn!(path = %w.path.display(), error = %e, "inotify failed: looking at the configuration file every {} s", POLL_INTERVAL.as_secs());
                    dirs = None;
                    tick = tokio::time::interval(POLL_INTERVAL);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    continue;
                }
                if let Some(d) = dirs.as_mut() {
                    // A symlink may resolve into another directory now (a ConfigMap's new data).
                    d.follow(&w.path);
                }
                w.look();
            }
            _ = tick.tick() => w.look(),
        }
    }
}

impl Watcher {
    /// Reloads when the file's identity changed since the last look.
    fn look(&mut self) {
        let now = file_id(&self.path);
        if now != self.seen {
            self.seen = now;
            if now.is_none() {
                tracing::warn!(path = %self.path.display(), "configuration file is gone; the running configuration stays");
                return;
            }
            self.reload(false);
        }
    }
}

/// inotify watches on the directories the configuration file's path goes through (its own, the
/// ones its symlinks point into), reporting only events on the entries of that path (the file,
/// a ConfigMap's `..data` symlink, ...): a log file written beside the configuration wakes no
/// one (module doc).
struct DirWatch {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    /// Watch descriptor → its directory and the entries in it that the path goes through.
    watched: std::collections::BTreeMap<i32, (PathBuf, std::collections::BTreeSet<Vec<u8>>)>,
}

/// The (directory, entry) pairs resolving `path` goes through: the path's own entry, each
/// symlink's first step and where it leads, at most 16 links deep.
fn path_entries(path: &Path) -> Vec<(PathBuf, std::ffi::OsString)> {
    let mut out = Vec::new();
    let mut at = path.to_path_buf();
    for _ in 0..16 {
        let (Some(dir), Some(name)) = (at.parent(), at.file_name()) else {
            break;
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        out.push((dir.to_path_buf(), name.to_os_string()));
        let Ok(target) = std::fs::read_link(&at) else {
            break;
        };
        // `..data/topolet.toml`: the symlink `..data` in the same directory matters too.
        if let Some(std::path::Component::Normal(first)) = target.components().next() {
            if target.components().count() > 1 {
                out.push((dir.to_path_buf(), first.to_os_string()));
                let hop = dir.join(first);
                if let Ok(t) = std::fs::read_link(&hop) {
                    if let Some(std::path::Component::Normal(f)) = t.components().next() {
                        out.push((dir.to_path_buf(), f.to_os_string()));
                    }
                }
            }
        }
        at = dir.join(target);
    }
    if let Ok(real) = std::fs::canonicalize(path) {
        if let (Some(dir), Some(name)) = (real.parent(), real.file_name()) {
            out.push((dir.to_path_buf(), name.to_os_string()));
        }
    }
    out
}

impl DirWatch {
    fn new(path: &Path) -> std::io::Result<DirWatch> {
        use std::os::fd::FromRawFd;
        // SAFETY: inotify_init1 takes flags only; a non-negative result is a new descriptor
        // that nothing else owns.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a valid descriptor owned by no one else (above).
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        // SAFETY: the OwnedFd is a valid descriptor, owned by the AsyncFd from here on and
        // closed only when it is dropped.
        let fd = unsafe { tokio::io::unix::AsyncFd::register(fd)? };
        let mut d = DirWatch {
            fd,
            watched: Default::default(),
        };
        let entries = path_entries(path);
        let Some((dir, name)) = entries.first() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the configuration path names no file",
            ));
        };
        d.add(dir, name)?;
        d.follow(path);
        Ok(d)
    }

    /// Also watches what `path` resolves through now (a ConfigMap's new data directory); best
    /// effort: the look every [`FALLBACK_POLL`] covers a failure.
    fn follow(&mut self, path: &Path) {
        for (dir, name) in path_entries(path) {
            if let Err(e) = self.add(&dir, &name) {
                tracing::debug!(dir = %dir.display(), error = %e, "inotify: cannot watch a directory of the configuration's path");
            }
        }
    }

    fn add(&mut self, dir: &Path, name: &std::ffi::OsStr) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mask = libc::IN_CLOSE_WRITE
            | libc::IN_MODIFY
            | libc::IN_ATTRIB
            | libc::IN_CREATE
            | libc::IN_DELETE
            | libc::IN_MOVED_FROM
            | libc::IN_MOVED_TO
            | libc::IN_DELETE_SELF
            | libc::IN_MOVE_SELF;
        // SAFETY: a valid inotify descriptor and a NUL-terminated path. Watching a directory
        // twice returns its existing watch descriptor.
        let wd =
            unsafe { libc::inotify_add_watch(self.fd.get_ref().as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let entry = self
            .watched
            .entry(wd)
            .or_insert_with(|| (dir.to_path_buf(), Default::default()));
        entry.1.insert(name.as_bytes().to_vec());
        Ok(())
    }

    /// Whether the directory `dir` is watched for its entry `name`.
    #[cfg(test)]
    fn watches(&self, dir: &Path, name: &str) -> bool {
        let real = |d: &Path| std::fs::canonicalize(d).ok();
        self.watched
            .values()
            .any(|(d, names)| real(d) == real(dir) && names.contains(name.as_bytes()))
    }

    /// Waits for an event on the path's entries, then until they have been still for
    /// [`SETTLE`].
    async fn settled(&mut self) -> std::io::Result<()> {
        while !self.events().await? {}
        loop {
            match tokio::time::timeout(SETTLE, self.events()).await {
                Ok(Ok(true)) => continue,
                Ok(Ok(false)) => continue,
                Ok(Err(e)) => return Err(e),
                Err(_still) => return Ok(()),
            }
        }
    }

    /// Waits for events and reads them; true when one is about an entry of the path (or the
    /// queue overflowed, or a watched directory itself went).
    async fn events(&mut self) -> std::io::Result<bool> {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 4096];
        let n = loop {
            let mut ready = self.fd.readable().await?;
            let read = ready.try_io(|fd| {
                // SAFETY: reading into a buffer of the length given.
                let n = unsafe {
                    libc::read(fd.get_ref().as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())
                };
                usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
            });
            match read {
                Ok(r) => break r?,
                Err(_would_block) => continue,
            }
        };
        Ok(self.relevant(&buf[..n]))
    }

    /// Whether the inotify records in `buf` touch an entry of the path.
    fn relevant(&self, mut buf: &[u8]) -> bool {
        const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
        let mut any = false;
        while buf.len() >= HEADER {
            let int = |at: usize| -> [u8; 4] {
                let mut b = [0u8; 4];
                b.copy_from_slice(&buf[at..at + 4]);
                b
            };
            let wd = i32::from_ne_bytes(int(0));
            let mask = u32::from_ne_bytes(int(4));
            let len = u32::from_ne_bytes(int(12)) as usize;
            let Some(name) = buf.get(HEADER..HEADER + len) else {
                return true;
            };
            let name: Vec<u8> = name.iter().copied().take_while(|&b| b != 0).collect();
            let own = mask & (libc::IN_Q_OVERFLOW | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0;
            any |= own
                || self
                    .watched
                    .get(&wd)
                    .is_some_and(|(_, names)| names.contains(&name));
            buf = &buf[HEADER + len..];
        }
        any
    }
}

/// One configuration file watched for one plugin: what decides whether a look at the file is a
/// reload, and the reload itself ([`Watcher::reload`]).
pub(crate) struct Watcher {
    plugin: Arc<dyn Reloadable>,
    path: PathBuf,
    seen: Option<FileId>,
    /// The content last tried (applied or rejected): a touched but unchanged file is not
    /// reloaded, nor a rejected one logged again every poll.
    last_text: Option<String>,
}

impl Watcher {
    /// Watching `path` for `plugin`, whose configuration in effect is the file as it is now.
    pub(crate) fn new(plugin: Arc<dyn Reloadable>, path: PathBuf) -> Watcher {
        Watcher {
            plugin,
            seen: file_id(&path),
            last_text: std::fs::read_to_string(&path).ok(),
            path,
        }
    }

    /// One look at the file: reloaded when it changed, or always when `forced` (SIGHUP).
    pub(crate) fn reload(&mut self, forced: bool) {
        let label = if forced {
            trigger::SIGHUP
        } else {
            trigger::FILE_CHANGE
        };
        // Counted after the outcome's log line: a test (or an operator) that sees the count can
        // read the line.
        let plugin = self.plugin.clone();
        let count = |result: &'static str| plugin.count_reload(label, result);
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "configuration rejected: cannot read the file; the running configuration stays");
                count(result::REJECTED);
                return;
            }
        };
        if !forced && self.last_text.as_deref() == Some(text.as_str()) {
            tracing::debug!(path = %self.path.display(), "configuration file touched, content unchanged");
            return;
        }
        self.last_text = Some(text.clone());
        let trigger = if forced { "SIGHUP" } else { "file change" };
        let new = match Config::parse(&text, &self.path) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(trigger, key = e.key().unwrap_or(""), error = %e, "configuration rejected; the running configuration stays");
                self.plugin.node_event(
                    EventType::Warning,
                    REJECTED_REASON,
                    &format!("configuration rejected ({trigger}), the running one stays: {e}"),
                );
                count(result::REJECTED);
                return;
            }
        };
        let c = candidate(&self.plugin.config(), new);
        for what in &c.restart_needed {
            tracing::warn!(trigger, path = %self.path.display(), change = %what, "configuration change needs a restart of topolet; keeping the running values");
        }
        if c.changed.is_empty() {
            tracing::info!(trigger, path = %self.path.display(), "configuration reloaded: nothing to change");
            count(result::UNCHANGED);
            return;
        }
        match self.plugin.reload(&c.config) {
            Ok(outcome) => {
                for w in &outcome.warnings {
                    tracing::warn!(warning = %w, "configuration");
                }
                tracing::info!(
                    trigger,
                    path = %self.path.display(),
                    changed = %c.changed.join(","),
                    containers_kept = outcome.carried,
                    shared = %outcome.shared,
                    reserved = %outcome.reserved,
                    "configuration reloaded: applies to containers created from now on"
                );
                count(result::APPLIED);
            }
            Err(e) => {
                tracing::error!(trigger, path = %self.path.display(), key = e.key().unwrap_or(""), error = %format!("{}: {e}", self.path.display()), "configuration rejected; the running configuration stays");
                let (reason, what) = match e {
                    MigrateError::BreaksRunning(_) => (REFUSED_REASON, result::REFUSED),
                    MigrateError::Invalid(_) => (REJECTED_REASON, result::REJECTED),
                };
                self.plugin.node_event(
                    EventType::Warning,
                    reason,
                    &format!(
                        "configuration {what} ({trigger}), the running one stays: {}: {e}",
                        self.path.display()
                    ),
                );
                count(what);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PluginIndex;

    /// A Kubernetes ConfigMap volume's update (kubelet's atomic writer: a new timestamped
    /// directory, a `..data_tmp` symlink to it renamed over `..data`) is seen through the
    /// directories' inotify watches, and the file's identity through the path changes.
    #[tokio::test]
    async fn a_configmap_symlink_swap_wakes_the_watch() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().canonicalize().expect("tempdir");
        let d = real.as_path();
        std::fs::create_dir(d.join("..v1")).expect("v1");
        std::fs::write(d.join("..v1/topolet.toml"), "# v1\n").expect("write v1");
        symlink("..v1", d.join("..data")).expect("..data");
        symlink("..data/topolet.toml", d.join("topolet.toml")).expect("file link");
        let path = d.join("topolet.toml");
        let before = file_id(&path);
        let mut w = DirWatch::new(&path).expect("inotify");
        assert!(w.watches(&d.join("..v1"), "topolet.toml"));
        assert!(w.watches(d, "..data"));

        std::fs::create_dir(d.join("..v2")).expect("v2");
        std::fs::write(d.join("..v2/topolet.toml"), "# v2, longer\n").expect("write v2");
        symlink("..v2", d.join("..data_tmp")).expect("..data_tmp");
        std::fs::rename(d.join("..data_tmp"), d.join("..data")).expect("swap");
        // A guard against a hang only: the events are already queued.
        tokio::time::timeout(Duration::from_secs(60), w.settled())
            .await
            .expect("no event for the swap")
            .expect("inotify read");
        assert_ne!(file_id(&path), before);
        w.follow(&path);
        assert!(w.watches(&d.join("..v2"), "topolet.toml"));
    }

    /// A file written beside the configuration (a log) wakes nothing; the configuration does.
    #[tokio::test]
    async fn only_the_path_s_own_entries_wake_the_watch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("topolet.toml");
        std::fs::write(&path, "# a\n").expect("write");
        let mut w = DirWatch::new(&path).expect("inotify");
        std::fs::write(dir.path().join("topolet.log"), "a line\n").expect("log");
        let log_only = w.events().await.expect("inotify read");
        assert!(!log_only, "the log's events are not the configuration's");
        std::fs::write(&path, "# b\n").expect("rewrite");
        assert!(w.events().await.expect("inotify read"));
    }

    #[test]
    fn nri_and_state_keep_running_values_and_changed_sections_are_listed() {
        let running = Config::default();
        let mut new = Config::default();
        new.nri.index = PluginIndex(10);
        new.state.dir = "/elsewhere".into();
        new.qos.pids_limit = 100;
        new.cpu.reserved_cpus = Some("0".into());
        let c = candidate(&running, new);
        assert_eq!(c.config.nri, running.nri);
        assert_eq!(c.config.state, running.state);
        assert_eq!(c.config.qos.pids_limit, 100);
        assert_eq!(c.changed, ["cpu", "qos"]);
        assert_eq!(c.restart_needed.len(), 2);
        assert!(
            c.restart_needed[0].contains("50-topolet")
                && c.restart_needed[0].contains("10-topolet")
        );
        // A section reload does not apply (here [eviction]) keeps its running value.
        let other = Config::parse(
            "[eviction]\npressure_transition_period = \"1m\"\n",
            Path::new("/etc/topolet/config.toml"),
        )
        .unwrap();
        assert_ne!(other, running);
        let c = candidate(&running, other);
        assert_eq!(c.config, running);
        assert!(c.changed.is_empty());
        assert_eq!(c.restart_needed.len(), 1, "{:?}", c.restart_needed);
        // [reclaimed] resource_name needs a restart, naming the key; its other keys apply.
        let mut renamed = running.clone();
        renamed.reclaimed.resource_name = "example.com/batch-cpu".into();
        renamed.reclaimed.window = "2m".into();
        let c = candidate(&running, renamed);
        assert_eq!(c.changed, ["reclaimed"]);
        assert_eq!(
            c.config.reclaimed.resource_name,
            running.reclaimed.resource_name
        );
        assert_eq!(c.config.reclaimed.window, "2m");
        assert!(
            c.restart_needed.len() == 1
                && c.restart_needed[0].contains("[reclaimed] resource_name")
                && c.restart_needed[0].contains("example.com/batch-cpu"),
            "{:?}",
            c.restart_needed
        );
        // [kubernetes] too: read at start only.
        let mut api = Config::default();
        api.kubernetes.enabled = crate::config::KubernetesEnabled::Off;
        let c = candidate(&running, api);
        assert_eq!(c.config, running);
        assert_eq!(c.restart_needed.len(), 1, "{:?}", c.restart_needed);
        let same = candidate(&running, Config::default());
        assert!(same.changed.is_empty() && same.restart_needed.is_empty());
    }

    #[test]
    fn each_part_read_at_start_is_kept_and_named_alone() {
        // One change per part of READ_AT_START, in its order: a part added there without a case
        // here fails.
        let cases = [
            ("[nri]", "[nri]\nindex = 10\n"),
            ("[state]", "[state]\ndir = \"/elsewhere\"\n"),
            ("[admin]", "[admin]\nsocket = \"/elsewhere/admin.sock\"\n"),
            ("[metrics]", "[metrics]\naddress = \"127.0.0.1:9999\"\n"),
            (
                "[eviction]",
                "[eviction]\npressure_transition_period = \"1m\"\n",
            ),
            ("[kubernetes]", "[kubernetes]\nenabled = \"off\"\n"),
            ("[kubelet]", "[kubelet]\npod_resources = false\n"),
            (
                "[reclaimed] resource_name",
                "[reclaimed]\nresource_name = \"example.com/batch-cpu\"\n",
            ),
        ];
        let keys: Vec<&str> = READ_AT_START.iter().map(|p| p.key).collect();
        assert_eq!(keys, cases.map(|(k, _)| k));
        let running = Config::default();
        for (key, text) in cases {
            let new = Config::parse(text, Path::new("/etc/topolet/config.toml")).unwrap();
            assert_ne!(new, running, "{key}: the case changes nothing");
            let c = candidate(&running, new);
            assert_eq!(c.config, running, "{key}: the running value is kept");
            assert!(c.changed.is_empty(), "{key}: {:?}", c.changed);
            assert!(
                c.restart_needed.len() == 1 && c.restart_needed[0].starts_with(key),
                "{key}: {:?}",
                c.restart_needed
            );
        }
        // A part's values are shown where they fit in a line.
        let c = candidate(
            &running,
            Config::parse(
                "[reclaimed]\nresource_name = \"example.com/batch-cpu\"\n",
                Path::new("/etc/topolet/config.toml"),
            )
            .unwrap(),
        );
        assert_eq!(
            c.restart_needed,
            ["[reclaimed] resource_name (running: topolet.io/reclaimed-cpu; file: example.com/batch-cpu)"]
        );
    }

    #[test]
    fn config_check_s_line_lists_every_part_read_at_start() {
        let line = read_at_start_line();
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.ends_with(
                ": [nri], [state], [admin], [metrics], [eviction], [kubernetes], [kubelet], [reclaimed] resource_name"
            ),
            "{line}"
        );
        assert!(line.contains("restart"), "{line}");
    }

    #[test]
    fn file_id_follows_symlinks_and_sees_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.toml");
        let b = dir.path().join("b.toml");
        std::fs::write(&a, "x").unwrap();
        std::fs::write(&b, "y").unwrap();
        let link = dir.path().join("config.toml");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        let first = file_id(&link).unwrap();
        // The ConfigMap update: the link now points at another file.
        let tmp = dir.path().join("tmp");
        std::os::unix::fs::symlink(&b, &tmp).unwrap();
        std::fs::rename(&tmp, &link).unwrap();
        assert_ne!(file_id(&link), Some(first));
        std::fs::remove_file(&link).unwrap();
        assert_eq!(file_id(&link), None);
    }
}
