//! One eviction of the loop (`EvictionLoop::evict_one`): the candidates ranked with the API's
//! pod facts when they come in time ([`FACTS_TIMEOUT`]), batch pods first; each asked in turn, one
//! a PodDisruptionBudget refuses skipped, at most [`MAX_ATTEMPTS_PER_INTERVAL`] requests an
//! interval; the kubelet's message with each container's usage; the pod's Warning Event
//! `Evicted`; and the wait for the evicted pod to terminate ([`POD_CLEANUP_TIMEOUT`]) before
//! another goes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cluster::pod_facts::{overlay, FactsByUid};
use crate::nri::handlers::ManagedPod;
use crate::pressure::actions::{EvictPod, Evicted, Evictor};
use crate::pressure::blocking::off_runtime;
use crate::pressure::eviction::{EvictionLoop, EvictionStats, LoopState, Seen};
use crate::pressure::observation::Observed;
use crate::telemetry::metrics::Metrics;
use topolet_core::eviction::message::{eviction_message, ContainerUsage};
use topolet_core::eviction::{batch_first, candidates, Candidate, SignalResource, Threshold};
use topolet_core::kube::events::{EventType, ObjectRef, Occurrence};
use topolet_core::kube::pod::Pod;

/// Most eviction requests per interval (candidates whose PodDisruptionBudget refuses are
/// skipped; the next interval starts again from the best one).
pub const MAX_ATTEMPTS_PER_INTERVAL: usize = 5;
/// How long an evicted pod may keep processes before the loop evicts another (the kubelet's
/// `podCleanupTimeout`).
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The reason of the pod's Event (the kubelet's `eviction.Reason`).
pub const EVICTED_REASON: &str = "Evicted";

/// How long the loop waits for the pod facts before ranking with NRI's view alone.
pub const FACTS_TIMEOUT: Duration = Duration::from_secs(5);

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    /// The pod is evicted (or was gone, or dry run).
    Done(Evicted),
    /// A PodDisruptionBudget refused: try the next candidate.
    Refused,
    /// The request failed: the next interval decides again.
    Failed,
}

/// Evicts `pod` with `evictor`; logs and counts the attempt.
async fn act(
    evictor: &dyn Evictor,
    stats: &EvictionStats,
    metrics: Option<&Metrics>,
    pod: &EvictPod,
    grace: Duration,
) -> Attempt {
    let t = Instant::now();
    let count = |result: &'static str| {
        if let Some(m) = metrics {
            m.eviction_result(evictor.name(), result);
        }
    };
    match evictor.evict(pod, grace).await {
        Ok(Evicted::Refused { message }) => {
            count("pdb_refused");
            tracing::warn!(
                pod = %pod.pod_ref(),
                signal = %pod.signal,
                action = evictor.name(),
                refusal = %message,
                "eviction refused by a PodDisruptionBudget; trying the next candidate"
            );
            Attempt::Refused
        }
        Ok(outcome) => {
            stats.with(|s| *s.evictions.entry(pod.signal.clone()).or_default() += 1);
            let what = match &outcome {
                Evicted::DryRun => "dry-run".to_string(),
                Evicted::Stopped { containers } => {
                    format!("stopped {containers} containers and the sandbox")
                }
                Evicted::AlreadyGone => "already gone".to_string(),
                Evicted::Evicting {
                    disruption_target,
                    gone,
                } => {
                    if *gone {
                        "deleted by the API server".to_string()
                    } else {
                        format!("terminating (DisruptionTarget condition: {disruption_target})")
                    }
                }
                Evicted::Refused { .. } => String::new(),
            };
            count(if outcome == Evicted::AlreadyGone {
                "already_gone"
            } else {
                "evicted"
            });
            tracing::warn!(
                pod = %pod.pod_ref(),
                uid = %pod.uid,
                signal = %pod.signal,
                action = evictor.name(),
                outcome = %what,
                took_ms = t.elapsed().as_millis() as u64,
                reason = %pod.reason,
                "pod evicted"
            );
            Attempt::Done(outcome)
        }
        Err(e) => {
            count("error");
            stats.with(|s| *s.failures.entry(pod.signal.clone()).or_default() += 1);
            tracing::error!(pod = %pod.pod_ref(), signal = %pod.signal, action = evictor.name(), error = %e, "eviction failed; the next interval decides again");
            Attempt::Failed
        }
    }
}

