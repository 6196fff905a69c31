//! The pod directory: a watch of this node's pods (field selector `spec.nodeName=<node>`) and the
//! store the NRI handlers read the real pod specs from.
//!
//! One task owns the watch (kube's `watcher`: list, then watch; a watch the server ends is
//! resumed by kube). An error marks the store not synced, is counted
//! (`topolet_kube_pod_watch_errors_total`) and logged (the same error at most once a minute);
//! the task then waits kube's default back-off (800 ms doubling to 30 s, jittered) and starts a
//! new watcher, whose relist replaces the store atomically at its end (`InitDone`), counted in
//! `topolet_kube_pod_watch_restarts_total`. Pods are converted to the core's [`Pod`] in the task
//! by the same reader `topolet plan` uses (`topolet_core::kube::pod_input`), never on the event path.
//!
//! Reads are a short read-lock on a map ([`PodDirectory::get`]). [`PodDirectory::get_or_wait`]
//! may wait, bounded by `[kubernetes] pod_wait_ms`, for a pod of a synced watch that has not
//! been delivered yet (the kubelet can be faster than our watch): at most once per pod, never
//! while the store is not synced, and never holding anything but a watch channel.
//!
//! Keys: the pod uid; a mirror pod is also stored under its static pod's uid (the value of its
//! `kubernetes.io/config.mirror` annotation, the uid the runtime's sandbox carries), with that
//! uid, so a static pod is known once the kubelet has mirrored it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::api::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};
use kube::Client;
use tokio::sync::watch;

use crate::telemetry::metrics::Metrics;
use topolet_core::kube::pod::Pod;
use topolet_core::kube::pod_input;

use topolet_core::kube::pod::CONFIG_MIRROR_ANNOTATION as MIRROR_ANNOTATION;
/// Remembered pods whose wait timed out (each waits once); cleared at every relist.
const MISSED_MAX: usize = 4096;
/// The same watch error is logged at most this often (every one is counted).
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// What the store says about a pod uid.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The pod's spec (uid the one asked for).
    Found(Arc<Pod>),
    /// The pod is there but its spec could not be read: why.
    Invalid(String),
    /// The watch has not listed yet, or lost the API server since.
    NotSynced,
    /// A synced store without the pod.
    NotFound,
}

#[derive(Debug, Clone)]
struct Entry {
    pod: Result<Arc<Pod>, String>,
    /// The other uid this entry is also stored under (mirror ↔ static).
    alias: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    synced: bool,
    pods: HashMap<String, Entry>,
    /// The relist in progress (between `Init` and `InitDone`).
    relist: Option<HashMap<String, Entry>>,
    missed: HashSet<String>,
}

#[derive(Debug)]
struct Inner {
    state: RwLock<State>,
    /// Bumped at every change of the store: what a bounded wait waits on.
    changed: watch::Sender<u64>,
    metrics: Arc<Metrics>,
}

/// The store, shared by the watch task and the NRI handlers.
#[derive(Debug, Clone)]
pub struct PodDirectory {
    inner: Arc<Inner>,
}

/// The core's pod for an API pod, under `uid` (its own, or its static pod's).
fn convert(pod: &ApiPod, uid: &str) -> Result<Arc<Pod>, String> {
    let value = serde_json::to_value(pod).map_err(|e| e.to_string())?;
    let mut p = pod_input::pod_from_value(&value).map_err(|e| e.to_string())?;
    p.uid = uid.to_string();
    Ok(Arc::new(p))
}

/// The store entries of `pod`: under its uid, and under its static pod's uid if it is a mirror.
fn entries(pod: &ApiPod) -> Vec<(String, Entry)> {
    let Some(uid) = pod.metadata.uid.clone() else {
        return Vec::new();
    };
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .filter(|m| !m.is_empty() && **m != uid)
        .cloned();
    let mut out = vec![(
        uid.clone(),
        Entry {
            pod: convert(pod, &uid),
            alias: mirror.clone(),
        },
    )];
    if let Some(m) = mirror {
        out.push((
            m.clone(),
            Entry {
                pod: convert(pod, &m),
                alias: Some(uid),
            },
        ));
    }
    out
}

fn insert(map: &mut HashMap<String, Entry>, pod: &ApiPod) {
    for (k, e) in entries(pod) {
        map.insert(k, e);
    }
}

fn remove(map: &mut HashMap<String, Entry>, pod: &ApiPod) {
    let Some(uid) = pod.metadata.uid.as_deref() else {
        return;
    };
    if let Some(e) = map.remove(uid) {
        if let Some(a) = e.alias {
            map.remove(&a);
        }
    }
}

