//! The pod directory: a watch of this node's pods (field selector `spec.nodeName=<node>`) and the
//! store the NRI handlers read the real pod specs from.
//!
//! One task owns the watch, a reflector as client-go's (tools/cache/reflector.go): it lists once
//! (at start from the API server's watch cache, `resourceVersion=0`: [`list_params`]), then watches from the list's resourceVersion with bookmarks
//! (`allowWatchBookmarks`), each watch request ended by the server after `timeoutSeconds`
//! (`[kubernetes] watch_timeout_s` to twice it, drawn per request) and resumed from the last
//! version seen (an object's or a bookmark's): a quiet node keeps one watch open, renewed every
//! few minutes, and lists again only when the server says the version is gone (410 Gone,
//! `Expired`: "too old resource version"; counted in `topolet_kube_pod_watch_relists_total`).
//! Each list and watch request is counted (`topolet_kube_pod_watch_requests_total{verb}`). The
//! client the watch uses reads with a timeout above the longest watch
//! (`crate::cluster::client::watch_client`), so an idle watch is never cut by the client. An
//! error (a failed request, a broken connection) marks the store not synced, is counted
//! (`topolet_kube_pod_watch_errors_total`) and logged (the same error at most once a minute);
//! the task then waits kube's default back-off (800 ms doubling to 30 s, jittered) and watches
//! again from the last version (`topolet_kube_pod_watch_restarts_total`): synced again as soon as
//! the server accepts it, without a relist. A relist replaces the store atomically at its end
//! (`InitDone`). Pods are converted to the core's [`Pod`] in the task by the same reader
//! `topolet plan` uses (`topolet_core::kube::pod_input`), never on the event path.
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
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};
use kube::Client;
use tokio::sync::watch;

