//! A real single-node Kubernetes (etcd, kube-apiserver, kube-scheduler, kubelet) beside a
//! [`Stack`], started by `hack/kube-node.sh`, and the API as users reach it: pods created, watched,
//! resized and deleted through kube-rs, every container then found in the runtime (containerd or
//! CRI-O, whichever the stack runs) and its cgroups.
//!
//! [`KubeNode`] is the usual set-up: stack, topolet, cluster. Its fields drop in order, so the
//! kubelet stops before topolet and the runtime (a kubelet left running would restart its pods).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use serde_json::Value;

use crate::cri::Created;
use crate::fixture::WithTopolet;
use crate::paths;
use crate::stack::{Runtime, Stack};
use crate::topolet::TopoletConfig;
use crate::wait;

/// How long the API-driven waits allow (pod start, deletion, status updates). Generous: a busy CI
/// machine is slow, and these are deadlines, not assertions about speed.
pub const POD_TIMEOUT: Duration = Duration::from_secs(120);

/// How the kubelet is configured.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// `cpuManagerPolicy`: `none` (what topolet needs) or `static`.
    pub cpu_manager_policy: String,
    /// `reservedSystemCPUs` (required by the static policy).
    pub reserved_cpus: Option<String>,
    /// `topologyManagerPolicy`: `none` (what topolet needs), `best-effort`, `restricted` or
    /// `single-numa-node`.
    pub topology_manager_policy: String,
    /// The control plane runs elsewhere (`hack/kube-node.sh start-control` on the host of a QEMU
    /// guest): only the kubelet is started here, against it (`start-kubelet`).
    pub remote_control: Option<RemoteControl>,
    /// `KUBE_WITH_CONTROLLERS=1`: kube-controller-manager, ServiceAccount admission and pod
    /// volumes that reach the runtime, for installing topolet as a DaemonSet (the Helm suite).
    pub with_controllers: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            cpu_manager_policy: "none".into(),
            reserved_cpus: None,
            topology_manager_policy: "none".into(),
            remote_control: None,
            with_controllers: false,
        }
    }
}

/// A control plane started elsewhere (hack/kube-node.sh's `KUBE_CONTROL_DIR`, `KUBE_API_HOST`).
#[derive(Debug, Clone)]
pub struct RemoteControl {
    /// A copy of its DIR's `ports`, `pki/ca.crt` and `pki/tokens.csv`.
    pub dir: PathBuf,
    /// The API server's address from here.
    pub api_host: String,
}

impl RemoteControl {
    /// The one hack/guest.sh hands a guest (`TOPOLET_KUBE_CONTROL_DIR`, `TOPOLET_KUBE_API_HOST`),
    /// if it did.
    pub fn from_env() -> Option<RemoteControl> {
        let dir = std::env::var_os("TOPOLET_KUBE_CONTROL_DIR")?;
        let api_host = std::env::var("TOPOLET_KUBE_API_HOST").ok()?;
        Some(RemoteControl {
            dir: PathBuf::from(dir),
            api_host,
        })
    }
}

/// The single-node cluster.
pub struct Cluster {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
    rt: tokio::runtime::Runtime,
    client: Client,
    node: String,
    cgroup_root: String,
    runtime: Runtime,
    stopped: bool,
}

/// A container of a pod, found through the API and in the runtime.
#[derive(Debug, Clone)]
pub struct KubeContainer {
    /// The runtime's container id (from `containerStatuses[].containerID`, without its
    /// `containerd://` or `cri-o://` scheme).
    pub id: String,
    /// The pod cgroup, as the kubelet names it: `<cgroupRoot>/kubepods[/burstable|/besteffort]/pod<uid>`.
    pub cgroup_parent: String,
}

impl KubeContainer {
    /// As a [`Created`], for the `observe` readers.
    pub fn created(&self) -> Created {
        Created {
            id: self.id.clone(),
            pod_id: String::new(),
            cgroup_parent: self.cgroup_parent.clone(),
            create_time: Duration::ZERO,
        }
    }
}

fn script() -> PathBuf {
    paths::repo_root().join("hack/kube-node.sh")
}

