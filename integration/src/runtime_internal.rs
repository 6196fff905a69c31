//! Runtime-internal failures: a CRI call that containerd fails for a reason of its own, in a
//! step that involves no NRI call, told apart from a failure of topolet's.
//!
//! A fault test that kills containerd mid-operation judges topolet, not containerd's crash
//! consistency. After such a kill, containerd itself can fail a later, unrelated create (seen on
//! v2.3.7 in `faults::containerd_restart_mid_burst`; see [`PATTERNS`]). Such a failure is
//! recognised here by the runtime's error text against a closed list of patterns, each naming
//! the upstream files the text comes from; the test then makes the pod again under a new name
//! ([`retrying`]), says so on stderr and counts it ([`Retries`]). Everything else stays as
//! strict as before: an error whose runtime part mentions NRI, a plugin or topolet, or that no
//! pattern describes, is returned at once, and so is any error after [`MAX_RETRIES`] retries.

use std::fmt;

/// How many times [`retrying`] makes a pod again after a runtime-internal failure. One kill of
/// containerd leaves at most one stale snapshot directory (the snapshotters create snapshots in
/// write transactions of their bolt metastore, one at a time: core/snapshots/storage/metastore.go
/// `WithTransaction`, bbolt allows a single writer), and the failed create removes it; two
/// retries leave room for a failure of the sandbox's snapshot and then of the container's.
pub const MAX_RETRIES: usize = 2;

/// Where the runtime's own answer starts in a CRI error as crictl prints it (gRPC's status text:
/// `rpc error: code = Unknown desc = …`). Text before it is the harness's and crictl's (the call,
/// the spec file, the pod's name), never classified; an error without it never reached the
/// runtime's answer and is not runtime-internal.
const RUNTIME_ANSWER: &str = "rpc error: code = ";

/// Words that tie a runtime error to NRI: containerd's NRI steps (internal/cri/nri/
/// nri_api_linux.go "failed to get NRI adjustment for container", internal/cri/server/
/// sandbox_run.go "NRI RunPodSandbox failed", podsandbox/sandbox_run.go "nri invoke"), the NRI
/// adaptation's plugin errors (containerd/nri pkg/adaptation/plugin.go and result.go: `plugin
/// "<name>" …`), topolet's own refusals (`topolet: TopologyAffinityError: …`). Matched
/// case-insensitively anywhere in a word of the runtime's answer that is not an absolute path.
const NRI_WORDS: &[&str] = &["nri", "plugin", "topolet"];

/// A kind of runtime-internal failure, recognised by its error text.
pub struct Pattern {
    /// Short name, as reported.
    pub name: &'static str,
    /// The upstream files (containerd's tree) the error text comes from.
    pub sources: &'static [&'static str],
    /// Whether the runtime's answer (from [`RUNTIME_ANSWER`] on) is this failure.
    matches: fn(&str) -> bool,
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pattern")
            .field("name", &self.name)
            .field("sources", &self.sources)
            .finish()
    }
}

/// The closed list.
pub const PATTERNS: &[Pattern] = &[Pattern {
    name: "snapshot id reused",
    sources: &[
        // createSnapshot: the new snapshot is prepared in `snapshots/new-<random>`
        // (prepareDirectory, os.MkdirTemp(snapshotDir, "new-")), then renamed to
        // `snapshots/<id>` inside the metastore's write transaction, before its commit:
        // `failed to rename: %w`.
        "plugins/snapshots/overlay/overlay.go",
        // The same steps for the native snapshotter (hack/containerd.sh picks it where the
        // stack's directory is on overlayfs).
        "plugins/snapshots/native/native.go",
        // CreateSnapshot: the id is the bucket's NextSequence in that same transaction. When
        // containerd dies after the rename and before the commit, the directory stays and the
        // sequence does not: after the restart the next snapshot gets the same id, and the rename
        // onto the leftover directory fails (EEXIST or ENOTEMPTY); the failed create removes the
        // leftover (createSnapshot's deferred clean-up of `path`).
        "core/snapshots/storage/bolt.go",
    ],
    matches: snapshot_id_reused,
}];