use crate::cluster::pod_facts::{self, FactsByUid, PodFact, PodFacts};
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
    /// What the eviction loop needs of the pod (`crate::cluster::pod_facts`); only on the entry
    /// under the pod's own uid, as a list keys them.
    fact: Option<Arc<PodFact>>,
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
            fact: Some(Arc::new(pod_facts::fact(pod))),
        },
    )];
    if let Some(m) = mirror {
        out.push((
            m.clone(),
            Entry {
                pod: convert(pod, &m),
                alias: Some(uid),
                fact: None,
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

    /// Every pod's facts by its own uid, while the store is synced (the same answer as a list of
    /// the node's pods, from memory); `None` while it is not.
    pub fn facts(&self) -> Option<FactsByUid> {
        let s = self.read();
        if !s.synced {
            return None;
        }
        Some(
            s.pods
                .iter()
                .filter_map(|(uid, e)| Some((uid.clone(), PodFact::clone(e.fact.as_ref()?))))
                .collect(),
        )
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

    /// The watch was (re)connected after an error without a relist (it resumes from the last
    /// resourceVersion it saw): synced again.
    fn resumed(&self) {
        let mut s = self.write();
        if !s.synced {
            s.synced = true;
            tracing::info!(entries = s.pods.len(), "pod watch resumed");
            self.publish(&s);
        }
    }

    /// Lists the pods of `fields` into the store ([`list_params`]); the list's resourceVersion.
    async fn list(
        &self,
        api: &Api<ApiPod>,
        fields: &str,
        first: bool,
    ) -> Result<String, kube::Error> {
        self.inner.metrics.pod_watch_request("list");
        self.handle(watcher::Event::Init);
        let mut token: Option<String> = None;
        loop {
            let page = api
                .list(&list_params(fields, first, token.as_deref()))
                .await?;
            for p in page.items {
                self.handle(watcher::Event::InitApply(p));
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                self.handle(watcher::Event::InitDone);
                // The pages are parsed and dropped: their memory back to the kernel.
                let _ = tokio::task::spawn_blocking(crate::host::heap::release_freed).await;
                return Ok(page.metadata.resource_version.unwrap_or_default());
            }
        }
    }

    /// One watch request from `rv`, until the server ends it (its `timeoutSeconds`) or it
    /// fails; applies its events to the store and keeps `rv` at the last version seen
    /// (objects and bookmarks).
    async fn watch(
        &self,
        api: &Api<ApiPod>,
        fields: &str,
        timeout: u32,
        rv: &mut String,
    ) -> Result<(), Ended> {
        self.inner.metrics.pod_watch_request("watch");
        let wp = WatchParams::default().fields(fields).timeout(timeout);
        let mut stream = api.watch(&wp, rv).await.map_err(Ended::from)?.boxed();
        // The server answered: the watch lives again.
        self.resumed();
        // The server ends the request after `timeout`; a connection that dies silently is
        // noticed this much later (kube-runtime's watcher does the same).
        let idle = Duration::from_secs(u64::from(timeout)) + WATCH_MARGIN;
        loop {
            let item = match tokio::time::timeout(idle, stream.next()).await {
                Ok(Some(item)) => item,
                // Ended by the server (its timeout), or silent for longer: resume.
                Ok(None) | Err(_) => return Ok(()),
            };
            let version = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                m.resource_version.clone().filter(|v| !v.is_empty())
            };
            match item.map_err(Ended::from)? {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                    if let Some(v) = version(&p.metadata) {
                        *rv = v;
                    }
                    self.handle(watcher::Event::Apply(p));
                }
                WatchEvent::Deleted(p) => {
                    if let Some(v) = version(&p.metadata) {
                        *rv = v;
                    }
                    self.handle(watcher::Event::Delete(p));
                }
                WatchEvent::Bookmark(b) => {
                    if !b.metadata.resource_version.is_empty() {
                        *rv = b.metadata.resource_version;
                    }
                }
                WatchEvent::Error(status) => return Err(Ended::from_status(*status)),
            }
        }
    }

    /// Watches pods of `node` through `client` for ever (see the module docs). `watch_timeout`:
    /// each watch request asks the server to end it after a time drawn between this and twice
    /// this (`[kubernetes] watch_timeout_s`).
    pub async fn run(self, client: Client, node: String, watch_timeout: Duration) {
        let api: Api<ApiPod> = Api::all(client);
        let fields = format!("spec.nodeName={node}");
        let mut backoff = DefaultBackoff::default();
        let mut last_logged: Option<(String, Instant)> = None;
        // The resourceVersion to resume from; `None`: list first.
        let mut rv: Option<String> = None;
        // No list has succeeded yet in this process (the first one may be served from the watch
        // cache: `list_params`).
        let mut first = true;
        let mut seed = jitter_seed();
        loop {
            let result = match rv.as_mut() {
                None => match self.list(&api, &fields, first).await {
                    Ok(v) if !v.is_empty() => {
                        rv = Some(v);
                        first = false;
                        Ok(())
                    }
                    Ok(_) => Err(Ended::Failed(
                        "the pod list carried no resourceVersion".into(),
                    )),
                    Err(e) => Err(Ended::from(e)),
                },
                Some(v) => {
                    let timeout = jittered(watch_timeout, &mut seed);
                    self.watch(&api, &fields, timeout, v).await
                }
            };
            let error = match result {
                Ok(()) => {
                    backoff.reset();
                    continue;
                }
                Err(Ended::Gone(text)) => {
                    // The server no longer has our version: the only reason to relist.
                    tracing::info!(node = %node, reason = %text, "pod watch: the resourceVersion is gone; relisting");
                    self.inner.metrics.pod_watch_relist();
                    rv = None;
                    backoff.reset();
                    continue;
                }
                Err(Ended::Failed(text)) => text,
            };
            self.inner.metrics.pod_watch_error();
            self.disconnected();
            let due = match &last_logged {
                Some((t, at)) => *t != error || at.elapsed() >= ERROR_LOG_INTERVAL,
                None => true,
            };
            if due {
                let resume = if rv.is_some() {
                    "it resumes"
                } else {
                    "it lists"
                };
                tracing::warn!(error = %error, node = %node, "pod watch failed (check the API server and topolet's RBAC: pods list, watch); the NRI inversion decides until {resume}");
                last_logged = Some((error, Instant::now()));
            }
            let delay = backoff.next().unwrap_or(Duration::from_secs(30));
            tokio::time::sleep(delay).await;
            self.inner.metrics.pod_watch_restart();
        }
    }
}

/// How a watch request ended other than by the server's timeout.
#[derive(Debug)]
enum Ended {
    /// 410 Gone (`Expired`, "too old resource version"): relist.
    Gone(String),
    /// Anything else: resume from the last version after a back-off.
    Failed(String),
}

impl Ended {
    fn from_status(s: kube::core::Status) -> Ended {
        if s.code == 410 || s.reason == "Expired" || s.reason == "Gone" {
            Ended::Gone(s.to_string())
        } else {
            Ended::Failed(s.to_string())
        }
    }
}

impl From<kube::Error> for Ended {
    fn from(e: kube::Error) -> Ended {
        match e {
            kube::Error::Api(s) => Ended::from_status(*s),
            e => Ended::Failed(e.to_string()),
        }
    }
}

/// Pods per page of a relist (client-go's pager default).
const PAGE: u32 = 500;

/// The parameters of a list of `fields` (`token`: the previous page's continue token).
///
/// The **first list** of a process asks for `resourceVersion=0` (`resourceVersionMatch=
/// NotOlderThan`, kube's `ListParams::match_any`: "any" version, the API server's "most recent
/// available"), as client-go's reflector does for its first list (`tools/cache/reflector.go`,
/// `relistResourceVersion`: "0" until a version was seen): the API server answers it from its
/// watch cache without reading etcd and without a consistency check, which matters when a whole
/// fleet restarts at once (issue 38; docs/src/fleet.md). Such a list may be older than the newest
/// version; the watch then continues from the version it carries and delivers everything since.
/// It is not paged: the watch cache serves a `resourceVersion=0` list whole and ignores `limit`
/// (`staging/src/k8s.io/apiserver/pkg/storage/cacher`), and kube drops a `resourceVersion` of "0"
/// from a request that carries a `limit` (`kube-core` `ListParams::populate_qp`), which would
/// make it a consistent list again. One node's pods are at most the kubelet's `maxPods` (110 by
/// default).
///
/// A **relist** (the server said the watch's version is gone, 410) is a consistent list (no
/// `resourceVersion`), paged by [`PAGE`]: the store must not go back behind versions it has
/// already applied.
pub fn list_params(fields: &str, first: bool, token: Option<&str>) -> ListParams {
    let lp = ListParams::default().fields(fields);
    if first {
        return lp.match_any();
    }
    let lp = lp.limit(PAGE);
    match token {
        Some(t) => lp.continue_token(t),
        None => lp,
    }
}
/// How long after a watch's own end a silent connection is taken for dead.
pub const WATCH_MARGIN: Duration = Duration::from_secs(30);

/// A seed for the watch timeouts' jitter: differs between processes and nodes.
fn jitter_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// `base` to twice `base`, in seconds (client-go's reflector draws its watch timeout the same
/// way, minWatchTimeout × (1 + rand), so that nodes that reconnected together do not keep
/// reconnecting together); `seed` is a xorshift state.
fn jittered(base: Duration, seed: &mut u64) -> u32 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let base = base.as_secs().max(1);
    u32::try_from(base + *seed % base).unwrap_or(u32::MAX)
}

/// The eviction loop's pod facts from the pod watch's store while it is synced (no request), from
/// `fallback` (a list) while it is not: the watch's list is the only list a node under pressure
/// makes while its watch lives.
pub struct WatchedPodFacts {
    directory: PodDirectory,
    fallback: Arc<dyn PodFacts>,
}

impl WatchedPodFacts {
    pub fn new(directory: PodDirectory, fallback: Arc<dyn PodFacts>) -> WatchedPodFacts {
        WatchedPodFacts {
            directory,
            fallback,
        }
    }
}

#[async_trait::async_trait]
impl PodFacts for WatchedPodFacts {
    async fn node_pods(&self) -> Result<FactsByUid, String> {
        match self.directory.facts() {
            Some(facts) => Ok(facts),
            None => self.fallback.node_pods().await,
        }
    }
}

/// The pod directory on the plugin's API client (`crate::cluster::client::start`): the store for the
/// plugin and the task watching `node`'s pods.
pub fn start(
    client: kube::Client,
    node: String,
    wait: std::time::Duration,
    watch_timeout: Duration,
    metrics: Arc<Metrics>,
) -> (PodDirectory, tokio::task::JoinHandle<()>) {
    tracing::info!(node = %node, wait_ms = wait.as_millis() as u64, watch_timeout_s = watch_timeout.as_secs(), "pod watch on: admission from the pods' specs, the NRI inversion as fallback");
    let dir = PodDirectory::new(metrics);
    let task = tokio::spawn(dir.clone().run(client, node, watch_timeout));
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

    /// The request each list sends: the first from the watch cache (`resourceVersion=0`, no
    /// `limit`), a relist consistent and paged.
    #[test]
    fn the_first_list_is_served_from_the_watch_cache_and_a_relist_is_consistent() {
        let query = |lp: &ListParams| {
            let r = kube::core::Request::new("/api/v1/pods")
                .list(lp)
                .expect("a valid list");
            let uri = r.uri().to_string();
            let q = uri.split_once('?').map_or("", |(_, q)| q).to_string();
            // kube writes `?&fieldSelector=…`: the empty pair is no parameter.
            let mut pairs: Vec<String> = q
                .split('&')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            pairs.sort();
            pairs
        };
        assert_eq!(
            query(&list_params("spec.nodeName=n1", true, None)),
            [
                "fieldSelector=spec.nodeName%3Dn1",
                "resourceVersion=0",
                "resourceVersionMatch=NotOlderThan"
            ]
        );
        assert_eq!(
            query(&list_params("spec.nodeName=n1", false, None)),
            ["fieldSelector=spec.nodeName%3Dn1", "limit=500"]
        );
        assert_eq!(
            query(&list_params("spec.nodeName=n1", false, Some("tok"))),
            [
                "continue=tok",
                "fieldSelector=spec.nodeName%3Dn1",
                "limit=500"
            ]
        );
    }

    #[test]
    fn only_a_gone_version_relists() {
        let status = |code: u16, reason: &str| kube::core::Status {
            code,
            reason: reason.into(),
            message: "m".into(),
            ..Default::default()
        };
        assert!(matches!(
            Ended::from_status(status(410, "Expired")),
            Ended::Gone(_)
        ));
        assert!(matches!(
            Ended::from_status(status(410, "Gone")),
            Ended::Gone(_)
        ));
        for (code, reason) in [
            (500, "InternalError"),
            (403, "Forbidden"),
            (429, "TooManyRequests"),
        ] {
            assert!(matches!(
                Ended::from_status(status(code, reason)),
                Ended::Failed(_)
            ));
        }
        let e = kube::Error::Api(Box::new(status(410, "Expired")));
        assert!(matches!(Ended::from(e), Ended::Gone(_)));
    }

    #[test]
    fn watch_timeouts_are_spread_between_once_and_twice_the_setting() {
        let mut seed = jitter_seed();
        let base = Duration::from_secs(300);
        let drawn: Vec<u32> = (0..1000).map(|_| jittered(base, &mut seed)).collect();
        assert!(drawn.iter().all(|&t| (300..600).contains(&t)), "{drawn:?}");
        // Spread, not one value.
        let distinct: HashSet<u32> = drawn.iter().copied().collect();
        assert!(distinct.len() > 100, "{}", distinct.len());
    }

    /// A list that counts its calls.
    struct CountingList(std::sync::atomic::AtomicUsize);

    #[async_trait::async_trait]
    impl PodFacts for CountingList {
        async fn node_pods(&self) -> Result<FactsByUid, String> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(FactsByUid::from([(
                "listed".to_string(),
                PodFact::default(),
            )]))
        }
    }

    #[tokio::test]
    async fn pod_facts_come_from_the_synced_store_and_from_a_list_only_while_it_is_not() {
        let (d, _) = dir();
        let list = Arc::new(CountingList(Default::default()));
        let facts = WatchedPodFacts::new(d.clone(), list.clone());
        let calls = || list.0.load(std::sync::atomic::Ordering::SeqCst);
        // Not synced yet: the list answers.
        assert!(facts
            .node_pods()
            .await
            .expect("list")
            .contains_key("listed"));
        assert_eq!(calls(), 1);
        d.handle(watcher::Event::Init);
        d.handle(watcher::Event::InitApply(api_pod("u1", "p1", "1", None)));
        // A mirror pod: its facts under its own uid only, as a list keys them.
        d.handle(watcher::Event::InitApply(api_pod(
            "m1",
            "static-x",
            "1",
            Some("s1"),
        )));
        d.handle(watcher::Event::InitDone);
        let got = facts.node_pods().await.expect("store");
        assert_eq!(calls(), 1, "no list while the store is synced");
        let mut uids: Vec<_> = got.keys().cloned().collect();
        uids.sort();
        assert_eq!(uids, ["m1", "u1"]);
        assert_eq!(got["u1"], pod_facts::fact(&api_pod("u1", "p1", "1", None)));
        assert!(got["m1"].static_or_mirror);
        // A deletion leaves the facts at once.
        d.handle(watcher::Event::Delete(api_pod("u1", "p1", "1", None)));
        assert!(!facts.node_pods().await.expect("store").contains_key("u1"));
        // The watch lost the API server: the list again.
        d.disconnected();
        assert!(facts
            .node_pods()
            .await
            .expect("list")
            .contains_key("listed"));
        assert_eq!(calls(), 2);
    }

    #[test]
    fn a_resumed_watch_is_synced_again_without_a_relist() {
        let (d, _) = dir();
        d.handle(watcher::Event::Init);
        d.handle(watcher::Event::InitApply(api_pod("u1", "p1", "1", None)));
        d.handle(watcher::Event::InitDone);
        d.disconnected();
        assert_eq!(d.get("u1"), Lookup::NotSynced);
        d.resumed();
        assert_eq!(cpu(&d.get("u1")), Some(1000), "the store kept its pods");
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
