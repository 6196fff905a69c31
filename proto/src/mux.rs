//! NRI connection multiplexer: several logical byte streams over one unix stream.
//!
//! Wire format (containerd/nri `pkg/net/multiplex`): every frame is an 8-byte header
//! (u32 big-endian conn id, u32 big-endian payload length) followed by the payload.
//! Conn [`PLUGIN_SERVICE_CONN`] (1) carries the Plugin service (served by the plugin),
//! conn [`RUNTIME_SERVICE_CONN`] (2) the Runtime service (served by the runtime). The
//! mux is symmetric, so the same type serves a plugin and a (fake) runtime.
//!
//! Write side: each `poll_write` on a [`MuxConn`] accepts the whole buffer and emits
//! exactly one frame, split only above [`MAX_FRAME_PAYLOAD`]; writes are never
//! coalesced. Go's reader returns ENOMEM for a frame larger than its read buffer, and
//! ttrpc-rust's "header + ≤4086 bytes, then the rest" write pattern is only safe if
//! frame boundaries follow write boundaries: Go's ttrpc reads through a 4096-byte
//! `bufio.Reader`, and the Go mux's `Read` (containerd/nri `pkg/net/multiplex`) fails with
//! ENOMEM rather than return part of a frame larger than the caller's buffer.
//!
//! Read side: frames up to [`MAX_FRAME_PAYLOAD`] bytes; a larger declared length is a
//! protocol error that closes the trunk (nothing is allocated for it). Frames for
//! conn 0 or for conns nobody opened are dropped. Trunk EOF or error ends every
//! logical conn with EOF or the error.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Logical connection id.
pub type ConnId = u32;

/// Conn carrying the Plugin service (plugin = ttrpc server).
pub const PLUGIN_SERVICE_CONN: ConnId = 1;
/// Conn carrying the Runtime service (runtime = ttrpc server).
pub const RUNTIME_SERVICE_CONN: ConnId = 2;
/// Frame header size in bytes.
pub const HEADER_LEN: usize = 8;
/// Largest payload per frame: 4 MiB + 10 (NRI ≥ v0.7).
pub const MAX_FRAME_PAYLOAD: usize = 4 * 1024 * 1024 + 10;
/// Frames buffered per logical conn before the trunk reader waits (Go uses 256).
pub const CONN_QUEUE_FRAMES: usize = 256;
/// Write requests buffered for the trunk writer before `poll_write` waits.
const WRITE_QUEUE: usize = 64;

/// Errors of the multiplexer.
#[derive(Debug, thiserror::Error)]
pub enum MuxError {
    /// Conn id 0 is reserved by the protocol.
    #[error("mux conn id 0 is reserved")]
    ReservedConn,
    /// The conn id is already open on this mux.
    #[error("mux conn {0} is already open")]
    ConnInUse(ConnId),
    /// The trunk is closed; no conn can be opened.
    #[error("mux trunk is closed")]
    Closed,
}

/// Error raised by the trunk reader when a frame header is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Declared payload length exceeds [`MAX_FRAME_PAYLOAD`].
    #[error("mux frame for conn {conn} declares {len} bytes, more than the {max} byte limit")]
    Oversized {
        /// Conn id in the header.
        conn: ConnId,
        /// Declared length.
        len: u32,
        /// Limit.
        max: usize,
    },
}

/// Encodes a frame header.
pub fn encode_header(conn: ConnId, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&conn.to_be_bytes());
    h[4..].copy_from_slice(&len.to_be_bytes());
    h
}

/// Decodes and validates a frame header; returns `(conn, payload_len)`.
pub fn decode_header(h: &[u8; HEADER_LEN]) -> Result<(ConnId, usize), FrameError> {
    let conn = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    let n = len as usize;
    if n > MAX_FRAME_PAYLOAD {
        return Err(FrameError::Oversized {
            conn,
            len,
            max: MAX_FRAME_PAYLOAD,
        });
    }
    Ok((conn, n))
}

/// Builds the wire bytes for one logical write: one frame, or several if `data`
/// exceeds [`MAX_FRAME_PAYLOAD`]. Empty input gives no frames.
pub fn encode_frames(conn: ConnId, data: &[u8]) -> Vec<u8> {
    let frames = data.len().div_ceil(MAX_FRAME_PAYLOAD);
    let mut out = Vec::with_capacity(data.len() + frames * HEADER_LEN);
    for chunk in data.chunks(MAX_FRAME_PAYLOAD) {
        // chunk.len() <= MAX_FRAME_PAYLOAD < u32::MAX
        out.extend_from_slice(&encode_header(conn, chunk.len() as u32));
        out.extend_from_slice(chunk);
    }
    out
}