impl Cluster {
    /// Starts the control plane and a kubelet driving `stack`'s runtime (its CRI socket:
    /// containerd's or CRI-O's); returns when the node is Ready and the API answers this client.
    pub fn start(stack: &Stack, opts: &ClusterOptions) -> anyhow::Result<Cluster> {
        let dir = paths::scratch_dir("k")?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building a tokio runtime for the kube client")?;
        let mut cmd = Command::new(script());
        let action = if opts.remote_control.is_some() {
            "start-kubelet"
        } else {
            "start"
        };
        cmd.arg(action)
            .arg(dir.path())
            .env("KUBE_RUNTIME_DIR", stack.dir())
            .env("KUBE_CPU_MANAGER_POLICY", &opts.cpu_manager_policy)
            .env(
                "KUBE_TOPOLOGY_MANAGER_POLICY",
                &opts.topology_manager_policy,
            );
        if let Some(rc) = &opts.remote_control {
            cmd.env("KUBE_CONTROL_DIR", &rc.dir)
                .env("KUBE_API_HOST", &rc.api_host);
        }
        if let Some(r) = &opts.reserved_cpus {
            cmd.env("KUBE_RESERVED_CPUS", r);
        }
        if opts.with_controllers {
            cmd.env("KUBE_WITH_CONTROLLERS", "1");
        }
        let started = Instant::now();
        // Whatever part of the start succeeded is stopped if the rest fails.
        let guard = StopOnDrop(dir.path().to_path_buf());
        run_script(cmd, action, dir.path())?;
        std::mem::forget(guard);
        eprintln!("[cluster] node Ready in {:.1?}", started.elapsed());
        let env = read_env(&dir.path().join("env"))?;
        let kubeconfig = PathBuf::from(get(&env, "KUBECONFIG")?);
        let client = rt.block_on(client_from(&kubeconfig, None))?;
        let node = get(&env, "KUBE_NODE_NAME")?.to_string();
        let cgroup_root = get(&env, "KUBE_CGROUP_ROOT")?.to_string();
        let runtime = stack.runtime();
        if get(&env, "KUBE_RUNTIME")? != runtime.name() {
            bail!(
                "hack/kube-node.sh drives {:?}, the stack runs {}",
                get(&env, "KUBE_RUNTIME")?,
                runtime.name()
            );
        }
        Ok(Cluster {
            dir,
            env,
            rt,
            client,
            node,
            cgroup_root,
            runtime,
            stopped: false,
        })
    }

    fn sh(&self, action: &str) -> anyhow::Result<()> {
        let mut cmd = Command::new(script());
        cmd.arg(action).arg(self.dir.path());
        run_script(cmd, action, self.dir.path())
    }

    /// Stops the kubelet and starts it again (pods keep running); returns when the node is Ready.
    pub fn restart_kubelet(&self) -> anyhow::Result<()> {
        self.sh("restart-kubelet")
    }

    /// Stops kube-apiserver (an API outage).
    pub fn stop_apiserver(&self) -> anyhow::Result<()> {
        self.sh("stop-apiserver")
    }

    /// Starts kube-apiserver again; returns when it is ready.
    pub fn start_apiserver(&self) -> anyhow::Result<()> {
        self.sh("start-apiserver")
    }

    /// Copies the components' logs to `<target>/it-logs/<dir>` (done on drop unless stopped
    /// before).
    pub fn keep_logs(&self) {
        keep_logs(self.dir.path());
    }

