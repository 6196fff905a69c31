//! The metrics and health endpoint: HTTP/1.1 through hyper's server, three read-only paths.
//!
//! - `GET /metrics`: Prometheus text exposition format 0.0.4;
//! - `GET /healthz`: 200 while the process serves requests (liveness);
//! - `GET /readyz`: 200 once the NRI connection is synchronized (events flow), 503 with the
//!   connection state otherwise (readiness).
//!
//! `HEAD` is answered like `GET` without a body; other methods get 405, other paths 404.
//!
//! The port is reachable from every pod of the cluster, and the kubelet's liveness probe uses it:
//! no client may starve the probe. So connections are taken first and judged after:
//! - every connection is accepted at once; the accept loop never waits on a client;
//! - [`Admission`] holds at most [`MAX_CONNECTIONS`] open connections, and at most
//!   [`MAX_PER_PEER`] from one client address: past either, the connection gets a fixed 503
//!   written without waiting (`try_write` into the fresh socket's empty send buffer) and is closed.
//!   One client, whatever it opens, holds [`MAX_PER_PEER`] slots, so the probe (from the node's
//!   address) always finds one free unless [`MAX_CONNECTIONS`] / [`MAX_PER_PEER`] other
//!   addresses flood together; the chart's optional NetworkPolicy closes the port to all but the
//!   node and the scrapers for that case;
//! - a client gets [`HEADER_TIMEOUT`] to send its request head and [`CONNECTION_TIMEOUT`] for the
//!   whole exchange; one request per connection (no keep-alive), so an idle client holds nothing.
//!
//! Why this and not a listener of its own for the probes: the kubelet probes a pod's own address
//! (or, with `host:`, an address of the node's network namespace), so a second port would face the
//! same clients. Why hyper: it is already in the binary (through kube and tonic), and its HTTP/1
//! server gives the parser, the header-read deadline and the 400/431 answers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::introspection::{self, Introspected};

/// Longest request head (request line and headers) read; hyper answers 431 past it.
pub const MAX_HEAD: usize = 8192;
/// How long a client may take to send its request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one connection may take in all (request head, answer written).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, from every client together.
pub const MAX_CONNECTIONS: usize = 64;
/// Connections open at once from one client address.
pub const MAX_PER_PEER: usize = 8;

/// The outcomes of a connection, as counted in `topolet_http_connections_total{result}`.
pub const RESULTS: [&str; 5] = ["served", "busy", "peer_limit", "timeout", "error"];

/// The answer to a connection turned away: complete, so that the client sees why.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 21\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n";

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

/// Why a connection was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// [`MAX_CONNECTIONS`] are open.
    Busy,
    /// [`MAX_PER_PEER`] are open from this client's address.
    PeerLimit,
}

impl Refusal {
    /// The result label of `topolet_http_connections_total`.
    pub fn result(self) -> &'static str {
        match self {
            Refusal::Busy => "busy",
            Refusal::PeerLimit => "peer_limit",
        }
    }
}