/// State of the trunk as seen by observers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrunkState {
    /// Trunk is open.
    Open,
    /// Trunk ended with EOF (peer closed) or was closed locally.
    Eof,
    /// Trunk failed; the message names the cause.
    Failed(io::ErrorKind, String),
}

type Frame = Vec<u8>;

struct Shared {
    conns: Mutex<HashMap<ConnId, mpsc::Sender<Frame>>>,
    state_tx: watch::Sender<TrunkState>,
}

impl Shared {
    fn finish(&self, state: TrunkState) {
        self.state_tx.send_if_modified(|s| {
            if *s == TrunkState::Open {
                *s = state;
                true
            } else {
                false
            }
        });
        // Dropping the senders ends every logical conn.
        if let Ok(mut conns) = self.conns.lock() {
            conns.clear();
        }
    }

    fn state(&self) -> TrunkState {
        self.state_tx.borrow().clone()
    }
}

/// A multiplexed trunk. Dropping it closes the trunk (the peer sees EOF) and ends
/// every logical conn.
pub struct Mux {
    shared: Arc<Shared>,
    write_tx: mpsc::Sender<Frame>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mux")
            .field("state", &self.shared.state())
            .finish()
    }
}

impl Mux {
    /// Starts a mux over `trunk` and opens `conn_ids` before any frame is read, so
    /// no early frame for them is lost. Must be called inside a tokio runtime.
    pub fn new<T>(trunk: T, conn_ids: &[ConnId]) -> Result<(Mux, Vec<MuxConn>), MuxError>
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (state_tx, _) = watch::channel(TrunkState::Open);
        let shared = Arc::new(Shared {
            conns: Mutex::new(HashMap::new()),
            state_tx,
        });
        let (write_tx, write_rx) = mpsc::channel(WRITE_QUEUE);
        let mut conns = Vec::with_capacity(conn_ids.len());
        for &id in conn_ids {
            conns.push(open_conn(&shared, &write_tx, id)?);
        }
        let (rd, wr) = tokio::io::split(trunk);
        let reader = tokio::spawn(read_loop(rd, shared.clone()));
        let writer = tokio::spawn(write_loop(wr, write_rx, shared.clone()));
        Ok((
            Mux {
                shared,
                write_tx,
                reader,
                writer,
            },
            conns,
        ))
    }

    /// Opens another logical conn. Frames that arrived for it earlier were dropped.
    pub fn open(&self, id: ConnId) -> Result<MuxConn, MuxError> {
        open_conn(&self.shared, &self.write_tx, id)
    }

    /// Current trunk state.
    pub fn state(&self) -> TrunkState {
        self.shared.state()
    }

    /// Resolves when the trunk is no longer open; returns the final state.
    pub fn closed(&self) -> impl Future<Output = TrunkState> + Send + 'static {
        let mut rx = self.shared.state_tx.subscribe();
        async move {
            loop {
                let s = rx.borrow_and_update().clone();
                if s != TrunkState::Open {
                    return s;
                }
                if rx.changed().await.is_err() {
                    return TrunkState::Eof;
                }
            }
        }
    }

    /// Closes the trunk now.
    pub fn close(&self) {
        self.reader.abort();
        self.writer.abort();
        self.shared.finish(TrunkState::Eof);
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        self.close();
    }
}

fn open_conn(
    shared: &Arc<Shared>,
    write_tx: &mpsc::Sender<Frame>,
    id: ConnId,
) -> Result<MuxConn, MuxError> {
    if id == 0 {
        return Err(MuxError::ReservedConn);
    }
    if shared.state() != TrunkState::Open {
        return Err(MuxError::Closed);
    }
    let (tx, rx) = mpsc::channel(CONN_QUEUE_FRAMES);
    {
        let mut conns = shared.conns.lock().map_err(|_| MuxError::Closed)?;
        if conns.contains_key(&id) {
            return Err(MuxError::ConnInUse(id));
        }
        conns.insert(id, tx);
    }
    Ok(MuxConn {
        id,
        shared: shared.clone(),
        rx,
        cur: Vec::new(),
        pos: 0,
        write: Mutex::new(WriteState {
            tx: write_tx.clone(),
            reserve: None,
        }),
    })
}