    /// Stops every component. Also done on drop.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        self.sh("stop")
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// The kubelet's `cgroupRoot` (the stack's cgroup base).
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }

    /// The runtime the kubelet drives.
    pub fn runtime(&self) -> Runtime {
        self.runtime
    }

    /// A variable of `DIR/env` (hack/kube-node.sh).
    pub fn env(&self, key: &str) -> anyhow::Result<&str> {
        get(&self.env, key)
    }

    /// Every TCP port the cluster's components listen on (hack/kube-node.sh's DIR/ports).
    pub fn ports(&self) -> anyhow::Result<Vec<u16>> {
        let p = self.dir().join("ports");
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| {
                v.trim()
                    .parse()
                    .with_context(|| format!("{}: {k}={v:?} is not a port", p.display()))
            })
            .collect()
    }

    /// The kubelet's `staticPodPath` (hack/kube-node.sh's DIR/manifests).
    pub fn static_pod_dir(&self) -> PathBuf {
        self.dir().join("manifests")
    }

    /// The kubelet's PodResources socket (under its `--root-dir`, `DIR/kubelet`).
    pub fn pod_resources_socket(&self) -> PathBuf {
        self.dir().join("kubelet/pod-resources/kubelet.sock")
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `kubectl ARGS` as the admin; returns stdout, fails with stderr.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(paths::repo_root().join(".deps/bin/kubectl"))
            .args(args)
            .env("KUBECONFIG", self.env("KUBECONFIG")?)
            .env("KUBECACHEDIR", self.env("KUBECACHEDIR")?)
            .output()
            .with_context(|| format!("running kubectl {}", args.join(" ")))?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs a future of the kube client to completion.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The admin client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Pods of the `default` namespace.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client(), "default")
    }

    /// The node object.
    pub fn node(&self) -> anyhow::Result<Node> {
        let api: Api<Node> = Api::all(self.client());
        self.block_on(api.get(&self.node))
            .with_context(|| format!("getting node {}", self.node))
    }

    /// Extended resource `name` on the Node: its capacity, and whether allocatable holds the
    /// same (the kubelet copies capacity to allocatable at its next status update); `None`
    /// while capacity has none.
    pub fn extended_resource(&self, name: &str) -> anyhow::Result<Option<NodeAmount>> {
        let status = self.node()?.status.unwrap_or_default();
        let get = |m: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| { m.and_then(|m| m.get(name)).map(|q| q.0.clone()) };
        let Some(capacity) = get(status.capacity.as_ref()) else {
            return Ok(None);
        };
        let agrees = get(status.allocatable.as_ref()).as_deref() == Some(capacity.as_str());
        let capacity = capacity
            .parse()
            .with_context(|| format!("capacity {name} = {capacity:?}"))?;
        Ok(Some(NodeAmount {
            capacity,
            allocatable_agrees: agrees,
        }))
    }

    /// Creates a pod from a manifest (JSON); `spec.nodeName` is left to the scheduler.
    pub fn create_pod(&self, manifest: Value) -> anyhow::Result<Pod> {
        let pod: Pod = serde_json::from_value(manifest).context("a test manifest is not a Pod")?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.block_on(self.pods().create(&PostParams::default(), &pod))
            .with_context(|| format!("creating pod {name}"))
    }

    /// Gets a pod.
    pub fn get_pod(&self, name: &str) -> anyhow::Result<Pod> {
        self.block_on(self.pods().get(name))
            .with_context(|| format!("getting pod {name}"))
    }

    /// Polls pod `name` until `done` holds; returns it.
    pub fn wait_pod(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&Pod) -> bool,
    ) -> anyhow::Result<Pod> {
        wait::until(&format!("pod {name}: {what}"), POD_TIMEOUT, || {
            let pod = self.get_pod(name)?;
            Ok(done(&pod).then_some(pod))
        })
        .with_context(|| self.pod_summary(name))
    }

    /// Waits until every container of pod `name` runs and is ready.
    pub fn wait_running(&self, name: &str) -> anyhow::Result<Pod> {
        self.wait_pod(name, "all containers running and ready", all_ready)
    }

    /// One line on a pod's state for error messages: phase, conditions, container states.
    pub fn pod_summary(&self, name: &str) -> String {
        match self.get_pod(name) {
            Ok(p) => {
                let st = p.status.unwrap_or_default();
                let conds: Vec<String> = st
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .map(|c| {
                        format!(
                            "{}={} {} {}",
                            c.type_,
                            c.status,
                            c.reason.clone().unwrap_or_default(),
                            c.message.clone().unwrap_or_default()
                        )
                    })
                    .collect();
                let ctrs: Vec<String> = st
                    .container_statuses
                    .unwrap_or_default()
                    .iter()
                    .map(|c| format!("{}: {:?}", c.name, c.state))
                    .collect();
                format!(
                    "pod {name}: phase {:?}; conditions [{}]; containers [{}]",
                    st.phase,
                    conds.join("; "),
                    ctrs.join("; ")
                )
            }
            Err(e) => format!("pod {name}: {e:#}"),
        }
    }

    /// Deletes pod `name` and waits until it is gone from the API (the kubelet has killed its
    /// containers and confirmed).
    pub fn delete_pod(&self, name: &str) -> anyhow::Result<()> {
        self.block_on(self.pods().delete(name, &DeleteParams::default()))
            .with_context(|| format!("deleting pod {name}"))?;
        wait::until_true(&format!("pod {name} gone"), POD_TIMEOUT, || {
            match self.block_on(self.pods().get_opt(name)) {
                Ok(p) => Ok(p.is_none()),
                Err(e) => Err(anyhow::Error::new(e).context(format!("getting pod {name}"))),
            }
        })
    }

    /// Patches the `resize` subresource (in-place resize) with a strategic merge patch.
    pub fn resize(&self, name: &str, patch: Value) -> anyhow::Result<Pod> {
        self.block_on(self.pods().patch_subresource(
            "resize",
            name,
            &PatchParams::default(),
            &Patch::Strategic(patch),
        ))
        .with_context(|| format!("resizing pod {name}"))
    }

    /// Events whose involved object is pod `name`, oldest first.
    pub fn pod_events(&self, name: &str) -> anyhow::Result<Vec<Event>> {
        let api: Api<Event> = Api::namespaced(self.client(), "default");
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        let mut events = self
            .block_on(api.list(&lp))
            .with_context(|| format!("listing events of pod {name}"))?
            .items;
        events.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        Ok(events)
    }

    /// A client with the credentials of kubeconfig `path`; `impersonate`: (user, groups) to act
    /// as (the admin may impersonate anyone).
    pub fn client_for(
        &self,
        path: &Path,
        impersonate: Option<(&str, &[&str])>,
    ) -> anyhow::Result<Client> {
        self.block_on(client_from(path, impersonate))
    }

    /// What `client`'s user may do in namespace `ns` (SelfSubjectRulesReview, as the API
    /// server's authorizer answers): every (apiGroup, resource, verb) of its resource rules.
    pub fn resource_rules(
        &self,
        client: Client,
        ns: &str,
    ) -> anyhow::Result<BTreeSet<(String, String, String)>> {
        use k8s_openapi::api::authorization::v1::{
            SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
        };
        let api: Api<SelfSubjectRulesReview> = Api::all(client);
        let review = SelfSubjectRulesReview {
            spec: SelfSubjectRulesReviewSpec {
                namespace: Some(ns.to_string()),
            },
            ..Default::default()
        };
        let answer = self
            .block_on(api.create(&PostParams::default(), &review))
            .context("creating a SelfSubjectRulesReview")?;
        let status = answer
            .status
            .context("SelfSubjectRulesReview without status")?;
        if status.incomplete {
            bail!(
                "the rules review is incomplete: {}",
                status.evaluation_error.unwrap_or_default()
            );
        }
        let mut out = BTreeSet::new();
        for r in status.resource_rules {
            for g in r.api_groups.unwrap_or_default() {
                for res in r.resources.clone().unwrap_or_default() {
                    for v in &r.verbs {
                        out.insert((g.clone(), res.clone(), v.clone()));
                    }
                }
            }
        }
        Ok(out)
    }

    /// The NodeResourceTopology object named `name` (as JSON), if there is one.
    pub fn nrt(&self, name: &str) -> anyhow::Result<Option<Value>> {
        let api: Api<DynamicObject> = Api::all_with(self.client(), &nrt_resource());
        let obj = self
            .block_on(api.get_opt(name))
            .with_context(|| format!("getting NodeResourceTopology {name}"))?;
        obj.map(|o| serde_json::to_value(o).context("NodeResourceTopology as JSON"))
            .transpose()
    }

    /// Creates NodeResourceTopology `manifest` as the admin (to probe the CRD's schema).
    pub fn create_nrt(&self, manifest: Value) -> Result<(), kube::Error> {
        let obj: DynamicObject =
            serde_json::from_value(manifest).map_err(kube::Error::SerdeError)?;
        let api: Api<DynamicObject> = Api::all_with(self.client(), &nrt_resource());
        self.block_on(api.create(&PostParams::default(), &obj))
            .map(|_| ())
    }

    /// Deletes NodeResourceTopology `name` as the admin.
    pub fn delete_nrt(&self, name: &str) -> anyhow::Result<()> {
        let api: Api<DynamicObject> = Api::all_with(self.client(), &nrt_resource());
        self.block_on(api.delete(name, &DeleteParams::default()))
            .with_context(|| format!("deleting NodeResourceTopology {name}"))?;
        Ok(())
    }

    /// Events whose involved object is this cluster's Node, oldest first.
    pub fn node_events(&self) -> anyhow::Result<Vec<Event>> {
        let api: Api<Event> = Api::namespaced(self.client(), "default");
        let lp = ListParams::default().fields(&format!(
            "involvedObject.kind=Node,involvedObject.name={}",
            self.node
        ));
        let mut events = self
            .block_on(api.list(&lp))
            .context("listing the Node's events")?
            .items;
        events.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        Ok(events)
    }

    /// Container `cname` of `pod` (it must have been created: it has a containerID).
    pub fn container(&self, pod: &Pod, cname: &str) -> anyhow::Result<KubeContainer> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().context("pod without uid")?;
        let status = pod.status.clone().unwrap_or_default();
        let qos = status
            .qos_class
            .clone()
            .with_context(|| format!("pod {name} has no status.qosClass"))?;
        let all = status
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .chain(status.init_container_statuses.unwrap_or_default());
        let cs = all
            .into_iter()
            .find(|c| c.name == cname)
            .with_context(|| format!("pod {name} has no status for container {cname}"))?;
        let cid = cs
            .container_id
            .with_context(|| format!("container {cname} of pod {name} has no containerID yet"))?;
        // The kubelet writes `<runtime name>://<id>` (pkg/kubelet/kuberuntime:
        // `ContainerID{Type: m.runtimeName, ..}`, the name the runtime's CRI Version call
        // answers): `containerd`, or `cri-o`.
        let scheme = format!("{}://", self.runtime.name());
        let id = cid
            .strip_prefix(&scheme)
            .with_context(|| format!("containerID {cid:?} is not {scheme}…"))?
            .to_string();
        Ok(KubeContainer {
            id,
            cgroup_parent: kubelet_pod_cgroup(&self.cgroup_root, &qos, &uid)?,
        })
    }
}