/// The open connections, in all and by client address.
#[derive(Debug)]
pub struct Admission {
    max_total: usize,
    max_per_peer: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// One admitted connection; its slot is given back when dropped.
#[derive(Debug)]
pub struct Slot {
    admission: Arc<Admission>,
    peer: IpAddr,
}

impl Admission {
    pub fn new(max_total: usize, max_per_peer: usize) -> Arc<Admission> {
        Arc::new(Admission {
            max_total,
            max_per_peer,
            open: Mutex::new(Open::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // Two counters changed together under the lock: a panic cannot leave them half-changed.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection from `peer`, or why there is none.
    pub fn enter(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refusal> {
        let mut open = self.lock();
        let from_peer = open.by_peer.get(&peer).copied().unwrap_or(0);
        if from_peer >= self.max_per_peer {
            return Err(Refusal::PeerLimit);
        }
        if open.total >= self.max_total {
            return Err(Refusal::Busy);
        }
        open.total += 1;
        open.by_peer.insert(peer, from_peer + 1);
        Ok(Slot {
            admission: self.clone(),
            peer,
        })
    }

    /// Connections open now (all, from `peer`).
    pub fn open(&self, peer: IpAddr) -> (usize, usize) {
        let open = self.lock();
        (open.total, open.by_peer.get(&peer).copied().unwrap_or(0))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.admission.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.by_peer.remove(&self.peer);
            }
        }
    }
}

/// What the endpoint answers: the reply to a method and path.
pub type Answer = Arc<dyn Fn(&Method, &str) -> Reply + Send + Sync>;
/// Where a connection's result (one of [`RESULTS`]) is counted.
pub type Count = Arc<dyn Fn(&'static str) + Send + Sync>;

/// Serves the plugin's paths until the task is aborted.
pub async fn serve(listener: TcpListener, plugin: Arc<dyn Introspected>) {
    let answer_plugin = plugin.clone();
    let answer: Answer = Arc::new(move |method: &Method, path: &str| {
        route(
            method,
            path,
            || introspection::metrics_text(&*answer_plugin),
            || introspection::ready(&*answer_plugin),
        )
    });
    let count: Count = Arc::new(move |result| plugin.metrics().http_connection(result));
    serve_with(
        listener,
        Admission::new(MAX_CONNECTIONS, MAX_PER_PEER),
        answer,
        count,
    )
    .await
}

/// Serves `answer` under `admission` until the task is aborted.
pub async fn serve_with(
    listener: TcpListener,
    admission: Arc<Admission>,
    answer: Answer,
    count: Count,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and the like: the accept queue keeps the clients while descriptors free.
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let slot = match admission.enter(peer.ip()) {
            Ok(slot) => slot,
            Err(refusal) => {
                // A fresh socket's send buffer is empty: the whole answer fits, without waiting.
                let _ = stream.try_write(BUSY);
                count(refusal.result());
                continue;
            }
        };
        let (answer, count) = (answer.clone(), count.clone());
        tokio::spawn(async move {
            let _slot = slot;
            count(serve_connection(stream, answer).await);
        });
    }
}

/// Serves one connection (one request); its result label.
async fn serve_connection(stream: tokio::net::TcpStream, answer: Answer) -> &'static str {
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let reply = answer(req.method(), req.uri().path());
        async move { Ok::<_, Infallible>(response(reply)) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
        Ok(Ok(())) => "served",
        Ok(Err(e)) if e.is_timeout() => "timeout",
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "metrics endpoint: connection failed");
            "error"
        }
        Err(_) => "timeout",
    }
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
    method: &Method,
    path: &str,
    metrics: impl FnOnce() -> String,
    ready: impl FnOnce() -> Result<(), String>,
) -> Reply {
    if method != Method::GET && method != Method::HEAD {
        return text(405, "method not allowed: GET or HEAD\n");
    }
    match path {
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

/// The hyper response of `reply` (hyper leaves the body out for HEAD).
fn response(reply: Reply) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(reply.body)));
    *r.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    h.insert(CONNECTION, HeaderValue::from_static("close"));
    if reply.status == 405 {
        h.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let m = || "m 1\n".to_string();
        let r = route(&Method::GET, "/metrics", m, || Ok(()));
        assert_eq!((r.status, r.content_type), (200, METRICS_CONTENT_TYPE));
        assert_eq!(r.body, "m 1\n");
        assert_eq!(
            route(&Method::GET, "/healthz", m, || Err("x".into())).status,
            200
        );
        assert_eq!(route(&Method::HEAD, "/readyz", m, || Ok(())).status, 200);
        let r = route(&Method::GET, "/readyz", m, || Err("NRI Connecting".into()));
        assert_eq!(
            (r.status, r.body.as_str()),
            (503, "not ready: NRI Connecting\n")
        );
        assert_eq!(route(&Method::GET, "/", m, || Ok(())).status, 404);
        assert_eq!(route(&Method::POST, "/metrics", m, || Ok(())).status, 405);
        let r = response(route(&Method::POST, "/metrics", m, || Ok(())));
        assert_eq!(r.headers()[ALLOW], "GET, HEAD");
    }