impl PodDirectory {
    pub fn new(metrics: Arc<Metrics>) -> PodDirectory {
        let (changed, _) = watch::channel(0);
        PodDirectory {
            inner: Arc::new(Inner {
                state: RwLock::new(State::default()),
                changed,
                metrics,
            }),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // Plain maps, consistent between statements: a poisoned lock is still usable.
        self.inner.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.inner.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// True once the watch has listed, until it loses the API server.
    pub fn synced(&self) -> bool {
        self.read().synced
    }

    /// What the store holds for pod `uid` now (never waits).
    pub fn get(&self, uid: &str) -> Lookup {
        let s = self.read();
        if !s.synced {
            return Lookup::NotSynced;
        }
        match s.pods.get(uid).map(|e| &e.pod) {
            Some(Ok(p)) => Lookup::Found(p.clone()),
            Some(Err(e)) => Lookup::Invalid(e.clone()),
            None => Lookup::NotFound,
        }
    }

    /// [`PodDirectory::get`], waiting up to `bound` for a pod a synced store does not hold yet,
    /// once per pod (a pod whose wait timed out is not waited for again until the next relist).
    pub async fn get_or_wait(&self, uid: &str, bound: Duration) -> Lookup {
        // Subscribed before the first look, so that a change between the two is not missed.
        let mut rx = self.inner.changed.subscribe();
        let first = self.get(uid);
        if first != Lookup::NotFound || bound.is_zero() || self.read().missed.contains(uid) {
            return first;
        }
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => match self.get(uid) {
                    Lookup::NotFound => continue,
                    found => {
                        self.inner.metrics.pod_wait("found");
                        return found;
                    }
                },
                // Timed out, or the watch task is gone.
                _ => {
                    self.inner.metrics.pod_wait("timeout");
                    let mut s = self.write();
                    if s.missed.len() < MISSED_MAX {
                        s.missed.insert(uid.to_string());
                    }
                    return Lookup::NotFound;
                }
            }
        }
    }

    /// Applies one watch event to the store.
    pub fn handle(&self, event: watcher::Event<ApiPod>) {
        let mut s = self.write();
        match event {
            watcher::Event::Init => s.relist = Some(HashMap::new()),
            watcher::Event::InitApply(p) => {
                if let Some(r) = s.relist.as_mut() {
                    insert(r, &p);
                }
            }
            watcher::Event::InitDone => {
                if let Some(r) = s.relist.take() {
                    s.pods = r;
                }
                s.synced = true;
                s.missed.clear();
                let n = s.pods.len();
                tracing::info!(entries = n, "pod watch synced");
            }
            watcher::Event::Apply(p) => {
                s.missed.remove(p.metadata.uid.as_deref().unwrap_or(""));
                insert(&mut s.pods, &p);
            }
            watcher::Event::Delete(p) => remove(&mut s.pods, &p),
        }
        self.publish(&s);
    }

    /// The watch lost the API server: not synced until the next relist.
    pub fn disconnected(&self) {
        let mut s = self.write();
        s.synced = false;
        s.relist = None;
        self.publish(&s);
    }

    fn publish(&self, s: &State) {
        self.inner.metrics.set_pod_store(s.synced, s.pods.len());
        self.inner.changed.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Watches pods of `node` through `client` for ever (see the module docs).
    pub async fn run(self, client: Client, node: String) {
        let api: Api<ApiPod> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let mut backoff = DefaultBackoff::default();
        let mut last_logged: Option<(String, Instant)> = None;
        loop {
            let mut stream = watcher::watcher(api.clone(), config.clone()).boxed();
            while let Some(item) = stream.next().await {
                match item {
                    Ok(event) => {
                        if matches!(event, watcher::Event::InitDone) {
                            backoff.reset();
                        }
                        self.handle(event);
                    }
                    Err(e) => {
                        self.inner.metrics.pod_watch_error();
                        self.disconnected();
                        let text = e.to_string();
                        let due = match &last_logged {
                            Some((t, at)) => *t != text || at.elapsed() >= ERROR_LOG_INTERVAL,
                            None => true,
                        };
                        if due {
                            tracing::warn!(error = %text, node = %node, "pod watch failed (check the API server and topolet's RBAC: pods list, watch); the NRI inversion decides until it relists");
                            last_logged = Some((text, Instant::now()));
                        }
                        break;
                    }
                }
            }
            let delay = backoff.next().unwrap_or(Duration::from_secs(30));
            tokio::time::sleep(delay).await;
            self.inner.metrics.pod_watch_restart();
        }
    }
}

/// The pod directory on the plugin's API client (`crate::cluster::client::start`): the store for the
/// plugin and the task watching `node`'s pods.
pub fn start(
    client: kube::Client,
    node: String,
    wait: std::time::Duration,
    metrics: Arc<Metrics>,
) -> (PodDirectory, tokio::task::JoinHandle<()>) {
    tracing::info!(node = %node, wait_ms = wait.as_millis() as u64, "pod watch on: admission from the pods' specs, the NRI inversion as fallback");
    let dir = PodDirectory::new(metrics);
    let task = tokio::spawn(dir.clone().run(client, node));
    (dir, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn api_pod(uid: &str, name: &str, cpu: &str, mirror: Option<&str>) -> ApiPod {
        let mut annotations = serde_json::Map::new();
        if let Some(m) = mirror {
            annotations.insert(MIRROR_ANNOTATION.into(), json!(m));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": uid, "annotations": annotations},
            "spec": {"nodeName": "n", "containers": [{"name": "app",
                "resources": {"limits": {"cpu": cpu, "memory": "64Mi"}}}]}
        }))
        .unwrap()
    }