impl EvictionLoop {
    /// This node's pods from the API, when the client is on and answers in time.
    pub(super) async fn pod_facts(&self) -> Option<FactsByUid> {
        let f = self.facts.as_ref()?;
        match tokio::time::timeout(FACTS_TIMEOUT, f.node_pods()).await {
            Ok(Ok(m)) => Some(m),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "eviction: pod facts from the API unavailable; ranking with NRI's view");
                None
            }
            Err(_) => {
                tracing::warn!(
                    timeout_s = FACTS_TIMEOUT.as_secs(),
                    "eviction: pod facts from the API timed out; ranking with NRI's view"
                );
                None
            }
        }
    }

    /// The kubelet's message for evicting `p` for `threshold`, with each container's working
    /// set (memory only, as measured from its cgroup, off the runtime) against its request.
    async fn message(&self, threshold: &Threshold, o: Option<Observed>, p: &ManagedPod) -> String {
        let resource = threshold.signal.resource();
        let containers: Vec<ContainerUsage> = if resource == SignalResource::Memory {
            let sources = self.sources.clone();
            let wanted: Vec<(String, String, u64)> = p
                .container_cgroups
                .iter()
                .zip(&p.pod.containers)
                .map(|(cgroup, c)| {
                    (
                        cgroup.clone(),
                        c.name.clone(),
                        c.requests.memory_bytes.unwrap_or(0),
                    )
                })
                .collect();
            off_runtime(move || {
                wanted
                    .into_iter()
                    .filter_map(|(cgroup, name, request)| {
                        let u = sources.pod_usage(&cgroup).ok()?;
                        Some(ContainerUsage {
                            name,
                            usage: u.memory_working_set,
                            request,
                        })
                    })
                    .collect()
            })
            .await
        } else {
            Vec::new()
        };
        eviction_message(
            resource,
            o.map(|o| threshold.amount(o.capacity, false)),
            o.map(|o| o.available),
            &containers,
        )
    }

    /// True while the pod evicted last still has processes (and not for longer than
    /// [`POD_CLEANUP_TIMEOUT`]): nothing else is evicted meanwhile.
    fn waiting_for_cleanup(&self, state: &Mutex<LoopState>, seen: &Seen<'_>) -> bool {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((uid, pod, since)) = st.pending.clone() else {
            return false;
        };
        let alive = seen.pods.iter().any(|p| p.pod.uid == uid)
            && seen.usage.get(&uid).is_some_and(|u| u.processes > 0);
        if alive && since.elapsed() < POD_CLEANUP_TIMEOUT {
            tracing::info!(pod = %pod, waited_ms = since.elapsed().as_millis() as u64, "eviction: threshold met; waiting for the evicted pod to terminate");
            return true;
        }
        if alive {
            tracing::warn!(pod = %pod, timeout_s = POD_CLEANUP_TIMEOUT.as_secs(), "eviction: the evicted pod still runs after the cleanup timeout; evicting again");
        }
        st.pending = None;
        false
    }

    /// Evicts at most one pod for `threshold`: the candidates ranked with the API's facts when
    /// known (else `nri_candidates`), PodDisruptionBudget refusals skipped.
    pub(super) async fn evict_one(
        &self,
        state: &Mutex<LoopState>,
        threshold: &Threshold,
        nri_candidates: &[Candidate],
        seen: &Seen<'_>,
    ) {
        if self.waiting_for_cleanup(state, seen) {
            return;
        }
        let facts = self.pod_facts().await;
        let mut pods: Vec<ManagedPod> = seen.pods.to_vec();
        let source = if facts.is_some() { "api" } else { "nri" };
        let mut cands = nri_candidates.to_vec();
        if let Some(f) = &facts {
            for p in &mut pods {
                if let Some(fact) = f.get(&p.pod.uid) {
                    overlay(&mut p.pod, fact);
                }
            }
            let core_pods: Vec<Pod> = pods.iter().map(|p| p.pod.clone()).collect();
            cands = candidates(&self.config, threshold, &core_pods, seen.by_pod);
            // Already terminating (deleted by someone else): evicting it again frees nothing.
            cands.retain(|c| !f.get(&c.uid).is_some_and(|x| x.deleting));
        }
        let batch: std::collections::HashSet<&str> = pods
            .iter()
            .filter(|p| p.batch)
            .map(|p| p.pod.uid.as_str())
            .collect();
        batch_first(&mut cands, |uid| batch.contains(uid));
        if cands.is_empty() {
            tracing::warn!(signal = %threshold.signal, pod_facts = source, "eviction: threshold met but no pod can be evicted (none managed, or only critical or terminating ones)");
            return;
        }
        let o = seen.observed.get(&threshold.signal).copied();
        for cand in cands.iter().take(MAX_ATTEMPTS_PER_INTERVAL) {
            let Some(p) = pods.iter().find(|p| p.pod.uid == cand.uid) else {
                continue;
            };
            let message = self.message(threshold, o, p).await;
            let u = seen.by_pod.get(&p.pod.key()).copied().unwrap_or_default();
            let controller = facts
                .as_ref()
                .and_then(|f| f.get(&cand.uid))
                .and_then(|f| f.controller.clone())
                .unwrap_or_default();
            tracing::warn!(
                pod = %cand.pod,
                signal = %threshold.signal,
                observed = o.map(|o| o.available),
                threshold = o.map(|o| threshold.amount(o.capacity, false)),
                threshold_spec = %threshold,
                grace_period_s = cand.grace_period.as_secs(),
                candidates = cands.len(),
                pod_facts = source,
                controller = %controller,
                memory_working_set = u.memory_working_set,
                processes = u.processes,
                disk = u.disk,
                reason = %message,
                "eviction: threshold met; evicting one pod"
            );
            let evict = EvictPod {
                sandbox_id: p.sandbox_id.clone(),
                namespace: p.pod.namespace.clone(),
                name: p.pod.name.clone(),
                uid: p.pod.uid.clone(),
                signal: threshold.signal.to_string(),
                reason: message.clone(),
            };
            let metrics = self.metrics.as_deref();
            match act(
                self.evictor.as_ref(),
                &self.stats,
                metrics,
                &evict,
                cand.grace_period,
            )
            .await
            {
                Attempt::Done(outcome) => {
                    if let Some(m) = metrics {
                        m.eviction(&evict.signal);
                    }
                    if matches!(outcome, Evicted::Stopped { .. } | Evicted::Evicting { .. }) {
                        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                        st.pending = Some((evict.uid.clone(), evict.pod_ref(), Instant::now()));
                        if let Some(sink) = &self.events {
                            let object = ObjectRef {
                                namespace: evict.namespace.clone(),
                                name: evict.name.clone(),
                                uid: evict.uid.clone(),
                            };
                            sink.record(Occurrence::new(
                                object,
                                EventType::Warning,
                                EVICTED_REASON,
                                &message,
                            ));
                        }
                    }
                    return;
                }
                Attempt::Refused => continue,
                Attempt::Failed => return,
            }
        }
        tracing::warn!(signal = %threshold.signal, tried = cands.len().min(MAX_ATTEMPTS_PER_INTERVAL), "eviction: every candidate tried was refused by a PodDisruptionBudget; the next interval tries again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EvictionSection;
    use crate::pressure::actions::EvictError;
    use crate::pressure::eviction::PodSource;
    use crate::pressure::signals::SignalSources;
    use crate::pressure::test_pods::pod;
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Pods(Vec<ManagedPod>);

    impl PodSource for Pods {
        fn managed_pods(&self) -> Vec<ManagedPod> {
            self.0.clone()
        }
    }

    /// Refuses the first `refuse` requests (a PodDisruptionBudget), then accepts.
    struct Budget {
        refuse: usize,
        calls: AtomicUsize,
        evicted: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Evictor for Budget {
        fn name(&self) -> &'static str {
            "api"
        }
        async fn evict(&self, pod: &EvictPod, _grace: Duration) -> Result<Evicted, EvictError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.refuse {
                return Ok(Evicted::Refused {
                    message: "Cannot evict pod as it would violate the pod's disruption budget."
                        .into(),
                });
            }
            self.evicted.lock().unwrap().push(pod.name.clone());
            Ok(Evicted::Evicting {
                disruption_target: true,
                gone: false,
            })
        }
    }

    /// A loop under PID pressure (pid_max 1000, 900 tasks, threshold 500) over 7 pods.
    fn under_pid_pressure(evictor: Arc<Budget>) -> (tempfile::TempDir, EvictionLoop) {
        let t = tempfile::tempdir().unwrap();
        let kernel = t.path().join("proc/sys/kernel");
        std::fs::create_dir_all(&kernel).unwrap();
        std::fs::write(kernel.join("pid_max"), "1000\n").unwrap();
        std::fs::write(t.path().join("proc/loadavg"), "0.1 0.1 0.1 1/900 1\n").unwrap();
        let section: EvictionSection = toml::from_str(
            "interval = \"1s\"\nhard = { \"pid.available\" = \"500\" }\naction = \"api\"",
        )
        .unwrap();
        let config = section.settings().unwrap();
        let metrics = Arc::new(Metrics::new());
        let l = EvictionLoop {
            sources: SignalSources {
                root: t.path().to_path_buf(),
                nodefs: t.path().join("none"),
                imagefs: t.path().join("none"),
            },
            config,
            pods: Arc::new(Pods((0..7).map(pod).collect())),
            evictor,
            cri: None,
            stats: Arc::new(EvictionStats::default()),
            metrics: Some(metrics),
            facts: None,
            events: None,
            node_status: None,
            report: None,
            reclaim: None,
            node_name: None,
        };
        (t, l)
    }

    #[tokio::test]
    async fn refusals_move_on_at_most_a_few_requests_per_interval() {
        let budget = Arc::new(Budget {
            refuse: usize::MAX,
            calls: AtomicUsize::new(0),
            evicted: Mutex::new(Vec::new()),
        });
        let (_t, l) = under_pid_pressure(budget.clone());
        let state = Mutex::new(LoopState::default());
        l.iterate(&state).await;
        assert_eq!(
            budget.calls.load(Ordering::SeqCst),
            MAX_ATTEMPTS_PER_INTERVAL
        );
        l.iterate(&state).await;
        assert_eq!(
            budget.calls.load(Ordering::SeqCst),
            2 * MAX_ATTEMPTS_PER_INTERVAL,
            "one pass per interval, never a hot loop"
        );
        let m = l.metrics.as_ref().unwrap();
        assert_eq!(
            m.eviction_results("api", "pdb_refused"),
            2 * MAX_ATTEMPTS_PER_INTERVAL as u64
        );
        assert!(budget.evicted.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_refused_pod_is_skipped_for_the_next_one() {
        let budget = Arc::new(Budget {
            refuse: 1,
            calls: AtomicUsize::new(0),
            evicted: Mutex::new(Vec::new()),
        });
        let (_t, l) = under_pid_pressure(budget.clone());
        let state = Mutex::new(LoopState::default());
        l.iterate(&state).await;
        assert_eq!(budget.calls.load(Ordering::SeqCst), 2);
        assert_eq!(budget.evicted.lock().unwrap().len(), 1);
        let m = l.metrics.as_ref().unwrap();
        assert_eq!(m.eviction_results("api", "pdb_refused"), 1);
        assert_eq!(m.eviction_results("api", "evicted"), 1);
    }
}
