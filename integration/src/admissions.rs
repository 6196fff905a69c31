//! Which source decided each container's admission, as topolet reports it: the status's
//! `admissions` (per container: `api` or `inversion`, the fallback reason, and for API decisions
//! the inversion's comparison) and the pod watch's metrics.

use std::time::Duration;

use anyhow::{ensure, Context};
use serde_json::Value;

use crate::topolet::{metrics_text, Topolet};

/// How long the pod watch may take to (re)list.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// The status's `admissions` entries of pod `namespace/name`.
pub fn of_pod(status: &Value, pod: &str) -> Vec<Value> {
    status["admissions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|r| r["pod"].as_str() == Some(pod))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The value of the sample `name` (exactly, labels included) in `/metrics`, if present.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(' ')?;
        rest.trim().parse().ok()
    })
}

/// `/metrics` of `t`.
pub fn metrics(t: &mut Topolet) -> anyhow::Result<String> {
    let addr = t.wait_metrics_address()?;
    metrics_text(&addr)
}

/// Waits until the pod watch says `synced` (`topolet_kube_pod_store_synced`).
pub fn wait_store_synced(t: &mut Topolet, synced: bool) -> anyhow::Result<()> {
    let addr = t.wait_metrics_address()?;
    let want = if synced { 1.0 } else { 0.0 };
    crate::wait::until_true(
        &format!("topolet_kube_pod_store_synced {want}"),
        SYNC_TIMEOUT,
        || Ok(sample(&metrics_text(&addr)?, "topolet_kube_pod_store_synced") == Some(want)),
    )
}

/// Waits until every container of pod `pod` (`namespace/name`) listed in `containers` has an
/// admission record; returns them in that order.
pub fn wait_records(
    topolet: &mut Topolet,
    pod: &str,
    containers: &[&str],
) -> anyhow::Result<Vec<Value>> {
    topolet.wait_status(
        &format!("admission records of {pod}: {containers:?}"),
        SYNC_TIMEOUT,
        |s| {
            let recs = of_pod(s, pod);
            containers
                .iter()
                .map(|c| {
                    recs.iter()
                        .rfind(|r| r["container"].as_str() == Some(c))
                        .cloned()
                })
                .collect()
        },
    )
}

/// The record decided from the API, the inversion agreeing on every fact both know; returns its
/// refinements (what only the API knew).
pub fn check_api_agrees(record: &Value) -> anyhow::Result<Vec<String>> {
    let what = format!("{} / {}", record["pod"], record["container"]);
    ensure!(
        record["source"] == "api",
        "{what} decided from the API: {record}"
    );
    let cmp = &record["comparison"];
    let diffs = cmp["differences"]
        .as_array()
        .with_context(|| format!("{what}: no comparison: {record}"))?;
    ensure!(
        diffs.is_empty(),
        "{what}: the inversion disagrees with the pod's spec: {diffs:?}"
    );
    Ok(cmp["refinements"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}