/// Bytes the trunk reader asks the socket for at once: a whole NRI request or reply (a few KiB)
/// and its header arrive in one `recv`, and a short read tells tokio the socket is drained, so
/// no extra `recv` ends in `EAGAIN`.
const READ_CHUNK: usize = 64 * 1024;

/// Buffered reader of the trunk: frames are cut out of `buf[start..end]`.
struct TrunkReader<R> {
    rd: R,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl<R: AsyncRead + Unpin> TrunkReader<R> {
    fn new(rd: R) -> Self {
        TrunkReader {
            rd,
            buf: vec![0u8; READ_CHUNK].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Reads more bytes after the buffered ones; returns how many (0 at EOF).
    async fn fill(&mut self) -> io::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = self.rd.read(&mut self.buf[self.end..]).await?;
        self.end += n;
        Ok(n)
    }

    /// Reads a header; `Ok(false)` on clean EOF before its first byte.
    async fn header(&mut self) -> io::Result<Option<[u8; HEADER_LEN]>> {
        while self.buffered() < HEADER_LEN {
            if self.fill().await? == 0 {
                if self.buffered() == 0 {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "mux trunk ended inside a frame header",
                ));
            }
        }
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&self.buf[self.start..self.start + HEADER_LEN]);
        self.start += HEADER_LEN;
        Ok(Some(h))
    }

    /// Reads `len` payload bytes into a new buffer (large payloads are read straight into it).
    async fn payload(&mut self, len: usize) -> io::Result<Vec<u8>> {
        let have = self.buffered().min(len);
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&self.buf[self.start..self.start + have]);
        self.start += have;
        if out.len() < len {
            if len - out.len() >= self.buf.len() {
                out.resize(len, 0);
                self.rd.read_exact(&mut out[have..]).await?;
            } else {
                while out.len() < len {
                    if self.fill().await? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    let take = self.buffered().min(len - out.len());
                    out.extend_from_slice(&self.buf[self.start..self.start + take]);
                    self.start += take;
                }
            }
        }
        Ok(out)
    }

    /// Skips `len` payload bytes; returns how many were there before EOF.
    async fn skip(&mut self, len: usize) -> io::Result<usize> {
        let mut skipped = 0;
        while skipped < len {
            if self.buffered() == 0 && self.fill().await? == 0 {
                break;
            }
            let take = self.buffered().min(len - skipped);
            self.start += take;
            skipped += take;
        }
        Ok(skipped)
    }
}

async fn read_loop<R: AsyncRead + Unpin>(rd: R, shared: Arc<Shared>) {
    let mut rd = TrunkReader::new(rd);
    let end = loop {
        let hdr = match rd.header().await {
            Ok(None) => break TrunkState::Eof,
            Ok(Some(h)) => h,
            Err(e) => break TrunkState::Failed(e.kind(), format!("mux trunk read failed: {e}")),
        };
        let (conn, len) = match decode_header(&hdr) {
            Ok(v) => v,
            Err(e) => break TrunkState::Failed(io::ErrorKind::InvalidData, e.to_string()),
        };
        let target = if conn == 0 || len == 0 {
            None
        } else {
            shared.conns.lock().ok().and_then(|c| c.get(&conn).cloned())
        };
        let Some(tx) = target else {
            // Drop the payload without keeping it.
            match rd.skip(len).await {
                Ok(n) if n == len => continue,
                Ok(_) => {
                    break TrunkState::Failed(
                        io::ErrorKind::UnexpectedEof,
                        format!("mux trunk ended inside a frame for conn {conn}"),
                    )
                }
                Err(e) => {
                    break TrunkState::Failed(e.kind(), format!("mux trunk read failed: {e}"))
                }
            }
        };
        let payload = match rd.payload(len).await {
            Ok(p) => p,
            Err(e) => {
                break TrunkState::Failed(
                    e.kind(),
                    format!("mux trunk ended inside a frame for conn {conn}: {e}"),
                )
            }
        };
        // Fast path: room in the conn's queue (the usual case) needs no await.
        let sent = match tx.try_send(payload) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(p)) => tx.send(p).await.map_err(|_| ()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        };
        if sent.is_err() {
            // Receiver dropped: the conn was closed locally; forget it.
            if let Ok(mut c) = shared.conns.lock() {
                c.remove(&conn);
            }
        }
    };
    match &end {
        TrunkState::Failed(_, msg) => tracing::debug!(error = %msg, "nri mux trunk failed"),
        _ => tracing::debug!("nri mux trunk reached eof"),
    }
    shared.finish(end);
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::Receiver<Frame>,
    shared: Arc<Shared>,
) {
    while let Some(frame) = rx.recv().await {
        if let Err(e) = wr.write_all(&frame).await {
            shared.finish(TrunkState::Failed(
                e.kind(),
                format!("mux trunk write failed: {e}"),
            ));
            return;
        }
        // Flush only when no more writes are queued.
        if rx.is_empty() {
            if let Err(e) = wr.flush().await {
                shared.finish(TrunkState::Failed(
                    e.kind(),
                    format!("mux trunk flush failed: {e}"),
                ));
                return;
            }
        }
    }
}

