//! Writes the synthetic sysfs machine trees into `$OUT_DIR/sysfs` with the repository's generator
//! (`hack/gen-sysfs-fixtures.py`, Python 3 standard library, deterministic), so the tests read
//! trees generated from the one description instead of ~34,000 committed files.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let script = manifest.join("../hack/gen-sysfs-fixtures.py");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("sysfs");
    println!("cargo:rerun-if-changed={}", script.display());
    if out.exists() {
        if let Err(e) = std::fs::remove_dir_all(&out) {
            panic!("cannot clear {}: {e}", out.display());
        }
    }
    let python = std::env::var("PYTHON3").unwrap_or_else(|_| "python3".to_string());
    println!("cargo:rerun-if-env-changed=PYTHON3");
    let status = Command::new(&python)
        .arg(&script)
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {python} (set PYTHON3 to a Python 3 interpreter) for {}: {e}",
                script.display()
            )
        });
    if !status.success() {
        panic!(
            "{} --out {} failed: {status}",
            script.display(),
            out.display()
        );
    }
}
