//! Mux round trips and frame shapes against a raw peer.

// Test code throughout: clippy's `allow-unwrap-in-tests` (clippy.toml) covers the #[test]
// functions, not the helpers they share here.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use topolet_nri::mux::{
    encode_header, Mux, TrunkState, HEADER_LEN, MAX_FRAME_PAYLOAD, PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
};

const GUARD: Duration = Duration::from_secs(20);

async fn read_frame(peer: &mut DuplexStream) -> (u32, Vec<u8>) {
    let mut h = [0u8; HEADER_LEN];
    peer.read_exact(&mut h).await.unwrap();
    let id = u32::from_be_bytes(h[..4].try_into().unwrap());
    let len = u32::from_be_bytes(h[4..].try_into().unwrap()) as usize;
    let mut p = vec![0u8; len];
    peer.read_exact(&mut p).await.unwrap();
    (id, p)
}

fn pair() -> (Mux, Vec<topolet_nri::mux::MuxConn>, DuplexStream) {
    let (a, b) = tokio::io::duplex(16 * 1024 * 1024);
    let (mux, conns) = Mux::new(a, &[PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN]).unwrap();
    (mux, conns, b)
}

#[tokio::test]
async fn one_frame_per_write_never_coalesced() {
    let (_mux, mut conns, mut peer) = pair();
    let c2 = &mut conns[1];
    c2.write_all(&[1u8; 10]).await.unwrap();
    c2.write_all(&[2u8; 5000]).await.unwrap();
    c2.write_all(b"x").await.unwrap();
    c2.flush().await.unwrap();
    assert_eq!(read_frame(&mut peer).await, (2, vec![1u8; 10]));
    assert_eq!(read_frame(&mut peer).await, (2, vec![2u8; 5000]));
    assert_eq!(read_frame(&mut peer).await, (2, b"x".to_vec()));
}

#[tokio::test]
async fn large_write_splits_above_cap() {
    let (_mux, mut conns, mut peer) = pair();
    let data: Vec<u8> = (0..MAX_FRAME_PAYLOAD + 100).map(|i| i as u8).collect();
    let c1 = &mut conns[0];
    let n = c1.write(&data).await.unwrap();
    assert_eq!(n, data.len(), "whole buffer accepted in one poll_write");
    let (id, a) = read_frame(&mut peer).await;
    let (id2, b) = read_frame(&mut peer).await;
    assert_eq!((id, id2), (1, 1));
    assert_eq!(a.len(), MAX_FRAME_PAYLOAD);
    assert_eq!(b.len(), 100);
    assert_eq!([a, b].concat(), data);
    // Exactly at the cap: one frame.
    c1.write_all(&vec![7u8; MAX_FRAME_PAYLOAD]).await.unwrap();
    assert_eq!(read_frame(&mut peer).await.1.len(), MAX_FRAME_PAYLOAD);
}

#[tokio::test]
async fn reads_route_by_conn_with_partial_reads() {
    let (_mux, mut conns, mut peer) = pair();
    let mut wire = Vec::new();
    wire.extend_from_slice(&encode_header(2, 6));
    wire.extend_from_slice(b"second");
    wire.extend_from_slice(&encode_header(0, 3)); // reserved: dropped
    wire.extend_from_slice(b"zzz");
    wire.extend_from_slice(&encode_header(9, 4)); // unknown: dropped
    wire.extend_from_slice(b"nope");
    wire.extend_from_slice(&encode_header(1, 5));
    wire.extend_from_slice(b"first");
    wire.extend_from_slice(&encode_header(1, 0)); // empty: ignored
    wire.extend_from_slice(&encode_header(1, 4));
    wire.extend_from_slice(b"more");
    peer.write_all(&wire).await.unwrap();
    let mut buf = [0u8; 3];
    conns[0].read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"fir");
    let mut rest = [0u8; 6];
    conns[0].read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest, b"stmore");
    let mut s = [0u8; 6];
    conns[1].read_exact(&mut s).await.unwrap();
    assert_eq!(&s, b"second");
}