    #[test]
    fn the_busy_answer_is_a_complete_response() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{head} / {body:?}"
        );
    }

    #[test]
    fn admission_limits_each_peer_and_the_total() {
        let a = Admission::new(4, 2);
        let p1: IpAddr = "10.0.0.1".parse().unwrap();
        let p2: IpAddr = "10.0.0.2".parse().unwrap();
        let p3: IpAddr = "10.0.0.3".parse().unwrap();
        let s1 = a.enter(p1).unwrap();
        let s2 = a.enter(p1).unwrap();
        assert_eq!(a.enter(p1).unwrap_err(), Refusal::PeerLimit);
        let _s3 = a.enter(p2).unwrap();
        let _s4 = a.enter(p2).unwrap();
        // Full: a third address is turned away until a slot is given back.
        assert_eq!(a.enter(p3).unwrap_err(), Refusal::Busy);
        assert_eq!(a.open(p1), (4, 2));
        drop(s1);
        assert_eq!(a.open(p1), (3, 1));
        let _s5 = a.enter(p3).unwrap();
        drop(s2);
        assert_eq!(a.open(p1), (3, 0));
        assert_eq!(a.enter(p1).map(|_| ()), Ok(()));
    }

    /// GETs `path` from `from` (a loopback address of its own); the status line.
    async fn get(addr: SocketAddr, from: &str, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        // A refused connection may be closed before the request is written: that is an answer.
        let _ = s.write_all(req.as_bytes()).await;
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }

    /// Connection results counted by a test server, by label.
    type Counts = Arc<Mutex<HashMap<&'static str, usize>>>;

    /// An endpoint on a free loopback port serving [`route`] (16 connections, 4 per address).
    async fn test_server() -> (
        SocketAddr,
        Arc<Admission>,
        Counts,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let admission = Admission::new(16, 4);
        let counts = Counts::default();
        let c = counts.clone();
        let count: Count = Arc::new(move |r| *c.lock().unwrap().entry(r).or_default() += 1);
        let answer: Answer = Arc::new(|m: &Method, p: &str| route(m, p, String::new, || Ok(())));
        let server = tokio::spawn(serve_with(listener, admission.clone(), answer, count));
        (addr, admission, counts, server)
    }

    #[tokio::test]
    async fn idle_clients_of_one_address_never_starve_another() {
        let (addr, admission, counts, server) = test_server().await;

        // 40 connections from 127.0.0.2 that never send a byte.
        let mut idle = Vec::new();
        for _ in 0..40 {
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
            idle.push(sock.connect(addr).await.unwrap());
        }
        // Wait on state: the server has judged all 40 (4 held, 36 turned away).
        let flooder: IpAddr = "127.0.0.2".parse().unwrap();
        while counts
            .lock()
            .unwrap()
            .get("peer_limit")
            .copied()
            .unwrap_or(0)
            < 36
        {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(admission.open(flooder), (4, 4));
        // One more from the flooder is answered 503 at once; the probe's address is served.
        assert_eq!(
            get(addr, "127.0.0.2", "/healthz").await,
            "HTTP/1.1 503 Service Unavailable"
        );
        for _ in 0..5 {
            assert_eq!(get(addr, "127.0.0.1", "/healthz").await, "HTTP/1.1 200 OK");
        }
        assert_eq!(
            get(addr, "127.0.0.1", "/nope").await,
            "HTTP/1.1 404 Not Found"
        );
        drop(idle);
        server.abort();
    }

    #[tokio::test]
    async fn a_client_that_sends_no_head_is_closed_after_the_header_timeout() {
        use tokio::io::AsyncReadExt;
        let (addr, admission, counts, server) = test_server().await;
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The read ends when the server closes the connection at its header deadline (the
        // state waited on), and the slot is given back.
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        assert_eq!(counts.lock().unwrap().get("timeout").copied(), Some(1));
        assert_eq!(admission.open("127.0.0.1".parse().unwrap()), (0, 0));
        server.abort();
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
