//! The runtime's NRI version: parsing, and inference from runtime name/version
//! for runtimes older than NRI v0.12 (which do not send `NRI_version`): containerd and CRI-O.

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

    /// The NRI CRI-O 1.33 vendors: the pseudo-version `v0.9.1-0.20250219…` (cri-o/cri-o `go.mod`
    /// at v1.33.x), a commit between v0.9.0 and v0.10.0 that already has UpdatePodSandbox and
    /// PostUpdatePodSandbox but not the validation event (its `Event.LAST` is 14, not 15).
    /// [`NriVersion::parse`] reads the pseudo-version as this, its suffix dropped.
    pub const V0_9_1_PSEUDO: NriVersion = NriVersion::new(0, 9, 1);
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

/// Maps a runtime release to the NRI module it vendors: containerd (`containerd`) and CRI-O
/// (`cri-o`, its build version without a `v`). Unknown runtimes and releases give `None` (callers
/// then assume the oldest wire behaviour).
pub fn infer_from_runtime(runtime_name: &str, runtime_version: &str) -> Option<NriVersion> {
    match runtime_name {
        "containerd" => infer_containerd(runtime_version),
        "cri-o" => infer_crio(runtime_version),
        _ => None,
    }
}

fn infer_containerd(runtime_version: &str) -> Option<NriVersion> {
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

/// CRI-O's lines from 1.30, when NRI became on by default (cri-o/cri-o `go.mod` at each tag).
/// From 1.37 (NRI v0.12) the handshake carries `NRI_version`, which [`NriVersion::from_configure`]
/// reads first; a newer CRI-O without it is taken as v0.12.0. Before 1.30, and any other major
/// version: `None`.
fn infer_crio(runtime_version: &str) -> Option<NriVersion> {
    let v = NriVersion::parse(runtime_version)?;
    let nri = match (v.major, v.minor) {
        (1, 30) => NriVersion::new(0, 6, 0),
        (1, 31) => NriVersion::new(0, 6, 1),
        (1, 32) => NriVersion::new(0, 9, 0),
        (1, 33) => NriVersion::V0_9_1_PSEUDO,
        (1, 34) => NriVersion::V0_10,
        (1, 35 | 36) => NriVersion::V0_11,
        (1, m) if m >= 37 => NriVersion::V0_12,
        _ => return None,
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
        assert_eq!(infer_from_runtime("containerd", "1.36.3"), None);
    }

    #[test]
    fn infers_crio_lines() {
        let f = |v| infer_from_runtime("cri-o", v);
        assert_eq!(f("1.30.0"), Some(NriVersion::new(0, 6, 0)));
        assert_eq!(f("1.30.14"), Some(NriVersion::new(0, 6, 0)));
        assert_eq!(f("1.31.5"), Some(NriVersion::new(0, 6, 1)));
        assert_eq!(f("1.32.0"), Some(NriVersion::new(0, 9, 0)));
        assert_eq!(f("1.33.2"), Some(NriVersion::V0_9_1_PSEUDO));
        assert_eq!(f("1.34.1"), Some(NriVersion::new(0, 10, 0)));
        assert_eq!(f("1.35.0"), Some(NriVersion::new(0, 11, 0)));
        assert_eq!(f("1.36.3"), Some(NriVersion::new(0, 11, 0)));
        assert_eq!(f("1.37.0"), Some(NriVersion::new(0, 12, 0)));
        // a `v` or a build suffix does not change the line
        assert_eq!(f("v1.36.3"), Some(NriVersion::new(0, 11, 0)));
        assert_eq!(f("1.34.0-dev+abc"), Some(NriVersion::new(0, 10, 0)));
    }

    #[test]
    fn unknown_crio_versions_give_none() {
        let f = |v| infer_from_runtime("cri-o", v);
        // NRI off by default before 1.30; those lines are not inferred
        assert_eq!(f("1.29.9"), None);
        assert_eq!(f("1.0.0"), None);
        assert_eq!(f("2.0.0"), None);
        assert_eq!(f("0.36.3"), None);
        assert_eq!(f(""), None);
        assert_eq!(f("unknown"), None);
        // the name must be exact
        assert_eq!(infer_from_runtime("crio", "1.36.3"), None);
        assert_eq!(infer_from_runtime("CRI-O", "1.36.3"), None);
    }

    #[test]
    fn nri_version_field_wins_over_crio_inference() {
        let mut req = ConfigureRequest::new();
        req.runtime_name = "cri-o".into();
        req.runtime_version = "1.36.3".into();
        assert_eq!(
            NriVersion::from_configure(&req),
            Some(NriVersion::new(0, 11, 0))
        );
        req.runtime_version = "1.37.1".into();
        req.NRI_version = "v0.12.2".into();
        assert_eq!(
            NriVersion::from_configure(&req),
            Some(NriVersion::new(0, 12, 2))
        );
    }

    #[test]
    fn crio_133_pseudo_version_parses_as_its_constant() {
        assert_eq!(
            NriVersion::parse("v0.9.1-0.20250219135117-9d5a2b6f5c3e"),
            Some(NriVersion::V0_9_1_PSEUDO)
        );
    }
}