type ReserveFut = Pin<
    Box<dyn Future<Output = Result<mpsc::OwnedPermit<Frame>, mpsc::error::SendError<()>>> + Send>,
>;

struct WriteState {
    tx: mpsc::Sender<Frame>,
    reserve: Option<ReserveFut>,
}

/// One logical connection of a [`Mux`]: a byte stream implementing tokio
/// `AsyncRead + AsyncWrite`, usable with `ttrpc::r#async::transport::Socket::new`.
pub struct MuxConn {
    id: ConnId,
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Frame>,
    cur: Frame,
    pos: usize,
    // Mutex only to make the boxed reservation future `Sync`; accessed via `get_mut`.
    write: Mutex<WriteState>,
}

impl std::fmt::Debug for MuxConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxConn").field("id", &self.id).finish()
    }
}

impl MuxConn {
    /// The conn id.
    pub fn id(&self) -> ConnId {
        self.id
    }

    fn closed_error(&self) -> io::Error {
        match self.shared.state() {
            TrunkState::Failed(kind, msg) => io::Error::new(kind, msg),
            _ => io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("mux trunk closed, conn {}", self.id),
            ),
        }
    }
}

impl Drop for MuxConn {
    fn drop(&mut self) {
        if let Ok(mut c) = self.shared.conns.lock() {
            c.remove(&self.id);
        }
    }
}

impl AsyncRead for MuxConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.pos < this.cur.len() {
                let n = buf.remaining().min(this.cur.len() - this.pos);
                buf.put_slice(&this.cur[this.pos..this.pos + n]);
                this.pos += n;
                if this.pos == this.cur.len() {
                    this.cur = Vec::new();
                    this.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(frame)) => {
                    this.cur = frame;
                    this.pos = 0;
                }
                Poll::Ready(None) => {
                    return match this.shared.state() {
                        TrunkState::Failed(kind, msg) => {
                            Poll::Ready(Err(io::Error::new(kind, msg)))
                        }
                        _ => Poll::Ready(Ok(())), // EOF
                    };
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl AsyncWrite for MuxConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.shared.state() != TrunkState::Open {
            return Poll::Ready(Err(this.closed_error()));
        }
        let id = this.id;
        let ws = match this.write.get_mut() {
            Ok(ws) => ws,
            Err(p) => p.into_inner(),
        };
        if ws.reserve.is_none() {
            // Fast path: room in the write queue (the usual case) needs no boxed future.
            let closed = match ws.tx.try_reserve() {
                Ok(permit) => {
                    permit.send(encode_frames(id, buf));
                    return Poll::Ready(Ok(buf.len()));
                }
                Err(mpsc::error::TrySendError::Closed(())) => true,
                Err(mpsc::error::TrySendError::Full(())) => false,
            };
            if closed {
                return Poll::Ready(Err(this.closed_error()));
            }
        }
        let fut = ws
            .reserve
            .get_or_insert_with(|| Box::pin(ws.tx.clone().reserve_owned()));
        match fut.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => {
                ws.reserve = None;
                Poll::Ready(Err(this.closed_error()))
            }
            Poll::Ready(Ok(permit)) => {
                ws.reserve = None;
                permit.send(encode_frames(id, buf));
                Poll::Ready(Ok(buf.len()))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Frames are handed to the trunk writer, which flushes when its queue drains.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The protocol has no per-conn close frame.
        Poll::Ready(Ok(()))
    }
}