/// `failed to rename: rename <root>/snapshots/new-<n> <root>/snapshots/<id>: file exists` (or
/// `directory not empty`): Go's `*os.LinkError` for the rename of createSnapshot.
fn snapshot_id_reused(answer: &str) -> bool {
    const HEAD: &str = "failed to rename: rename ";
    let Some(at) = answer.find(HEAD) else {
        return false;
    };
    let mut words = answer[at + HEAD.len()..].splitn(3, ' ');
    let (Some(from), Some(to), Some(errno)) = (words.next(), words.next(), words.next()) else {
        return false;
    };
    let (Some((from_dir, from_name)), Some((to_dir, to_name))) = (
        from.rsplit_once('/'),
        to.strip_suffix(':').and_then(|t| t.rsplit_once('/')),
    ) else {
        return false;
    };
    // os.MkdirTemp's random part and the bolt sequence: decimal numbers.
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    from_dir == to_dir
        && from_dir.ends_with("/snapshots")
        && from_name.strip_prefix("new-").is_some_and(number)
        && number(to_name)
        && (errno.starts_with("file exists") || errno.starts_with("directory not empty"))
}

/// The runtime's answer in an error text: from [`RUNTIME_ANSWER`] on.
fn runtime_answer(error: &str) -> Option<&str> {
    error.find(RUNTIME_ANSWER).map(|at| &error[at..])
}

/// Whether a word of the answer that is not an absolute path (a clone's directory may well be
/// called topolet) names NRI, a plugin or topolet.
fn mentions_nri(answer: &str) -> bool {
    answer
        .split_whitespace()
        .filter(|w| !w.trim_start_matches(['"', '\'', '(']).starts_with('/'))
        .map(str::to_ascii_lowercase)
        .any(|w| NRI_WORDS.iter().any(|n| w.contains(n)))
}

/// The pattern of [`PATTERNS`] that `error` (a CRI call's error, as the harness formats it with
/// `{:#}`) is, or None: the failure may be topolet's and must fail the test.
pub fn classify(error: &str) -> Option<&'static Pattern> {
    let answer = runtime_answer(error)?;
    if mentions_nri(answer) {
        return None;
    }
    PATTERNS.iter().find(|p| (p.matches)(answer))
}

/// One retry made after a runtime-internal failure.
#[derive(Debug, Clone)]
pub struct Retry {
    /// What was being made (the first attempt's name).
    pub what: String,
    /// The attempt that failed (0: the first).
    pub attempt: usize,
    /// The pattern's name.
    pub pattern: &'static str,
    /// The runtime's answer (its first line).
    pub error: String,
}

/// The retries of a test, reported at its end.
#[derive(Debug, Clone, Default)]
pub struct Retries(Vec<Retry>);

impl Retries {
    /// How many retries were made.
    pub fn count(&self) -> usize {
        self.0.len()
    }

    /// Each retry.
    pub fn all(&self) -> &[Retry] {
        &self.0
    }

    /// Prints the count and each retry: past libtest's capture when there was a retry, so that
    /// the log of a passing run shows it too; with the test's other output otherwise.
    pub fn report(&self) {
        if self.0.is_empty() {
            eprintln!("{self}");
        } else {
            uncaptured(&self.to_string());
        }
    }
}

/// A line on the process's standard error itself, not through `eprintln!`, which libtest
/// captures and shows only for a failed test (std's output capture covers the print macros only).
fn uncaptured(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

impl fmt::Display for Retries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "runtime-internal retries: {} (failures of containerd's own, no NRI call involved)",
            self.0.len()
        )?;
        for r in &self.0 {
            write!(
                f,
                "\n  {} attempt {}: {}: {}",
                r.what, r.attempt, r.pattern, r.error
            )?;
        }
        Ok(())
    }
}

/// `attempt(0)`, and while it fails with a runtime-internal failure ([`classify`]), `attempt(1)`,
/// … up to [`MAX_RETRIES`] more times; each attempt must use a new name (a new pod: the failed
/// one's sandbox may exist). Every retry is printed on stderr (past libtest's capture: a passing
/// run's log shows it) and recorded in `retries`. Any other error, and the last attempt's, is
/// returned as it is.
pub fn retrying<T>(
    what: &str,
    retries: &mut Retries,
    mut attempt: impl FnMut(usize) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut n = 0;
    loop {
        let err = match attempt(n) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let text = format!("{err:#}");
        let pattern = match classify(&text) {
            Some(p) if n < MAX_RETRIES => p,
            _ => return Err(err),
        };
        // Reported: the answer's first line (crictl says it twice, in its log line and its fatal one).
        let answer = runtime_answer(&text)
            .and_then(|a| a.lines().next())
            .unwrap_or(&text)
            .to_string();
        uncaptured(&format!(
            "[runtime-internal] {what}, attempt {n}: {} ({}), not topolet's: made again under a \
             new name; containerd said: {answer}",
            pattern.name,
            pattern.sources.join(", ")
        ));
        retries.0.push(Retry {
            what: what.to_string(),
            attempt: n,
            pattern: pattern.name,
            error: answer,
        });
        n += 1;
    }
}

