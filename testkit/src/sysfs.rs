//! sysfs machine trees for tests: [`fixture`] by name, [`names`] of every machine.
//!
//! Synthetic machines (`2s-24c-ht`, `8s-4096`, …) are written by `hack/gen-sysfs-fixtures.py`
//! into this crate's `OUT_DIR` when it is built (see `build.rs`); nothing generated is
//! committed. Captured machines (copies of a real host's `/sys`, made with
//! `hack/capture-sysfs.sh`) are committed under `plugin/tests/fixtures/sysfs`.

use std::path::{Path, PathBuf};

/// Trees copied from real hosts, committed under `plugin/tests/fixtures/sysfs`.
pub const CAPTURED: &[&str] = &["ci-host-captured"];

/// The generated trees' root (one directory per machine, and the generator's README.md).
pub fn generated_root() -> &'static Path {
    Path::new(concat!(env!("OUT_DIR"), "/sysfs"))
}

/// The committed captured trees' root.
pub fn captured_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin/tests/fixtures/sysfs")
}

/// The sysfs root of machine `name` (generated or captured). Panics naming the machine when it
/// is neither: a test asking for a machine that does not exist is a broken test.
pub fn fixture(name: &str) -> PathBuf {
    let path = if CAPTURED.contains(&name) {
        captured_root().join(name)
    } else {
        generated_root().join(name)
    };
    assert!(
        path.is_dir(),
        "sysfs fixture {name:?}: {} is not a directory (machines: {:?})",
        path.display(),
        names()
    );
    path
}

/// Every machine, generated and captured, sorted by name.
pub fn names() -> Vec<String> {
    let mut out: Vec<String> = CAPTURED.iter().map(|s| s.to_string()).collect();
    if let Ok(entries) = std::fs::read_dir(generated_root()) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if let Ok(name) = entry.file_name().into_string() {
                    out.push(name);
                }
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_machine_is_a_tree_with_cpus() {
        let names = names();
        assert!(
            names.len() > CAPTURED.len(),
            "no generated machines: {names:?}"
        );
        for name in names {
            let online = fixture(&name).join("devices/system/cpu/online");
            assert!(online.is_file(), "{name}: {} missing", online.display());
        }
    }

    #[test]
    fn the_committed_readme_is_the_generators() {
        let read = |p: PathBuf| {
            std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        assert!(
            read(generated_root().join("README.md")) == read(captured_root().join("README.md")),
            "plugin/tests/fixtures/sysfs/README.md is stale: copy the README.md \
             `python3 hack/gen-sysfs-fixtures.py --out DIR` writes"
        );
    }
}
