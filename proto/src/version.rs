//! The runtime's NRI version: parsing, and inference from runtime name/version
//! for runtimes older than NRI v0.12 (which do not send `NRI_version`).

use std::fmt;

use crate::api::ConfigureRequest;

/// An NRI module version (`vMAJOR.MINOR.PATCH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NriVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl NriVersion {
    /// Builds a version.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// First version with UpdatePodSandbox, PostUpdatePodSandbox and validation events.
    pub const V0_10: NriVersion = NriVersion::new(0, 10, 0);
    /// First version whose container adjustment carries a scheduling policy (`scheduler`),
    /// sysctls and network devices.
    pub const V0_11: NriVersion = NriVersion::new(0, 11, 0);
    /// First version with dedicated RPCs per event and `NRI_version` in the handshake.
    pub const V0_12: NriVersion = NriVersion::new(0, 12, 0);

    /// Parses `v0.12.1`, `0.12`, `0.12.1-rc.1+meta` (pre-release/build suffixes ignored).
    pub fn parse(s: &str) -> Option<NriVersion> {
        let s = s.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let core = s.split(['-', '+', ' ']).next()?;
        let mut it = core.split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        let patch = match it.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        Some(NriVersion::new(major, minor, patch))
    }

    /// The runtime's NRI version from a ConfigureRequest: `NRI_version` when set,
    /// else inferred from `runtime_name`/`runtime_version` (NRI v0.12 added the field; older
    /// containerd sends only its name and build version, as containerd/nri's stub expects).
    pub fn from_configure(req: &ConfigureRequest) -> Option<NriVersion> {
        NriVersion::parse(&req.NRI_version)
            .or_else(|| infer_from_runtime(&req.runtime_name, &req.runtime_version))
    }
}

impl fmt::Display for NriVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Maps a runtime release to the NRI module it vendors. Only containerd is known;
/// other runtimes give `None` (callers then assume the oldest wire behaviour).
pub fn infer_from_runtime(runtime_name: &str, runtime_version: &str) -> Option<NriVersion> {
    if runtime_name != "containerd" {
        return None;
    }
    let v = NriVersion::parse(runtime_version)?;
    let nri = match (v.major, v.minor, v.patch) {
        (1, 7, p) if p <= 6 => NriVersion::new(0, 3, 0),
        (1, 7, p) if p <= 13 => NriVersion::new(0, 4, 0),
        (1, 7, p) if p <= 25 => NriVersion::new(0, 6, 0),
        (1, 7, _) => NriVersion::new(0, 8, 0),
        (1, _, _) => return None,
        (2, 0 | 1, _) => NriVersion::new(0, 8, 0),
        (2, 2, 0) => NriVersion::new(0, 10, 0),
        (2, 2, _) => NriVersion::new(0, 11, 0),
        (2, 3, _) => NriVersion::new(0, 12, 0),
        _ => NriVersion::new(0, 12, 1),
    };
    Some(nri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(
            NriVersion::parse("v0.12.1"),
            Some(NriVersion::new(0, 12, 1))
        );
        assert_eq!(NriVersion::parse("0.8"), Some(NriVersion::new(0, 8, 0)));
        assert_eq!(
            NriVersion::parse("2.1.4+unknown"),
            Some(NriVersion::new(2, 1, 4))
        );
        assert_eq!(NriVersion::parse(""), None);
        assert_eq!(NriVersion::parse("vx.1"), None);
    }

    #[test]
    fn infers_containerd() {
        let f = |v| infer_from_runtime("containerd", v);
        assert_eq!(f("v1.7.3"), Some(NriVersion::new(0, 3, 0)));
        assert_eq!(f("v1.7.30"), Some(NriVersion::new(0, 8, 0)));
        assert_eq!(f("v2.1.4"), Some(NriVersion::new(0, 8, 0)));
        assert_eq!(f("2.2.0"), Some(NriVersion::new(0, 10, 0)));
        assert_eq!(f("v2.2.3"), Some(NriVersion::new(0, 11, 0)));
        assert_eq!(f("v2.3.0"), Some(NriVersion::new(0, 12, 0)));
        assert_eq!(infer_from_runtime("cri-o", "1.30.0"), None);
    }
}