/// An extended resource's amount on the Node ([`Cluster::extended_resource`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAmount {
    pub capacity: u64,
    pub allocatable_agrees: bool,
}

/// A one-container test pod as the kubelet suite makes them: host network (the node's only
/// network is loopback), no service-account token (no controller-manager issues them), the
/// local busybox image, `sh` exiting at once on SIGTERM. `resources`: the container's
/// `resources` object (may be empty).
pub fn one_container_pod(name: &str, resources: Value) -> Value {
    use crate::manifests::{pod, script_ctr, UNTIL_TERM};
    pod(
        name,
        vec![script_ctr("main", UNTIL_TERM, resources)],
        vec![],
    )
}

/// The NodeResourceTopology CRD (topology.node.k8s.io/v1alpha2, cluster-scoped).
pub fn nrt_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("topology.node.k8s.io", "v1alpha2", "NodeResourceTopology"),
        "noderesourcetopologies",
    )
}

/// The versions a [`Watched`] saw: arrival time and the reduced object (`None`: deleted).
pub type Seen<T> = Vec<(Instant, Option<T>)>;

/// Every version of one watched object the API server reported since [`Cluster::watch`] started,
/// each reduced by the caller's function and stamped when it arrived; `None` marks its deletion.
/// The watch runs on a thread of its own (its own runtime and client) until dropped.
pub struct Watched<T> {
    log: std::sync::Arc<std::sync::Mutex<Seen<T>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<T: Clone> Watched<T> {
    /// What was seen so far, oldest first.
    pub fn seen(&self) -> Vec<(Instant, Option<T>)> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until the seen versions satisfy `done`; returns them.
    pub fn wait(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[(Instant, Option<T>)]) -> bool,
    ) -> anyhow::Result<Vec<(Instant, Option<T>)>> {
        wait::until(what, timeout, || {
            let seen = self.seen();
            Ok(done(&seen).then_some(seen))
        })
    }