#[tokio::test]
async fn eof_ends_every_conn() {
    let (mux, mut conns, peer) = pair();
    drop(peer);
    for c in conns.iter_mut() {
        let mut v = Vec::new();
        let n = tokio::time::timeout(GUARD, c.read_to_end(&mut v))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0);
    }
    assert_eq!(
        tokio::time::timeout(GUARD, mux.closed()).await.unwrap(),
        TrunkState::Eof
    );
    assert!(conns[0].write_all(b"late").await.is_err());
}

#[tokio::test]
async fn oversize_declared_length_is_protocol_error() {
    let (mux, mut conns, mut peer) = pair();
    // Declares 4 GiB - 1; must fail without allocating.
    peer.write_all(&encode_header(1, u32::MAX)).await.unwrap();
    let mut v = Vec::new();
    let err = tokio::time::timeout(GUARD, conns[0].read_to_end(&mut v))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("4294967295"), "{err}");
    assert!(matches!(mux.state(), TrunkState::Failed(..)));
    // One over the cap is rejected too.
    let (_m2, mut c2, mut p2) = pair();
    p2.write_all(&encode_header(2, MAX_FRAME_PAYLOAD as u32 + 1))
        .await
        .unwrap();
    let mut v = Vec::new();
    assert!(c2[1].read_to_end(&mut v).await.is_err());
}

#[tokio::test]
async fn truncated_frame_is_error_for_conns() {
    let (_mux, mut conns, mut peer) = pair();
    peer.write_all(&encode_header(1, 10)).await.unwrap();
    peer.write_all(b"abc").await.unwrap();
    drop(peer);
    let mut v = Vec::new();
    let err = conns[0].read_to_end(&mut v).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
}

#[tokio::test]
async fn mux_to_mux_round_trip() {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (_ma, mut ca) = Mux::new(a, &[1, 2]).unwrap();
    let (_mb, mut cb) = Mux::new(b, &[1, 2]).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let big2 = big.clone();
    let mut w = ca.remove(0);
    let writer = tokio::spawn(async move {
        for chunk in big2.chunks(4096) {
            w.write_all(chunk).await.unwrap();
        }
        w
    });
    let mut got = vec![0u8; big.len()];
    cb[0].read_exact(&mut got).await.unwrap();
    assert_eq!(got, big);
    writer.await.unwrap();
    ca[0].write_all(b"ping").await.unwrap();
    let mut p = [0u8; 4];
    cb[1].read_exact(&mut p).await.unwrap();
    assert_eq!(&p, b"ping");
}

#[tokio::test]
async fn open_rules() {
    let (mux, _conns, _peer) = pair();
    assert!(mux.open(0).is_err());
    assert!(mux.open(1).is_err());
    assert!(mux.open(3).is_ok());
}

/// ttrpc-rust over our mux must produce frame shapes Go's 4096-byte `bufio.Reader` can read
/// (see the module comment of `proto/src/mux.rs`):
/// a large message starts with a frame of at most 4096 bytes.
#[tokio::test]
async fn ttrpc_messages_have_go_safe_frame_shapes() {
    use topolet_nri::api;
    use topolet_nri::api_ttrpc::RuntimeClient;
    use topolet_nri::ttrpc::r#async::{transport::Socket, Client};

    let (_mux, mut conns, mut peer) = pair();
    let c2 = conns.remove(1);
    let client = RuntimeClient::new(Client::new(Socket::new(c2)));
    let req = api::UpdateContainersRequest {
        update: (0..2000)
            .map(|i| api::ContainerUpdate {
                container_id: format!("container-{i:08}-padding-padding"),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let call = tokio::spawn(async move {
        let ctx = topolet_nri::ttrpc::context::with_duration(Duration::from_secs(30));
        let _ = client.update_containers(ctx, &req).await;
    });
    let (id, first) = tokio::time::timeout(GUARD, read_frame(&mut peer))
        .await
        .unwrap();
    assert_eq!(id, 2);
    assert!(first.len() <= 4096, "first frame {} bytes", first.len());
    let msg_len = u32::from_be_bytes(first[..4].try_into().unwrap()) as usize;
    assert!(msg_len > 4096, "test message must be large");
    let mut got = first.len() - 10;
    while got < msg_len {
        let (id, f) = tokio::time::timeout(GUARD, read_frame(&mut peer))
            .await
            .unwrap();
        assert_eq!(id, 2);
        got += f.len();
    }
    assert_eq!(got, msg_len);
    call.abort();
}
