//! The admin socket: a root-only unix socket the running plugin answers status requests on, and
//! the client `topolet status` uses.
//!
//! Protocol (version 1), one exchange per connection: the client writes one JSON object on one
//! line, `{"version":1,"request":"status"}`, and the server answers one line,
//! `{"version":1,"ok":true,"status":{…}}` or `{"version":1,"ok":false,"error":"…"}`, then closes.
//! The status object is `topolet_core::report::status::Status`, the same JSON `topolet status -o json` prints.
//! Requests are read-only; a request line is at most [`MAX_REQUEST`] bytes and must arrive within
//! [`IO_TIMEOUT`].
//!
//! Access control is the file mode: the socket is created 0600 (bound inside a fresh 0700
//! directory next to it, chmod-ed, then renamed into place, so it is never reachable with looser
//! permissions, whatever the umask). A missing parent directory is created 0700; an existing one
//! is left as it is, unless everyone may write to it (then anyone could replace the socket with
//! their own): that is refused. A stale socket (nobody listening) is replaced; a live one
//! (another topolet) or a non-socket file at the path is an error.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use crate::introspection::{self, Introspected};
use crate::pressure::PressureReport;
use topolet_core::report::status::Status;

/// Protocol version.
pub const PROTOCOL_VERSION: u32 = 1;
/// Longest request line accepted.
pub const MAX_REQUEST: usize = 4096;
/// How long either side waits for the other.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// What went wrong with the admin socket, naming it.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin socket {path}: does not exist (is topolet running, with this [admin] socket?)")]
    Missing { path: PathBuf },
    #[error("admin socket {path}: permission denied (it is root-only: run as root)")]
    PermissionDenied { path: PathBuf },
    #[error("admin socket {path}: nobody is listening (stale socket: topolet is not running)")]
    Refused { path: PathBuf },
    #[error("admin socket {path}: another topolet is serving it")]
    InUse { path: PathBuf },
    #[error("admin socket {path}: exists and is not a socket; not replacing it")]
    NotSocket { path: PathBuf },
    #[error("admin socket {path}: its directory {} is writable by everyone (mode {mode:o}), so anyone could replace the socket; use a root-only directory", dir.display())]
    InsecureDirectory {
        path: PathBuf,
        dir: PathBuf,
        mode: u32,
    },
    #[error("admin socket {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("admin socket {path}: unexpected answer: {message}")]
    Protocol { path: PathBuf, message: String },
    #[error("admin socket {path}: topolet answered with an error: {message}")]
    Remote { path: PathBuf, message: String },
}

