//! The metrics endpoint: a minimal HTTP/1.1 server on tokio serving three read-only paths.
//!
//! - `GET /metrics`: Prometheus text exposition format 0.0.4;
//! - `GET /healthz`: 200 while the process serves requests (liveness);
//! - `GET /readyz`: 200 once the NRI connection is synchronized (events flow), 503 with the
//!   connection state otherwise (readiness).
//!
//! `HEAD` is answered like `GET` without a body; other methods get 405, other paths 404. Each
//! connection carries one request (`Connection: close`); request heads are limited to
//! [`MAX_HEAD`] bytes and [`IO_TIMEOUT`], and at most [`MAX_CONNECTIONS`] are served at once, so a
//! misbehaving client cannot hold the plugin's resources. No dependency beyond tokio: three fixed
//! GET routes do not need an HTTP framework.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::introspection;
use crate::nri::handlers::TopoletPlugin;

/// Longest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 8192;
/// How long a client may take to send its request and read the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served concurrently; more wait in the accept queue.
pub const MAX_CONNECTIONS: usize = 16;

/// The metrics endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("metrics address {address:?}: not an ip:port address: {reason}")]
    Address { address: String, reason: String },
    #[error("metrics address {address}: cannot listen: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
}

/// Binds `address` (`ip:port`; port 0 picks a free one).
pub async fn bind(address: &str) -> Result<TcpListener, HttpError> {
    let addr: SocketAddr =
        address
            .parse()
            .map_err(|e: std::net::AddrParseError| HttpError::Address {
                address: address.to_string(),
                reason: e.to_string(),
            })?;
    TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind {
            address: address.to_string(),
            source,
        })
}

/// Serves until the task is aborted.
pub async fn serve(listener: TcpListener, plugin: Arc<TopoletPlugin>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let plugin = plugin.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if tokio::time::timeout(IO_TIMEOUT, handle(stream, &plugin))
                .await
                .is_err()
            {
                tracing::debug!("metrics endpoint: client too slow");
            }
        });
    }
}

/// A parsed request line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLine {
    pub method: String,
    pub path: String,
}

/// Parses the request line of `head`; `None` when it is not HTTP/1.x.
pub fn parse_request_line(head: &str) -> Option<RequestLine> {
    let line = head.lines().next()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || method.is_empty() {
        return None;
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    Some(RequestLine {
        method: method.to_string(),
        path: path.to_string(),
    })
}

/// A response: status, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

/// The text exposition content type Prometheus negotiates for format 0.0.4.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn text(status: u16, body: impl Into<String>) -> Reply {
    Reply {
        status,
        content_type: "text/plain; charset=utf-8",
        body: body.into(),
    }
}

/// Routes one request; `metrics` and `ready` are only evaluated for their path.
pub fn route(
    req: &RequestLine,
    metrics: impl FnOnce() -> String,
    ready: impl FnOnce() -> Result<(), String>,
) -> Reply {
    if req.method != "GET" && req.method != "HEAD" {
        return text(405, "method not allowed: GET or HEAD\n");
    }
    match req.path.as_str() {
        "/metrics" => Reply {
            status: 200,
            content_type: METRICS_CONTENT_TYPE,
            body: metrics(),
        },
        "/healthz" => text(200, "ok\n"),
        "/readyz" => match ready() {
            Ok(()) => text(200, "ok\n"),
            Err(why) => text(503, format!("not ready: {why}\n")),
        },
        _ => text(404, "not found: try /metrics, /healthz or /readyz\n"),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// The bytes of `reply` (no body for HEAD).
pub fn encode(reply: &Reply, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len()
    );
    if reply.status == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(reply.body.as_bytes());
    }
    bytes
}

async fn handle(mut stream: TcpStream, plugin: &TopoletPlugin) {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if head.len() > MAX_HEAD {
            break false;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    };
    let (reply, head_only) = if !complete {
        (text(431, "request head too large\n"), false)
    } else {
        match parse_request_line(&String::from_utf8_lossy(&head)) {
            None => (text(400, "bad request\n"), false),
            Some(req) => (
                route(
                    &req,
                    || introspection::metrics_text(plugin),
                    || introspection::ready(plugin),
                ),
                req.method == "HEAD",
            ),
        }
    };
    let _ = stream.write_all(&encode(&reply, head_only)).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, path: &str) -> RequestLine {
        RequestLine {
            method: method.into(),
            path: path.into(),
        }
    }

    #[test]
    fn request_lines() {
        assert_eq!(
            parse_request_line("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Some(req("GET", "/metrics"))
        );
        assert_eq!(parse_request_line("GET /metrics\r\n\r\n"), None);
        assert_eq!(parse_request_line("GET /metrics SPDY/3\r\n\r\n"), None);
        assert_eq!(parse_request_line(""), None);
    }

    #[test]
    fn routes() {
        let m = || "m 1\n".to_string();
        let r = route(&req("GET", "/metrics"), m, || Ok(()));
        assert_eq!((r.status, r.content_type), (200, METRICS_CONTENT_TYPE));
        assert_eq!(r.body, "m 1\n");
        assert_eq!(
            route(&req("GET", "/healthz"), m, || Err("x".into())).status,
            200
        );
        assert_eq!(route(&req("GET", "/readyz"), m, || Ok(())).status, 200);
        let r = route(&req("GET", "/readyz"), m, || Err("NRI Connecting".into()));
        assert_eq!(
            (r.status, r.body.as_str()),
            (503, "not ready: NRI Connecting\n")
        );
        assert_eq!(route(&req("GET", "/"), m, || Ok(())).status, 404);
        assert_eq!(route(&req("POST", "/metrics"), m, || Ok(())).status, 405);
        let bytes = encode(&route(&req("HEAD", "/healthz"), m, || Ok(())), true);
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn bind_errors_name_the_address() {
        let e = bind("localhost:1").await.unwrap_err().to_string();
        assert!(e.contains("\"localhost:1\""), "{e}");
        let l = bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let e = bind(&addr).await.unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("metrics address {addr}: cannot listen")),
            "{e}"
        );
    }
}
