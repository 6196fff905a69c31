//! Property tests: arbitrary bytes into the mux decoder and into every NRI request
//! message give errors or values, never a panic or an unbounded allocation.

use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use topolet_nri::api;
use topolet_nri::mux::{decode_header, Mux, HEADER_LEN, MAX_FRAME_PAYLOAD};
use topolet_nri::protobuf::Message;

fn decode_all(bytes: &[u8]) {
    fn one<M: Message>(b: &[u8]) {
        let _ = M::parse_from_bytes(b);
    }
    one::<api::RegisterPluginRequest>(bytes);
    one::<api::UpdateContainersRequest>(bytes);
    one::<api::ConfigureRequest>(bytes);
    one::<api::SynchronizeRequest>(bytes);
    one::<api::RunPodSandboxRequest>(bytes);
    one::<api::UpdatePodSandboxRequest>(bytes);
    one::<api::PostUpdatePodSandboxRequest>(bytes);
    one::<api::StopPodSandboxRequest>(bytes);
    one::<api::RemovePodSandboxRequest>(bytes);
    one::<api::CreateContainerRequest>(bytes);
    one::<api::PostCreateContainerRequest>(bytes);
    one::<api::StartContainerRequest>(bytes);
    one::<api::PostStartContainerRequest>(bytes);
    one::<api::UpdateContainerRequest>(bytes);
    one::<api::PostUpdateContainerRequest>(bytes);
    one::<api::StopContainerRequest>(bytes);
    one::<api::RemoveContainerRequest>(bytes);
    one::<api::StateChangeEvent>(bytes);
    one::<api::ValidateContainerAdjustmentRequest>(bytes);
    one::<api::Empty>(bytes);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn header_decode_total(h in any::<[u8; HEADER_LEN]>()) {
        match decode_header(&h) {
            Ok((_, len)) => prop_assert!(len <= MAX_FRAME_PAYLOAD),
            Err(_) => prop_assert!(u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize > MAX_FRAME_PAYLOAD),
        }
    }

    #[test]
    fn request_messages_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn request_messages_with_length_prefixes(
        field in 1u32..40,
        len in any::<u32>(),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        // A length-delimited field declaring a huge length must not allocate it.
        let mut b = Vec::new();
        let mut key = (field << 3) | 2;
        while key >= 0x80 { b.push((key as u8) | 0x80); key >>= 7; }
        b.push(key as u8);
        let mut l = len;
        while l >= 0x80 { b.push((l as u8) | 0x80); l >>= 7; }
        b.push(l as u8);
        b.extend_from_slice(&tail);
        decode_all(&b);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn mux_decoder_survives_arbitrary_streams(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let (a, mut b) = tokio::io::duplex(8192);
            let (mux, mut conns) = Mux::new(a, &[1, 2]).unwrap();
            b.write_all(&bytes).await.unwrap();
            drop(b);
            // Every conn ends (EOF or error) and yields at most the bytes sent.
            for c in conns.iter_mut() {
                let mut v = Vec::new();
                let r = tokio::time::timeout(std::time::Duration::from_secs(20), c.read_to_end(&mut v))
                    .await
                    .expect("conn must end after trunk eof");
                let _ = r;
                assert!(v.len() <= bytes.len());
            }
            assert_ne!(mux.state(), topolet_nri::mux::TrunkState::Open);
        });
    }
}