impl AdminError {
    /// True when the plugin could not be reached at all (as opposed to a bad answer).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            AdminError::Missing { .. }
                | AdminError::PermissionDenied { .. }
                | AdminError::Refused { .. }
                | AdminError::Io { .. }
        )
    }

    fn io(path: &Path, what: &'static str, source: std::io::Error) -> AdminError {
        use std::io::ErrorKind as K;
        let path = path.to_path_buf();
        match source.kind() {
            K::NotFound => AdminError::Missing { path },
            K::PermissionDenied => AdminError::PermissionDenied { path },
            K::ConnectionRefused => AdminError::Refused { path },
            _ => AdminError::Io { path, what, source },
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Request {
    version: u32,
    request: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Response {
    version: u32,
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<Box<Status>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The bound socket; removes its file when dropped (if it is still ours).
pub struct AdminSocket {
    listener: tokio::net::UnixListener,
    path: PathBuf,
    ino: u64,
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds `path` mode 0600 (see the module docs for stale sockets and the directory). Call inside
/// a tokio runtime.
pub fn bind(path: &Path) -> Result<AdminSocket, AdminError> {
    let err = |what, e| AdminError::io(path, what, e);
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(dir) = parent {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| AdminError::Io {
                    path: path.to_path_buf(),
                    what: "creating its directory",
                    source: e,
                })?;
        }
        let mode = std::fs::metadata(dir)
            .map_err(|e| err("inspecting its directory", e))?
            .permissions()
            .mode();
        if mode & 0o002 != 0 {
            return Err(AdminError::InsecureDirectory {
                path: path.to_path_buf(),
                dir: dir.to_path_buf(),
                mode: mode & 0o7777,
            });
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(AdminError::NotSocket {
                path: path.to_path_buf(),
            })
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(AdminError::InUse {
                    path: path.to_path_buf(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path).map_err(|e| err("removing the stale socket", e))?;
                tracing::info!(path = %path.display(), "removed a stale admin socket");
            }
            Err(e) => return Err(err("probing the existing socket", e)),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err("inspecting", e)),
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Bound inside a private directory: until the chmod, the socket's mode comes from the umask,
    // and nobody else may reach it meanwhile.
    let tmp_dir = path.with_file_name(format!(".{name}.{}.d", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp_dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp_dir)
        .map_err(|e| err("creating its temporary directory", e))?;
    let tmp = tmp_dir.join("admin.sock");
    let bound = std::os::unix::net::UnixListener::bind(&tmp).map_err(|e| err("binding", e));
    let placed = bound.and_then(|l| {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| err("setting mode 0600", e))?;
        std::fs::rename(&tmp, path).map_err(|e| err("moving into place", e))?;
        Ok(l)
    });
    let _ = std::fs::remove_dir_all(&tmp_dir);
    let std_listener = placed?;
    let ino = std::fs::symlink_metadata(path)
        .map_err(|e| err("inspecting", e))?
        .ino();
    std_listener
        .set_nonblocking(true)
        .map_err(|e| err("setting non-blocking", e))?;
    let listener =
        tokio::net::UnixListener::from_std(std_listener).map_err(|e| err("registering", e))?;
    Ok(AdminSocket {
        listener,
        path: path.to_path_buf(),
        ino,
    })
}

/// Serves requests until the task is aborted; `metrics_address` is reported in the status.
pub async fn serve(
    socket: AdminSocket,
    plugin: Arc<dyn Introspected>,
    pressure: Arc<PressureReport>,
    metrics_address: Option<String>,
) {
    let metrics_address = Arc::new(metrics_address);
    loop {
        let stream = match socket.listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(path = %socket.path.display(), error = %e, "admin socket: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let plugin = plugin.clone();
        let pressure = pressure.clone();
        let addr = metrics_address.clone();
        tokio::spawn(async move {
            let answered = answer(stream, &*plugin, &pressure, addr.as_ref());
            if let Err(e) = tokio::time::timeout(IO_TIMEOUT, answered).await {
                tracing::debug!(error = %e, "admin socket: client too slow");
            }
        });
    }
}

async fn answer(
    stream: tokio::net::UnixStream,
    plugin: &dyn Introspected,
    pressure: &PressureReport,
    metrics_address: &Option<String>,
) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = tokio::io::BufReader::new(read).take(MAX_REQUEST as u64 + 1);
    let response = match reader.read_line(&mut line).await {
        Err(e) => error_response(format!("reading the request: {e}")),
        Ok(_) if line.len() > MAX_REQUEST => {
            error_response(format!("request longer than {MAX_REQUEST} bytes"))
        }
        Ok(_) => match serde_json::from_str::<Request>(line.trim()) {
            Err(e) => error_response(format!("bad request: {e}")),
            Ok(r) if r.version != PROTOCOL_VERSION => error_response(format!(
                "protocol version {} not supported (this topolet speaks {PROTOCOL_VERSION})",
                r.version
            )),
            Ok(r) if r.request == "status" => Response {
                version: PROTOCOL_VERSION,
                ok: true,
                status: Some(Box::new(introspection::status(
                    plugin,
                    pressure.latest(),
                    metrics_address.clone(),
                ))),
                error: None,
            },
            Ok(r) => error_response(format!(
                "unknown request {:?} (known: \"status\")",
                r.request
            )),
        },
    };
    let mut text = serde_json::to_string(&response)
        .unwrap_or_else(|e| format!("{{\"version\":1,\"ok\":false,\"error\":\"encoding: {e}\"}}"));
    text.push('\n');
    let _ = write.write_all(text.as_bytes()).await;
    let _ = write.shutdown().await;
}

fn error_response(error: String) -> Response {
    Response {
        version: PROTOCOL_VERSION,
        ok: false,
        status: None,
        error: Some(error),
    }
}

/// Asks the plugin listening on `path` for its status (blocking; for the CLI).
pub fn query_status(path: &Path) -> Result<Status, AdminError> {
    let err = |what, e| AdminError::io(path, what, e);
    let mut stream =
        std::os::unix::net::UnixStream::connect(path).map_err(|e| err("connecting", e))?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| err("setting timeouts", e))?;
    let request = serde_json::to_string(&Request {
        version: PROTOCOL_VERSION,
        request: "status".into(),
    })
    .map_err(|e| AdminError::Protocol {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    stream
        .write_all(format!("{request}\n").as_bytes())
        .map_err(|e| err("sending the request", e))?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(|e| err("reading the answer", e))?;
    let protocol = |message: String| AdminError::Protocol {
        path: path.to_path_buf(),
        message,
    };
    if line.trim().is_empty() {
        return Err(protocol("the connection closed without an answer".into()));
    }
    let response: Response = serde_json::from_str(line.trim())
        .map_err(|e| protocol(format!("{e} (is this a topolet admin socket?)")))?;
    match (response.ok, response.status, response.error) {
        (true, Some(status), _) => Ok(*status),
        (_, _, Some(message)) => Err(AdminError::Remote {
            path: path.to_path_buf(),
            message,
        }),
        _ => Err(protocol("neither a status nor an error".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_errors_name_the_socket_and_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.sock");
        let e = query_status(&missing).unwrap_err();
        assert!(matches!(e, AdminError::Missing { .. }), "{e}");
        assert!(e.is_unreachable());
        assert!(e.to_string().contains(&missing.display().to_string()));

        // A socket file nobody listens on.
        let stale = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let e = query_status(&stale).unwrap_err();
        assert!(matches!(e, AdminError::Refused { .. }), "{e}");
    }

    #[tokio::test]
    async fn bind_is_0600_replaces_stale_refuses_live_and_non_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/admin.sock");
        let s = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        // Live: refused, and the first socket is untouched.
        assert!(matches!(bind(&path), Err(AdminError::InUse { .. })));
        drop(s);
        assert!(!path.exists(), "socket removed on drop");

        // Stale: replaced.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let s = bind(&path).unwrap();
        drop(s);

        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(bind(&file), Err(AdminError::NotSocket { .. })));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    }

    #[test]
    fn responses_round_trip() {
        let r = error_response("x".into());
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(text, r#"{"version":1,"ok":false,"error":"x"}"#);
    }
}