    /// When the object was deleted, if it was.
    pub fn deleted_at(&self) -> Option<Instant> {
        self.seen()
            .iter()
            .find(|(_, v)| v.is_none())
            .map(|(at, _)| *at)
    }
}

impl<T> Drop for Watched<T> {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Cluster {
    /// Watches the objects of `make(client)` matching `fields` (a field selector such as
    /// `metadata.name=hog`) as the admin, recording `reduce` of every version.
    pub fn watch<K, T>(
        &self,
        make: impl FnOnce(Client) -> Api<K> + Send + 'static,
        fields: &str,
        reduce: impl Fn(&K) -> T + Send + 'static,
    ) -> anyhow::Result<Watched<T>>
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + k8s_openapi::serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
        T: Send + 'static,
    {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let kubeconfig = PathBuf::from(self.env("KUBECONFIG")?);
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
        let selector = fields.to_string();
        let sink = log.clone();
        let thread = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.into()));
                    return;
                }
            };
            rt.block_on(async move {
                let client = match client_from(&kubeconfig, None).await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let api = make(client);
                let mut stream =
                    watcher::watcher(api, watcher::Config::default().fields(&selector)).boxed();
                let push = |v: Option<T>| {
                    sink.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((Instant::now(), v))
                };
                let mut ready = Some(ready_tx);
                loop {
                    tokio::select! {
                        _ = &mut stopped => return,
                        ev = stream.next() => match ev {
                            None => return,
                            Some(Ok(watcher::Event::Apply(k) | watcher::Event::InitApply(k))) => push(Some(reduce(&k))),
                            Some(Ok(watcher::Event::Delete(k))) => {
                                push(Some(reduce(&k)));
                                push(None);
                            }
                            Some(Ok(watcher::Event::InitDone)) => {
                                if let Some(r) = ready.take() {
                                    let _ = r.send(Ok(()));
                                }
                            }
                            Some(Ok(watcher::Event::Init)) => {}
                            // The watcher retries by itself (with back-off).
                            Some(Err(_)) => {}
                        }
                    }
                }
            });
        });
        let watched = Watched {
            log,
            stop: Some(stop),
            thread: Some(thread),
        };
        match ready_rx.recv_timeout(POD_TIMEOUT) {
            Ok(Ok(())) => Ok(watched),
            Ok(Err(e)) => Err(e.context(format!("starting a watch ({fields})"))),
            Err(_) => bail!("the watch ({fields}) did not list within {POD_TIMEOUT:?}"),
        }
    }
}

