//! The cgroupfs path rules every reader and writer of cgroups shares: where a pod's cgroup is
//! under a controller's mount ([`cgroup_path`]: cgroupfs paths as they are, systemd slice names
//! expanded, nothing that climbs out of the hierarchy), and the octal escapes of
//! `/proc/<pid>/mountinfo` fields ([`unescape_mountinfo`]).

use std::path::PathBuf;

/// A cgroup parent as a path relative to a controller's mount point. The cgroupfs driver's
/// parents (`/kubepods/burstable/pod1`) are paths already; the systemd driver's slice names
/// (`kubepods-burstable-pod1.slice`) are expanded into their parents
/// (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice`), as systemd lays
/// slices out (`systemd.slice(5)`; the kubelet's `cgroup_manager_linux.go` `ExpandSlice`).
/// `None` for a parent that names no cgroup: empty, a `..` component, or a slice name with an
/// empty part (`a--b.slice`, `-a.slice`).
pub fn cgroup_path(cgroup_parent: &str) -> Option<PathBuf> {
    let parent = cgroup_parent.trim().trim_start_matches('/');
    if parent.is_empty() || parent.split('/').any(|c| c == "..") {
        return None;
    }
    if !parent.contains('/') {
        if let Some(name) = parent.strip_suffix(".slice") {
            let mut path = PathBuf::new();
            let mut prefix = String::new();
            for part in name.split('-') {
                if part.is_empty() {
                    return None;
                }
                if !prefix.is_empty() {
                    prefix.push('-');
                }
                prefix.push_str(part);
                path.push(format!("{prefix}.slice"));
            }
            return Some(path);
        }
    }
    Some(PathBuf::from(parent))
}

/// A mountinfo field with its escapes undone: the kernel writes space, tab, newline and
/// backslash as a backslash and three octal digits (`fs/proc_namespace.c`, `mangle`). A
/// backslash not followed by three octal digits of a byte's value (≤ `\377`) is kept as it is.
pub fn unescape_mountinfo(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let digits = &b[i + 1..i + 4];
            if digits.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let value = digits.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn both_drivers_parents() {
        let p = |s: &str| cgroup_path(s).map(|p| p.to_string_lossy().into_owned());
        assert_eq!(
            p("/kubepods/burstable/podabc").as_deref(),
            Some("kubepods/burstable/podabc")
        );
        assert_eq!(
            p("/kind-root/kubepods/podabc").as_deref(),
            Some("kind-root/kubepods/podabc")
        );
        assert_eq!(
            p("kubepods-besteffort-podx.slice").as_deref(),
            Some("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx.slice")
        );
        assert_eq!(
            p("kubepods-pod12.slice").as_deref(),
            Some("kubepods.slice/kubepods-pod12.slice")
        );
        for bad in [
            "",
            "  ",
            "/",
            "/kubepods/../etc",
            "..",
            "a--b.slice",
            "-a.slice",
            "a-.slice",
        ] {
            assert_eq!(p(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(r"/var/lib/a\040b"), "/var/lib/a b");
        assert_eq!(unescape_mountinfo(r"tab\011nl\012bs\134"), "tab\tnl\nbs\\");
        // Not an escape: kept as written (no overflow on \400, no sign on \+12).
        assert_eq!(unescape_mountinfo(r"\400"), r"\400");
        assert_eq!(unescape_mountinfo(r"\+12x"), r"\+12x");
        assert_eq!(unescape_mountinfo(r"end\04"), r"end\04");
        assert_eq!(unescape_mountinfo(r"\377"), "\u{FFFD}");
    }

    proptest! {
        /// Any text: no panic; a path never climbs out and never is absolute.
        #[test]
        fn any_parent(s in "\\PC{0,40}") {
            if let Some(p) = cgroup_path(&s) {
                prop_assert!(p.is_relative());
                prop_assert!(!p.components().any(|c| c == std::path::Component::ParentDir));
            }
            let _ = unescape_mountinfo(&s);
        }

        /// What the kernel escapes comes back.
        #[test]
        fn escape_round_trip(s in "[ a-z\t\n\\\\/]{0,30}") {
            let mut escaped = String::new();
            for c in s.chars() {
                match c {
                    ' ' | '\t' | '\n' | '\\' => escaped.push_str(&format!("\\{:03o}", c as u32)),
                    c => escaped.push(c),
                }
            }
            prop_assert_eq!(unescape_mountinfo(&escaped), s);
        }
    }
}
