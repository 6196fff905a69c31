//! The node's eviction signals as topolet computes them on this (cgroup v1) host, read by the
//! eviction tests to set thresholds relative to what is free now and to see them crossed.

use anyhow::Context;

/// pid.available as the kubelet (and topolet) computes it.
pub fn pid_available() -> anyhow::Result<u64> {
    let read = |p: &str| -> anyhow::Result<u64> {
        let t = std::fs::read_to_string(p).with_context(|| format!("reading {p}"))?;
        t.trim().parse().with_context(|| format!("{p}: {t:?}"))
    };
    let max = read("/proc/sys/kernel/pid_max")?.min(read("/proc/sys/kernel/threads-max")?);
    let loadavg = std::fs::read_to_string("/proc/loadavg").context("reading /proc/loadavg")?;
    let total: u64 = loadavg
        .split_whitespace()
        .nth(3)
        .and_then(|f| f.split_once('/'))
        .and_then(|(_, t)| t.parse().ok())
        .with_context(|| format!("/proc/loadavg: {loadavg:?}"))?;
    Ok(max.saturating_sub(total))
}

/// memory.available as topolet computes it on this (cgroup v1) host.
pub fn memory_available() -> anyhow::Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("MemTotal")?;
    let usage: u64 = std::fs::read_to_string("/sys/fs/cgroup/memory/memory.usage_in_bytes")
        .context("reading the root memory.usage_in_bytes")?
        .trim()
        .parse()
        .context("root memory.usage_in_bytes")?;
    let stat = std::fs::read_to_string("/sys/fs/cgroup/memory/memory.stat")
        .context("reading the root memory.stat")?;
    let inactive: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.trim().parse().ok())
        .context("total_inactive_file")?;
    Ok((total_kib * 1024).saturating_sub(usage.saturating_sub(inactive)))
}

/// The shell script of a pod that forks 600 `sleep`s (crosses a `pid.available` threshold set
/// 300 under what is free).
pub const FORK_SCRIPT: &str = "i=0; while [ $i -lt 600 ]; do sleep 3600 & i=$((i+1)); done; wait";

/// The shell script of a pod holding 3 GiB: two 1500 MiB buffers filled from /dev/zero, each
/// `dd` then blocked writing into a pipe that `sleep` never reads, so they stay resident in the
/// pod's cgroup until it is killed (crosses a `memory.available` threshold set 2 GiB under what
/// is available).
pub const MEMORY_SCRIPT: &str = "dd if=/dev/zero bs=1500M count=1 2>/dev/null | sleep 3600 & \
                                 dd if=/dev/zero bs=1500M count=1 2>/dev/null | sleep 3600 & wait";

/// Free bytes of the filesystem holding `path` as topolet measures `nodefs`/`imagefs`
/// (statvfs: `f_bavail · f_frsize`).
pub fn fs_available(path: &std::path::Path) -> anyhow::Result<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .with_context(|| format!("{} has a NUL byte", path.display()))?;
    // SAFETY: `libc::statvfs` is plain old data (integers only): all-zero bytes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-parameter and `c` a NUL-terminated path for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", path.display()));
    }
    Ok(st.f_bavail * st.f_frsize)
}

/// Builds a filler image `name` (the test image plus `mib` MiB of random bytes in `/filler`,
/// `hack/build-images.sh --filler`) as an OCI tarball in `dir`, and imports it into the stack's
/// runtime ([`crate::Stack::import_image`]) so that the CRI lists it.
pub fn import_filler_image(
    stack: &crate::Stack,
    name: &str,
    mib: u64,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    let tar = dir.join(format!("{}.tar", name.replace(['/', ':'], "_")));
    let script = crate::paths::repo_root().join("hack/build-images.sh");
    let out = std::process::Command::new(&script)
        .args(["--filler", name, &mib.to_string()])
        .arg(&tar)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "build-images.sh --filler {name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stack.import_image(name, &tar)?;
    std::fs::remove_file(&tar).with_context(|| format!("removing {}", tar.display()))?;
    Ok(())
}

/// The names (repo tags) of every image the CRI lists (`crictl images -o json`).
pub fn image_names(stack: &crate::Stack) -> anyhow::Result<Vec<String>> {
    let out = stack.cri().run(&["images", "-o", "json"])?;
    let v: serde_json::Value = serde_json::from_str(&out).context("parsing crictl images")?;
    Ok(v["images"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["repoTags"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect())
}