/// The kubelet's pod cgroup name (cgroupfs driver, cgroupsPerQOS): `pod_container_manager_linux.go`
/// puts Guaranteed pods directly under `kubepods`, the others under their class's directory.
pub fn kubelet_pod_cgroup(root: &str, qos_class: &str, uid: &str) -> anyhow::Result<String> {
    let class = match qos_class {
        "Guaranteed" => "",
        "Burstable" => "/burstable",
        "BestEffort" => "/besteffort",
        other => bail!("unknown QoS class {other:?}"),
    };
    Ok(format!("{root}/kubepods{class}/pod{uid}"))
}

/// Every container (and restartable init container) of the pod runs and is ready.
pub fn all_ready(pod: &Pod) -> bool {
    let Some(st) = &pod.status else { return false };
    let Some(cs) = &st.container_statuses else {
        return false;
    };
    !cs.is_empty()
        && cs
            .iter()
            .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// The waiting reason and message of container `cname`, if it waits.
pub fn waiting(pod: &Pod, cname: &str) -> Option<(String, String)> {
    let st = pod.status.as_ref()?;
    let c = st
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == cname)?;
    let w = c.state.as_ref()?.waiting.as_ref()?;
    Some((
        w.reason.clone().unwrap_or_default(),
        w.message.clone().unwrap_or_default(),
    ))
}

