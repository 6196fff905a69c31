use proptest::prelude::*;
use protobuf::{Message, MessageField};

use super::*;

const TOPOLETS: ContainerFields = ContainerFields::ARGS
    .union(ContainerFields::ENV)
    .union(ContainerFields::MOUNTS)
    .union(ContainerFields::HOOKS);

fn container(i: usize, mounts: usize, env: usize) -> api::Container {
    let mut c = api::Container {
        id: format!("{i:064x}"),
        pod_sandbox_id: format!("pod-{}", i / 2),
        name: format!("c{i}"),
        pid: 4000 + i as u32,
        args: vec!["/bin/app".into(), format!("--n={i}")],
        env: (0..env).map(|e| format!("V{e}={i}")).collect(),
        mounts: (0..mounts)
            .map(|m| api::Mount {
                destination: format!("/m{m}"),
                source: format!("/var/lib/kubelet/pods/{i}/m{m}"),
                type_: "bind".into(),
                options: vec!["rbind".into(), "rw".into()],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    c.labels
        .insert("io.kubernetes.pod.uid".into(), format!("uid-{i}"));
    c.annotations.insert("a".into(), "b".into());
    c.state = api::ContainerState::CONTAINER_RUNNING.into();
    let mut hooks = api::Hooks::new();
    hooks.prestart.push(api::Hook {
        path: "/hook".into(),
        ..Default::default()
    });
    c.hooks = MessageField::some(hooks);
    let mut cpu = api::LinuxCPU::new();
    cpu.shares = MessageField::some(api::OptionalUInt64 {
        value: 1024,
        ..Default::default()
    });
    cpu.cpus = "0-3".into();
    let mut res = api::LinuxResources::new();
    res.cpu = MessageField::some(cpu);
    let mut linux = api::LinuxContainer::new();
    linux.resources = MessageField::some(res);
    linux.cgroups_path = format!("/kubepods/pod{i}/{i:064x}");
    c.linux = MessageField::some(linux);
    c.rlimits.push(api::POSIXRlimit {
        type_: "RLIMIT_NOFILE".into(),
        hard: 1024,
        soft: 1024,
        ..Default::default()
    });
    c
}

fn request(n: usize, mounts: usize, env: usize, more: bool) -> api::SynchronizeRequest {
    let pods = (0..n.div_ceil(2))
        .map(|p| api::PodSandbox {
            id: format!("pod-{p}"),
            uid: format!("uid-{p}"),
            ..Default::default()
        })
        .collect();
    api::SynchronizeRequest {
        pods,
        containers: (0..n).map(|i| container(i, mounts, env)).collect(),
        more,
        ..Default::default()
    }
}

/// What the slim decode must deliver: the full decode with `skip` cleared.
fn expected(full: &api::SynchronizeRequest, skip: ContainerFields) -> api::SynchronizeRequest {
    let mut want = full.clone();
    for c in &mut want.containers {
        skip.clear(c);
    }
    want
}

#[test]
fn the_skipped_fields_are_left_out_and_everything_else_arrives() {
    let req = request(6, 4, 5, true);
    let bytes = req.write_to_bytes().unwrap();
    let got = decode_synchronize(&bytes, TOPOLETS).unwrap();
    assert_eq!(got, expected(&req, TOPOLETS));
    let c = &got.containers[3];
    assert!(c.mounts.is_empty() && c.env.is_empty() && c.args.is_empty() && c.hooks.is_none());
    assert_eq!(c.rlimits.len(), 1, "rlimits were not asked to be skipped");
    assert_eq!(c.linux.cgroups_path, req.containers[3].linux.cgroups_path);
    assert_eq!(got.pods, req.pods);
    assert!(got.more);
}

#[test]
fn nothing_skipped_is_the_ordinary_decode() {
    let req = request(3, 2, 2, false);
    let bytes = req.write_to_bytes().unwrap();
    assert_eq!(
        decode_synchronize(&bytes, ContainerFields::NONE).unwrap(),
        req
    );
}

#[test]
fn fields_this_schema_does_not_know_are_kept() {
    let mut req = request(2, 1, 1, false);
    req.containers[0]
        .mut_unknown_fields()
        .add_length_delimited(99, b"from a newer runtime".to_vec());
    req.mut_unknown_fields().add_varint(77, 5);
    let bytes = req.write_to_bytes().unwrap();
    let got = decode_synchronize(&bytes, TOPOLETS).unwrap();
    assert!(
        got.containers[0].unknown_fields().get(99).is_some(),
        "a container's unknown field"
    );
    assert!(
        got.unknown_fields().get(77).is_some(),
        "the request's unknown field"
    );
}

#[test]
fn a_truncated_request_fails_as_the_ordinary_decoder_fails() {
    let bytes = request(4, 2, 2, false).write_to_bytes().unwrap();
    for cut in [1, 7, bytes.len() / 2, bytes.len() - 1] {
        let slim = decode_synchronize(&bytes[..cut], TOPOLETS);
        let full = api::SynchronizeRequest::parse_from_bytes(&bytes[..cut]);
        assert_eq!(
            slim.map_err(|e| e.to_string()),
            full.map_err(|e| e.to_string()),
            "cut at {cut}"
        );
    }
}

#[test]
fn a_request_the_walk_cannot_follow_but_the_decoder_takes_still_comes_without_the_skips() {
    // The last container's length made to run past the end of the request: rust-protobuf still
    // takes it (the container swallows the `more` field), the walk does not follow it.
    let mut bytes = request(4, 0, 0, true).write_to_bytes().unwrap();
    let last = bytes.len() - 3 - 1; // tag 0x12, length `8e 02`, then 270 bytes and `18 01`
    let at = (0..bytes.len())
        .rev()
        .find(|&i| i < last && bytes[i] == 0x12 && bytes[i + 1] == 0x8e && bytes[i + 2] == 0x02)
        .expect("the last container's tag and length");
    bytes[at + 2] = 0x03;
    assert!(
        strip(&bytes, TOPOLETS).is_none(),
        "the walk cannot follow it"
    );
    let full = api::SynchronizeRequest::parse_from_bytes(&bytes).expect("the decoder takes it");
    assert_eq!(
        decode_synchronize(&bytes, TOPOLETS).unwrap(),
        expected(&full, TOPOLETS)
    );
}

#[test]
fn a_skippable_field_with_another_wire_type_is_kept_as_the_decoder_keeps_it() {
    // A container whose field 9 (mounts) is a varint: not the schema's. The decoder keeps it
    // as an unknown field; so does the slim decode, which leaves out only what the schema says.
    let mut body = Vec::new();
    write_varint(&mut body, (9 << 3) | VARINT);
    write_varint(&mut body, 1);
    let mut bytes = Vec::new();
    write_varint(&mut bytes, (SYNC_CONTAINERS << 3) | LEN);
    write_varint(&mut bytes, body.len() as u64);
    bytes.extend_from_slice(&body);
    let full = api::SynchronizeRequest::parse_from_bytes(&bytes).unwrap();
    assert!(full.containers[0].unknown_fields().get(9).is_some());
    assert_eq!(decode_synchronize(&bytes, TOPOLETS).unwrap(), full);
}

proptest! {
    /// Any bytes the ordinary decoder accepts, the slim decode accepts too and delivers the
    /// same request with the skipped fields cleared.
    #[test]
    fn the_slim_decode_is_the_full_decode_minus_the_skipped_fields(
        n in 0usize..6,
        mounts in 0usize..4,
        env in 0usize..4,
        more in any::<bool>(),
        skip_bits in any::<u8>(),
        flip in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let all = [
            ContainerFields::ARGS,
            ContainerFields::ENV,
            ContainerFields::MOUNTS,
            ContainerFields::HOOKS,
            ContainerFields::RLIMITS,
            ContainerFields::CDI_DEVICES,
        ];
        let skip = all
            .iter()
            .enumerate()
            .filter(|(i, _)| skip_bits & (1 << i) != 0)
            .fold(ContainerFields::NONE, |acc, (_, f)| acc | *f);
        let mut bytes = request(n, mounts, env, more).write_to_bytes().unwrap();
        // Random corruption: whatever the full decoder still accepts must agree.
        for (at, b) in &flip {
            if !bytes.is_empty() {
                let i = at.index(bytes.len());
                bytes[i] = *b;
            }
        }
        if let Ok(full) = api::SynchronizeRequest::parse_from_bytes(&bytes) {
            let slim = decode_synchronize(&bytes, skip);
            prop_assert_eq!(slim.ok(), Some(expected(&full, skip)));
        }
    }
}
