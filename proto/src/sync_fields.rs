//! Synchronize without the container fields a plugin never reads.
//!
//! A node's Synchronize carries every container whole: on a 10,000-container node about 25 MB,
//! a third of it mounts, env and args, each one a heap string once decoded, and freed again
//! later. A plugin that names the fields it does without ([`crate::Plugin::synchronize_skips`])
//! gets its Synchronize decoded without them: the request's bytes are copied once with those
//! fields of every container left out, then decoded as usual. Everything else (the pods, every
//! other container field, fields this schema does not know) arrives as the runtime sent it.
//! Other requests are decoded whole.
//!
//! Input the walk cannot follow (a truncated field, a group, a bad tag) is handed to the
//! ordinary decoder unchanged, so a malformed request fails with the decoder's own error; what
//! the decoder still takes is delivered without the skipped fields all the same. What
//! the walk does not check is the inside of a skipped field: a request whose only fault lies
//! in a container's mounts, env or args is accepted, as the plugin would never read it.

use std::ops::BitOr;

use async_trait::async_trait;
use protobuf::Message;
use ttrpc::r#async::{MethodHandler, TtrpcContext};

use crate::api;

/// A set of `Container` fields (by their field number in the NRI schema) that a plugin does
/// without in Synchronize. Only repeated and message fields can be left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContainerFields(u32);

impl ContainerFields {
    /// Nothing is left out (the default).
    pub const NONE: ContainerFields = ContainerFields(0);
    /// `args` (field 7).
    pub const ARGS: ContainerFields = ContainerFields(1 << 7);
    /// `env` (field 8).
    pub const ENV: ContainerFields = ContainerFields(1 << 8);
    /// `mounts` (field 9).
    pub const MOUNTS: ContainerFields = ContainerFields(1 << 9);
    /// `hooks` (field 10).
    pub const HOOKS: ContainerFields = ContainerFields(1 << 10);
    /// `rlimits` (field 13).
    pub const RLIMITS: ContainerFields = ContainerFields(1 << 13);
    /// `CDI_devices` (field 20).
    pub const CDI_DEVICES: ContainerFields = ContainerFields(1 << 20);

    /// Both sets.
    pub const fn union(self, other: ContainerFields) -> ContainerFields {
        ContainerFields(self.0 | other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every field of `other` is in the set.
    pub fn contains(self, other: ContainerFields) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether field number `field` is in the set.
    fn has(self, field: u64) -> bool {
        field < 32 && self.0 & (1 << field) != 0
    }

    /// `container` with the fields of this set cleared: what [`decode_synchronize`] delivers
    /// for it.
    pub fn clear(self, container: &mut api::Container) {
        if self.contains(Self::ARGS) {
            container.args.clear();
        }
        if self.contains(Self::ENV) {
            container.env.clear();
        }
        if self.contains(Self::MOUNTS) {
            container.mounts.clear();
        }
        if self.contains(Self::HOOKS) {
            container.hooks.clear();
        }
        if self.contains(Self::RLIMITS) {
            container.rlimits.clear();
        }
        if self.contains(Self::CDI_DEVICES) {
            container.CDI_devices.clear();
        }
    }
}

impl BitOr for ContainerFields {
    type Output = ContainerFields;
    fn bitor(self, other: ContainerFields) -> ContainerFields {
        self.union(other)
    }
}

/// `SynchronizeRequest.containers`.
const SYNC_CONTAINERS: u64 = 2;
/// Protobuf wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// Decodes a `SynchronizeRequest`, leaving `skip` out of every container.
pub fn decode_synchronize(
    bytes: &[u8],
    skip: ContainerFields,
) -> protobuf::Result<api::SynchronizeRequest> {
    if skip.is_empty() {
        return api::SynchronizeRequest::parse_from_bytes(bytes);
    }
    match strip(bytes, skip) {
        Some(slim) => api::SynchronizeRequest::parse_from_bytes(&slim),
        // The decoder names the fault, or takes what the walk would not (rust-protobuf accepts
        // a last field whose length runs past the end): either way, without the skips.
        None => {
            let mut req = api::SynchronizeRequest::parse_from_bytes(bytes)?;
            for c in &mut req.containers {
                skip.clear(c);
            }
            Ok(req)
        }
    }
}

/// The request's bytes without `skip` in any container; None where the walk cannot follow.
fn strip(bytes: &[u8], skip: ContainerFields) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut r = Reader { buf: bytes, pos: 0 };
    while !r.done() {
        let start = r.pos;
        let tag = r.varint()?;
        if tag >> 3 == SYNC_CONTAINERS && tag & 7 == LEN {
            let body = r.len_delimited()?;
            let mut kept = 0;
            for_each_kept(body, skip, |field| kept += field.len())?;
            write_varint(&mut out, tag);
            write_varint(&mut out, kept as u64);
            for_each_kept(body, skip, |field| out.extend_from_slice(field))?;
        } else {
            r.skip(tag)?;
            out.extend_from_slice(&bytes[start..r.pos]);
        }
    }
    Some(out)
}

/// Calls `f` with each of a container's fields (tag and value) that is not in `skip`, in
/// order; None where the walk cannot follow.
fn for_each_kept(body: &[u8], skip: ContainerFields, mut f: impl FnMut(&[u8])) -> Option<()> {
    let mut r = Reader { buf: body, pos: 0 };
    while !r.done() {
        let start = r.pos;
        let tag = r.varint()?;
        r.skip(tag)?;
        if !skipped(tag, skip) {
            f(&body[start..r.pos]);
        }
    }
    Some(())
}

/// A field of `skip`, length-delimited as the schema has it (one with another wire type is
/// kept: the decoder keeps it as an unknown field, and so must this).
fn skipped(tag: u64, skip: ContainerFields) -> bool {
    tag & 7 == LEN && skip.has(tag >> 3)
}

fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A cursor over protobuf wire bytes; every read is bounds-checked (None past the end).
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    fn advance(&mut self, n: usize) -> Option<()> {
        let end = self.pos.checked_add(n)?;
        if end > self.buf.len() {
            return None;
        }
        self.pos = end;
        Some(())
    }