/// The condition `type_` of the pod: (status, reason, message).
pub fn condition(pod: &Pod, type_: &str) -> Option<(String, String, String)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

async fn client_from(
    kubeconfig: &Path,
    impersonate: Option<(&str, &[&str])>,
) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading {}", kubeconfig.display()))?;
    if let Some((user, groups)) = impersonate {
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    }
    Client::try_from(config).context("building the kube client")
}

fn run_script(cmd: Command, action: &str, dir: &Path) -> anyhow::Result<()> {
    crate::stack::run_hack_script(cmd, "cluster", "hack/kube-node.sh", action, dir)
}

fn get<'a>(env: &'a HashMap<String, String>, key: &str) -> anyhow::Result<&'a str> {
    env.get(key)
        .map(String::as_str)
        .with_context(|| format!("hack/kube-node.sh's env does not export {key}"))
}

/// Reads DIR/env (shell syntax): the `KUBE*` variables and PATH.
fn read_env(path: &Path) -> anyhow::Result<HashMap<String, String>> {
    crate::stack::source_env_file(path, |k| k.starts_with("KUBE") || k == "PATH")
}

/// Stops a half-started node.
struct StopOnDrop(PathBuf);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.0).output();
    }
}

fn keep_logs(dir: &Path) {
    let name = dir
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    let dest = paths::target_dir().join("it-logs").join(name);
    if std::fs::create_dir_all(&dest).is_err() {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let keep = p
                .extension()
                .is_some_and(|x| x == "log" || x == "yaml" || x == "sh");
            if keep {
                let _ = std::fs::copy(&p, dest.join(e.file_name()));
            }
        }
    }
    eprintln!("[cluster] logs kept in {}", dest.display());
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.stopped {
            keep_logs(self.dir.path());
        }
        if let Err(e) = self.stop() {
            eprintln!("cluster cleanup: {e:#}");
        }
    }
}

/// The usual set-up of the kubelet suite: a runtime stack (containerd, or CRI-O with
/// `TOPOLET_RUNTIME=cri-o`) with topolet registered, and a single-node cluster whose kubelet
/// drives that runtime. Drops the cluster first.
pub struct KubeNode {
    pub cluster: Cluster,
    pub t: WithTopolet,
}

impl KubeNode {
    /// Stack, topolet (static policy, CPU 0 reserved, `[memory]` as given in `extra_toml`), cluster.
    pub fn start(extra_toml: &str, opts: &ClusterOptions) -> anyhow::Result<KubeNode> {
        KubeNode::start_on(Stack::start()?, extra_toml, opts)
    }

    /// [`KubeNode::start`] on a stack started by the caller (e.g. with `hack/containerd.sh` or
    /// `hack/crio.sh` settings).
    pub fn start_on(
        stack: Stack,
        extra_toml: &str,
        opts: &ClusterOptions,
    ) -> anyhow::Result<KubeNode> {
        let work = stack.work_dir("topolet")?;
        let mut config = TopoletConfig::for_stack(&stack, &work);
        config.extra_toml = extra_toml.to_string();
        let t = WithTopolet::start_with(stack, work, &config)?;
        let cluster = Cluster::start(&t.stack, opts)?;
        Ok(KubeNode { cluster, t })
    }

    /// Like [`KubeNode::start`], then topolet restarted with its Kubernetes API client on
    /// (`[kubernetes]`: the cluster's `topolet.kubeconfig`, user `topolet`, which holds only what
    /// deploy/kubernetes/rbac.yaml grants), once the cluster exists.
    ///
    /// `[kubelet]` points at the cluster's kubelet's PodResources socket.
    ///
    /// With the client on, the eviction action defaults to `api`; unless `extra_toml` has its
    /// own `[eviction]`, the node's gets `action = "dry-run"`, so that a test about something
    /// else never evicts its pods when this shared host runs low on disk.
    pub fn start_with_api(extra_toml: &str, opts: &ClusterOptions) -> anyhow::Result<KubeNode> {
        KubeNode::start_with_api_config(extra_toml, opts, "")
    }

