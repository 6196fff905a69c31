//! `topolet config check FILE --sysfs-root DIR` through the binary: a configuration that does not
//! fit the machine exits 2 with one line naming the file, the key and the problem.

// Test code throughout: clippy's `allow-unwrap-in-tests` (clippy.toml) covers the #[test]
// functions, not the helpers they share here.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::path::Path;
use std::process::Command;

use topolet_testkit::sysfs::fixture;

/// Runs `topolet config check` on `text` against `sysfs`; (exit code, stdout, stderr, file path).
fn check(text: &str, sysfs: &Path) -> (i32, String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.toml");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_topolet"))
        .args(["config", "check"])
        .arg(&file)
        .arg("--sysfs-root")
        .arg(sysfs)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        file.display().to_string(),
    )
}

/// Asserts exit 2 and a single error line naming the file and every needle.
fn rejected(text: &str, sysfs: &Path, needles: &[&str]) {
    let (code, out, err, file) = check(text, sysfs);
    assert_eq!(code, 2, "{text:?}: stdout {out:?} stderr {err:?}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with(&format!("topolet: {file}: ")), "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err}");
    }
}

#[test]
fn a_fitting_config_is_ok() {
    let (code, out, err, file) = check(
        "[cpu]\nreserved_cpus = \"0\"\n[memory]\npolicy = \"static\"\nreserved = { 0 = \"1Gi\" }\n",
        &fixture("2s-snc2"),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "{file}: ok\n{file}: {}\n",
            topolet::config::reload::read_at_start_line()
        )
    );
    assert!(out.contains("[reclaimed] resource_name"), "{out}");
}

#[test]
fn reserved_cpu_beyond_the_machine() {
    rejected(
        "[cpu]\nreserved_cpus = \"0,96\"\n",
        &fixture("2s-snc2"),
        &["cpu.reserved_cpus", "96", "do not exist", "0-95"],
    );
    rejected(
        "[cpu]\nreserved_cpu_count = 97\n",
        &fixture("2s-snc2"),
        &["cpu.reserved_cpu_count", "97"],
    );
}

#[test]
fn memory_reservation_on_a_missing_node() {
    rejected(
        "[memory]\npolicy = \"static\"\nreserved = { 0 = \"1Gi\", 4 = \"1Gi\" }\n",
        &fixture("2s-snc2"),
        &["memory.reserved.4", "numa node 4 does not exist"],
    );
    rejected(
        "[memory]\npolicy = \"static\"\nreserved = { 0 = \"4096Gi\" }\n",
        &fixture("2s-snc2"),
        &["memory.reserved.0", "has only"],
    );
}

#[test]
fn a_pci_device_that_does_not_exist() {
    rejected(
        "[devices]\n\"example.com/nic\" = [\"0000:ff:1f.7\"]\n",
        &fixture("2s-snc2"),
        &[
            "devices.\"example.com/nic\"",
            "0000:ff:1f.7",
            "does not exist",
        ],
    );
}

#[test]
fn too_many_numa_nodes_for_the_policy() {
    let sysfs = tempfile::tempdir().unwrap();
    write_machine(sysfs.path(), 9);
    rejected(
        "[topology]\npolicy = \"single-numa-node\"\n",
        sysfs.path(),
        &["topology.policy", "9", "max_allowable_numa_nodes"],
    );
    // Raising the limit, or policy none, fits.
    for ok in [
        "[topology]\npolicy = \"single-numa-node\"\nmax_allowable_numa_nodes = 9\n",
        "[topology]\npolicy = \"none\"\n",
    ] {
        let (code, _, err, _) = check(ok, sysfs.path());
        assert_eq!(code, 0, "{ok:?}: {err}");
    }
    rejected(
        "[topology]\nmax_allowable_numa_nodes = 4\n",
        sysfs.path(),
        &["topology.max_allowable_numa_nodes", "4"],
    );
}

#[test]
fn cpu_options_that_do_not_fit_name_their_key() {
    rejected(
        "[cpu]\npolicy = \"none\"\nfull_pcpus_only = true\n",
        &fixture("2s-snc2"),
        &["cpu.full_pcpus_only", "requires policy static"],
    );
    rejected(
        "[cpu]\nreserved_cpus = \"0-95\"\n",
        &fixture("2s-snc2"),
        &["cpu.reserved_cpus", "leaves none"],
    );
}

#[test]
fn a_missing_file_and_a_bad_sysfs_root_fail() {
    let out = Command::new(env!("CARGO_BIN_EXE_topolet"))
        .args(["config", "check", "/nonexistent/topolet.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/topolet.toml: cannot read"),
        "{err}"
    );
    let (code, _, err, _) = check("", Path::new("/nonexistent-sysfs"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/nonexistent-sysfs"), "{err}");
}

/// A sysfs tree of `nodes` NUMA nodes, one socket each, one single-thread core per node.
fn write_machine(root: &Path, nodes: usize) {
    let w = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{text}\n")).unwrap();
    };
    let last = nodes - 1;
    w("devices/system/cpu/online", &format!("0-{last}"));
    w("devices/system/node/online", &format!("0-{last}"));
    for n in 0..nodes {
        let cpu = format!("devices/system/cpu/cpu{n}/topology");
        w(&format!("{cpu}/physical_package_id"), &n.to_string());
        w(&format!("{cpu}/die_id"), "0");
        w(&format!("{cpu}/core_id"), "0");
        w(&format!("{cpu}/thread_siblings_list"), &n.to_string());
        let node = format!("devices/system/node/node{n}");
        w(&format!("{node}/cpulist"), &n.to_string());
        w(
            &format!("{node}/meminfo"),
            &format!("Node {n} MemTotal:       4194304 kB"),
        );
        let distance: Vec<&str> = (0..nodes)
            .map(|m| if m == n { "10" } else { "20" })
            .collect();
        w(&format!("{node}/distance"), &distance.join(" "));
    }
}