/// The name of attempt `n` of `name`: `name` itself first, then `name-r<n>`.
pub fn attempt_name(name: &str, n: usize) -> String {
    if n == 0 {
        name.to_string()
    } else {
        format!("{name}-r{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness's prefix and crictl's line around a runtime answer, as `{:#}` shows them.
    fn as_crictl(call: &str, answer: &str) -> String {
        format!(
            "RunPodSandbox topolet-it/after-restart: crictl {call} \
             /home/ci/topolet/target/it/s1Ab2Cd/specs/after-restart-pod.json failed (exit \
             status: 1): time=\"2026-11-30T04:12:09Z\" level=fatal msg=\"run pod sandbox: \
             {answer}\""
        )
    }

    const ROOT: &str = "/home/ci/topolet/target/it/s1Ab2Cd/root";

    #[test]
    fn the_snapshot_id_reused_after_a_kill_is_runtime_internal() {
        // crictl's line on containerd v2.3.7, verbatim (v2.4.2 and v2.0.14 say the same): a
        // stale `snapshots/3` made by hand where a kill leaves one, then `crictl runp`.
        let real = "time=\"2026-12-06T03:13:15Z\" level=fatal msg=\"run pod sandbox: rpc error: \
            code = Unknown desc = failed to start sandbox \\\"709ee02331c00c189b47095f267617591b0\
            58e8be917912450f2b01c205728da\\\": failed to create containerd container: failed to \
            rename: rename /work/wt-35/target/it/xpYeeh/root/io.containerd.snapshotter.v1.overlayfs\
            /snapshots/new-1980536192 /work/wt-35/target/it/xpYeeh/root/io.containerd.snapshotter\
            .v1.overlayfs/snapshots/3: file exists\"";
        let p = classify(&format!(
            "RunPodSandbox topolet-it/after-restart: crictl runp failed: {real}"
        ));
        assert_eq!(p.map(|p| p.name), Some("snapshot id reused"), "{real}");
        // The failure of the cold CI run on v2.3.7, in a clone named topolet.
        let ci = as_crictl(
            "runp",
            &format!(
                "rpc error: code = Unknown desc = failed to start sandbox \\\"0a1b\\\": failed to \
                 create containerd container: failed to rename: rename {ROOT}/io.containerd.\
                 snapshotter.v1.overlayfs/snapshots/new-3291961952 {ROOT}/io.containerd.\
                 snapshotter.v1.overlayfs/snapshots/19: file exists"
            ),
        );
        assert!(classify(&ci).is_some(), "{ci}");
        // CreateContainer, ENOTEMPTY, the native snapshotter.
        let create = format!(
            "CreateContainer topolet-it/after-restart/main: crictl create failed (exit status: \
             1): level=fatal msg=\"creating container: rpc error: code = Unknown desc = failed \
             to create containerd container: failed to rename: rename \
             {ROOT}/io.containerd.snapshotter.v1.native/snapshots/new-17 \
             {ROOT}/io.containerd.snapshotter.v1.native/snapshots/204: directory not empty\""
        );
        assert!(classify(&create).is_some(), "{create}");
        // Every pattern names where its text comes from.
        for p in PATTERNS {
            assert!(!p.sources.is_empty(), "{p:?}");
        }
    }

    #[test]
    fn an_nri_or_plugin_error_is_never_runtime_internal() {
        let nri = [
            // containerd's CreateContainer with topolet's refusal (internal/cri/nri/
            // nri_api_linux.go, the plugin's error as the NRI adaptation returns it).
            "rpc error: code = Unknown desc = failed to create containerd container: failed to \
             get NRI adjustment for container: topolet: TopologyAffinityError: container main of \
             pod default/pod-x asks 5 exclusive CPUs",
            "rpc error: code = Unknown desc = failed to create containerd container: failed to \
             create NRI adjustment: rpc error: code = DeadlineExceeded desc = context deadline \
             exceeded",
            // containerd/nri pkg/adaptation/result.go
            "rpc error: code = Unknown desc = failed to create containerd container: failed to \
             get NRI adjustment for container: plugin \"50-topolet\" asked update of \"abc\" \
             during creation",
            // internal/cri/server/sandbox_run.go
            "rpc error: code = Unknown desc = NRI RunPodSandbox failed: ttrpc: closed",
            // A plugin's name beside a path: only absolute paths are left out.
            "rpc error: code = Unknown desc = failed to rename: rename /r/snapshots/new-1 \
             /r/snapshots/2: file exists (nri/50-topolet)",
        ];
        for answer in nri {
            let e = as_crictl("runp", answer);
            assert!(classify(&e).is_none(), "{e}");
        }
        // The snapshot's text inside an NRI error is still NRI's.
        let mixed = as_crictl(
            "runp",
            &format!(
                "rpc error: code = Unknown desc = failed to get NRI adjustment for container: \
                 failed to rename: rename {ROOT}/x/snapshots/new-1 {ROOT}/x/snapshots/2: file \
                 exists"
            ),
        );
        assert!(classify(&mixed).is_none(), "{mixed}");
    }

    #[test]
    fn anything_off_the_list_is_not_runtime_internal() {
        let other = [
            // runc, not the snapshotter.
            "rpc error: code = Unknown desc = failed to create containerd task: failed to create \
             shim task: OCI runtime create failed: runc create failed: unable to start container \
             process: error during container init",
            // A rename that is not createSnapshot's, or fails otherwise.
            "rpc error: code = Unknown desc = failed to rename: rename /a/b/c /a/b/d: file exists",
            "rpc error: code = Unknown desc = failed to rename: rename /r/snapshots/new-5 \
             /r/snapshots/6: permission denied",
            "rpc error: code = Unknown desc = failed to rename: rename /r/snapshots/new-5 \
             /q/snapshots/6: file exists",
            "rpc error: code = Unknown desc = failed to rename: rename /r/snapshots/new-5 \
             /r/snapshots/x6: file exists",
            // The connection (crictl's, handled by Cri::run) and a deadline.
            "rpc error: code = Unavailable desc = connection error: desc = \"transport: Error \
             while dialing\"",
            "rpc error: code = DeadlineExceeded desc = context deadline exceeded",
        ];
        for answer in other {
            let e = as_crictl("runp", answer);
            assert!(classify(&e).is_none(), "{e}");
        }
        // Not the runtime's answer at all: the pattern's text in the harness's own words.
        let harness = format!(
            "waiting for the pod: failed to rename: rename {ROOT}/snapshots/new-1 \
             {ROOT}/snapshots/2: file exists"
        );
        assert!(classify(&harness).is_none());
        assert!(classify("").is_none());
    }

    #[test]
    fn retrying_retries_only_runtime_internal_failures_and_counts_them() {
        let reused = |n: usize| {
            anyhow::anyhow!(
                "rpc error: code = Unknown desc = failed to rename: rename /r/snapshots/new-9 \
                 /r/snapshots/{n}: file exists\nlevel=fatal msg=\"the same again\""
            )
        };
        // Fails once, then succeeds under the next name.
        let mut retries = Retries::default();
        let mut names = Vec::new();
        let got = retrying("p", &mut retries, |n| {
            names.push(attempt_name("p", n));
            if n == 0 {
                Err(reused(19).context("RunPodSandbox topolet-it/p"))
            } else {
                Ok(n)
            }
        });
        assert_eq!(got.ok(), Some(1));
        assert_eq!(names, ["p", "p-r1"]);
        assert_eq!(retries.count(), 1);
        assert_eq!(retries.all()[0].pattern, "snapshot id reused");
        assert!(retries.all()[0]
            .error
            .ends_with("/r/snapshots/19: file exists"));
        assert!(retries
            .to_string()
            .contains("p attempt 0: snapshot id reused"));

        // Never more than MAX_RETRIES retries: the last error is returned.
        let mut retries = Retries::default();
        let mut calls = 0;
        let got: anyhow::Result<()> = retrying("q", &mut retries, |n| {
            calls += 1;
            Err(reused(n))
        });
        assert!(got.is_err());
        assert_eq!(calls, MAX_RETRIES + 1);
        assert_eq!(retries.count(), MAX_RETRIES);

        // topolet's error: returned at once, nothing counted.
        let mut retries = Retries::default();
        let mut calls = 0;
        let got: anyhow::Result<()> = retrying("r", &mut retries, |_| {
            calls += 1;
            anyhow::bail!(
                "rpc error: code = Unknown desc = failed to create containerd container: failed \
                 to get NRI adjustment for container: topolet: TopologyAffinityError"
            )
        });
        assert!(got.is_err());
        assert_eq!((calls, retries.count()), (1, 0));
    }
}