    fn len_delimited(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint()?).ok()?;
        let start = self.pos;
        self.advance(len)?;
        Some(&self.buf[start..self.pos])
    }

    /// Skips the value of a field with `tag`; None for field number 0 and for groups.
    fn skip(&mut self, tag: u64) -> Option<()> {
        if tag >> 3 == 0 || tag >> 3 > u64::from(u32::MAX >> 3) {
            return None;
        }
        match tag & 7 {
            VARINT => self.varint().map(drop),
            FIXED64 => self.advance(8),
            LEN => self.len_delimited().map(drop),
            FIXED32 => self.advance(4),
            _ => None,
        }
    }
}

/// The stub's Synchronize method: [`decode_synchronize`] with the plugin's skips, then the
/// generated service's handler, its reply encoded as the generated method does.
pub(crate) struct SlimSynchronize {
    pub service: std::sync::Arc<dyn crate::api_ttrpc::Plugin + Send + Sync>,
    pub skip: ContainerFields,
}

#[async_trait]
impl MethodHandler for SlimSynchronize {
    // As ttrpc's `async_request_handler!` does for every generated method, but for the decode.
    async fn handler(
        &self,
        ctx: TtrpcContext,
        req: ttrpc::Request,
    ) -> ttrpc::Result<ttrpc::Response> {
        use ttrpc::proto::{Codec, ResponseInit};
        let request = decode_synchronize(&req.payload, self.skip)
            .map_err(ttrpc::err_to_others!(e, "Unpack request error "))?;
        let res = match self.service.synchronize(&ctx, request).await {
            Ok(reply) => {
                let payload = Codec::encode(&reply)
                    .map_err(ttrpc::err_to_others!(e, "Encoding response "))?;
                let mut res =
                    ttrpc::Response::init_status(ttrpc::get_status(ttrpc::Code::OK, String::new()));
                res.set_payload(payload);
                res
            }
            Err(ttrpc::Error::RpcStatus(s)) => ttrpc::Response::init_status(s),
            Err(e) => ttrpc::Response::init_status(ttrpc::get_status(
                ttrpc::Code::UNKNOWN,
                format!("{e:?}"),
            )),
        };
        Ok(res)
    }
}

#[cfg(test)]
mod tests;