    fn dir() -> (PodDirectory, Arc<Metrics>) {
        let m = Arc::new(Metrics::new());
        (PodDirectory::new(m.clone()), m)
    }

    fn cpu(l: &Lookup) -> Option<u64> {
        match l {
            Lookup::Found(p) => p.containers[0].requests.cpu_millis,
            _ => None,
        }
    }

    #[test]
    fn a_relist_replaces_the_store_at_its_end() {
        let (d, _) = dir();
        assert_eq!(d.get("u1"), Lookup::NotSynced);
        d.handle(watcher::Event::Init);
        d.handle(watcher::Event::InitApply(api_pod("u1", "a", "2", None)));
        assert_eq!(d.get("u1"), Lookup::NotSynced, "not before InitDone");
        d.handle(watcher::Event::InitDone);
        assert_eq!(cpu(&d.get("u1")), Some(2000), "limits default the requests");
        d.handle(watcher::Event::Apply(api_pod("u2", "b", "1", None)));
        assert_eq!(cpu(&d.get("u2")), Some(1000));
        d.disconnected();
        assert_eq!(d.get("u1"), Lookup::NotSynced);
        // The relist after the outage: u1 is gone, u3 new.
        d.handle(watcher::Event::Init);
        d.handle(watcher::Event::InitApply(api_pod("u3", "c", "1", None)));
        d.handle(watcher::Event::InitApply(api_pod("u2", "b", "1", None)));
        d.handle(watcher::Event::InitDone);
        assert_eq!(d.get("u1"), Lookup::NotFound);
        assert!(matches!(d.get("u3"), Lookup::Found(_)));
        d.handle(watcher::Event::Delete(api_pod("u3", "c", "1", None)));
        assert_eq!(d.get("u3"), Lookup::NotFound);
    }

    #[test]
    fn a_mirror_pod_stands_for_its_static_pod() {
        let (d, _) = dir();
        d.handle(watcher::Event::Init);
        d.handle(watcher::Event::InitDone);
        d.handle(watcher::Event::Apply(api_pod(
            "m1",
            "s-n",
            "1",
            Some("static1"),
        )));
        match d.get("static1") {
            Lookup::Found(p) => {
                assert_eq!(p.uid, "static1", "under the runtime's uid");
                assert!(p.static_or_mirror, "mirror pods are critical");
            }
            other => panic!("{other:?}"),
        }
        d.handle(watcher::Event::Delete(api_pod(
            "m1",
            "s-n",
            "1",
            Some("static1"),
        )));
        assert_eq!(d.get("static1"), Lookup::NotFound);
    }

    #[test]
    fn an_unreadable_spec_is_reported_not_dropped() {
        let (d, _) = dir();
        d.handle(watcher::Event::Init);
        d.handle(watcher::Event::InitApply(api_pod("u1", "a", "lots", None)));
        d.handle(watcher::Event::InitDone);
        match d.get("u1") {
            Lookup::Invalid(e) => assert!(e.contains("resources.limits.cpu"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn the_wait_is_bounded_once_per_pod_and_ends_at_delivery() {
        let (d, m) = dir();
        let bound = Duration::from_millis(50);
        assert_eq!(
            d.get_or_wait("u1", bound).await,
            Lookup::NotSynced,
            "no wait unsynced"
        );
        d.handle(watcher::Event::Init);
        d.handle(watcher::Event::InitDone);
        // The delivery must end the wait, however long the test takes to make it: the waiter's
        // bound is only a guard (with the short one, a stall of the test past it would time the
        // wait out first, on the wall clock).
        let d2 = d.clone();
        let waiter =
            tokio::spawn(async move { d2.get_or_wait("u1", Duration::from_secs(60)).await });
        tokio::task::yield_now().await;
        d.handle(watcher::Event::Apply(api_pod("u9", "other", "1", None)));
        d.handle(watcher::Event::Apply(api_pod("u1", "a", "1", None)));
        assert!(matches!(waiter.await.unwrap(), Lookup::Found(_)));
        assert_eq!(d.get_or_wait("u2", bound).await, Lookup::NotFound);
        assert_eq!(d.get_or_wait("u2", bound).await, Lookup::NotFound);
        let text = m.render(&Default::default());
        assert!(
            text.contains("topolet_kube_pod_waits_total{result=\"found\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("topolet_kube_pod_waits_total{result=\"timeout\"} 1"),
            "a missed pod waits once: {text}"
        );
    }
}