    /// [`KubeNode::start_with_api`] with more `[kubernetes]` keys (`kubernetes_toml`); returns
    /// once the pod watch has listed too (admissions from then on can come from the API).
    pub fn start_with_api_config(
        extra_toml: &str,
        opts: &ClusterOptions,
        kubernetes_toml: &str,
    ) -> anyhow::Result<KubeNode> {
        KubeNode::start_with_api_on(Stack::start()?, extra_toml, opts, kubernetes_toml)
    }

    /// [`KubeNode::start_with_api_config`] on a stack started by the caller.
    pub fn start_with_api_on(
        stack: Stack,
        extra_toml: &str,
        opts: &ClusterOptions,
        kubernetes_toml: &str,
    ) -> anyhow::Result<KubeNode> {
        let extra = if extra_toml.contains("[eviction]") {
            extra_toml.to_string()
        } else {
            format!("{extra_toml}\n[eviction]\naction = \"dry-run\"\n")
        };
        let mut node = KubeNode::start_on(stack, &extra, opts)?;
        let kubeconfig = node.cluster.env("KUBE_TOPOLET_KUBECONFIG")?.to_string();
        let name = node.cluster.node_name().to_string();
        node.t.config.kubernetes = format!(
            "enabled = \"on\"\nkubeconfig = {kubeconfig:?}\nnode_name = {name:?}\n{kubernetes_toml}"
        );
        // Devices from the kubelet's PodResources API (`topolet::kubelet`): its real socket.
        node.t.config.kubelet = format!(
            "pod_resources_socket = {:?}",
            node.cluster.pod_resources_socket().to_string_lossy()
        );
        node.t.config.write(node.t.topolet.config_path())?;
        node.t
            .topolet
            .terminate(crate::topolet::TERMINATE_TIMEOUT)?;
        node.t.topolet.restart()?;
        node.t.topolet.wait_nri_synchronized(1)?;
        // The API client is on once its pod store has synced (a state: status and metrics).
        crate::admissions::wait_store_synced(&mut node.t.topolet, true)?;
        Ok(node)
    }

    /// What a container of a pod really got: (cgroup values, process values).
    pub fn observe(
        &self,
        pod: &Pod,
        cname: &str,
    ) -> anyhow::Result<(crate::observe::CgroupValues, crate::observe::ProcValues)> {
        let c = self.cluster.container(pod, cname)?;
        let cg = crate::observe::cgroup_values(&c.created())?;
        let pid = self.t.stack.cri().pid(&c.id)?;
        check_process_cgroup(pid, &c)?;
        Ok((cg, crate::observe::proc_values(pid)?))
    }
}

/// The process of `c` really lives in the cgroup the kubelet's naming rule gives, under the leaf
/// the runtime names ([`Runtime::container_cgroup`]: `<id>`, or CRI-O's `crio-<id>`) (cpu
/// controller line of `/proc/<pid>/cgroup`): the harness's oracle is checked against the kernel,
/// not assumed.
pub fn check_process_cgroup(pid: i32, c: &KubeContainer) -> anyhow::Result<()> {
    let p = format!("/proc/{pid}/cgroup");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
    let want = format!(
        "{}/{}",
        c.cgroup_parent,
        Runtime::under_test().container_cgroup(&c.id)
    );
    let found: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let ctrls = parts.next()?;
            let path = parts.next()?;
            Some((ctrls.to_string(), path.to_string()))
        })
        .collect();
    let cpu = found
        .iter()
        .find(|(k, _)| k.split(',').any(|c| c == "cpu"))
        .map(|(_, v)| v.clone())
        .with_context(|| format!("{p} has no cpu controller line: {text}"))?;
    if cpu != want {
        bail!("container {} runs in cgroup {cpu}, not {want}", c.id);
    }
    Ok(())
}
