//! topolet's Kubernetes API client (`[kubernetes]`): its credentials, the clients, and the
//! connection the other API tasks share the set-up of ([`connect`]: `crate::cluster::nrt`,
//! `crate::cluster::pod_directory`); the client [`start`] builds, with the Event recorder
//! ([`crate::cluster::recorder`]), is shared with the eviction loop
//! (`crate::pressure::actions`, `crate::cluster::pod_facts`) and the node conditions publisher (`crate::cluster::node_status`).
//!
//! Credentials (`enabled = "auto"`), in the order every Kubernetes client uses (client-go's
//! `clientcmd` loading rules, kube-rs's `Config::infer`): the configured `kubeconfig`, else the
//! `KUBECONFIG` environment variable (a `:`-separated list of files, merged as kubectl merges
//! them), else the in-cluster service account (`KUBERNETES_SERVICE_HOST` and the mounted token);
//! none found, the client is off and topolet is the node-local plugin it always was. The log line
//! that turns the client on names the source.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kube::Client;

use crate::cluster::recorder::{EventSink, Recorder, QUEUE};
use crate::config::{is_node_name, EvictAs, KubernetesConfig, KubernetesEnabled};
use crate::telemetry::metrics::Metrics;

/// The in-cluster service account token kube reads.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Where the client's credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `[kubernetes] kubeconfig`.
    Kubeconfig(PathBuf),
    /// The `KUBECONFIG` environment variable's files, in order (the first one naming a value
    /// wins, as kubectl merges them).
    KubeconfigEnv(Vec<PathBuf>),
    InCluster,
}

/// The credentials `config` asks for, given `KUBECONFIG` (`kubeconfig_env`) and whether the
/// in-cluster service account is there; `None`: the client is off. Errors only for `enabled =
/// "on"` without credentials.
pub fn credentials(
    config: &KubernetesConfig,
    kubeconfig_env: Option<&std::ffi::OsStr>,
    in_cluster: bool,
) -> Result<Option<Credentials>, String> {
    if config.enabled == KubernetesEnabled::Off {
        return Ok(None);
    }
    if let Some(path) = &config.kubeconfig {
        return Ok(Some(Credentials::Kubeconfig(path.clone())));
    }
    // client-go's loading rules: the list's empty entries are skipped; an empty list is unset.
    let env_paths: Vec<PathBuf> = kubeconfig_env
        .map(|v| {
            std::env::split_paths(v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if !env_paths.is_empty() {
        return Ok(Some(Credentials::KubeconfigEnv(env_paths)));
    }
    if in_cluster {
        return Ok(Some(Credentials::InCluster));
    }
    match config.enabled {
        KubernetesEnabled::On => Err(format!(
            "kubernetes.enabled = \"on\" but no credentials: set kubernetes.kubeconfig or the \
             KUBECONFIG environment variable, or run in a pod with a service account token \
             (KUBERNETES_SERVICE_HOST and {SERVICE_ACCOUNT_TOKEN})"
        )),
        _ => Ok(None),
    }
}

impl Credentials {
    /// Where the credentials came from, for the log line that turns the client on.
    pub fn describe(&self) -> String {
        match self {
            Credentials::Kubeconfig(p) => format!("kubernetes.kubeconfig {}", p.display()),
            Credentials::KubeconfigEnv(ps) => {
                let list: Vec<String> = ps.iter().map(|p| p.display().to_string()).collect();
                format!("KUBECONFIG {}", list.join(":"))
            }
            Credentials::InCluster => "in-cluster service account".to_string(),
        }
    }
}

/// True when this process runs in a pod with a service account: the API server's address in the
/// environment and the token mounted.
pub fn in_cluster_available() -> bool {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    set("KUBERNETES_SERVICE_HOST")
        && set("KUBERNETES_SERVICE_PORT")
        && Path::new(SERVICE_ACCOUNT_TOKEN).is_file()
}

/// This node's name: `config`'s, else `env_node_name` (`NODE_NAME`), else `hostname`
/// (lowercased, as the kubelet does).
pub fn node_name(
    config: &KubernetesConfig,
    env_node_name: Option<String>,
    hostname: Option<String>,
) -> Result<String, String> {
    if let Some(n) = &config.node_name {
        return Ok(n.clone());
    }
    if let Some(n) = env_node_name.filter(|n| !n.is_empty()) {
        return if is_node_name(&n) {
            Ok(n)
        } else {
            Err(format!(
                "NODE_NAME={n:?} is not a node name; set kubernetes.node_name"
            ))
        };
    }
    let host = hostname
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .ok_or("no node name: set kubernetes.node_name or NODE_NAME (the hostname is unknown)")?;
    if is_node_name(&host) {
        Ok(host)
    } else {
        Err(format!(
            "the hostname {host:?} is not a node name; set kubernetes.node_name or NODE_NAME"
        ))
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok()
}

/// Builds the client (no request is made: an unreachable API server is not an error here).
pub async fn client(creds: &Credentials) -> anyhow::Result<Client> {
    client_as(creds, READ_TIMEOUT, None).await
}

/// How long any request but a watch may wait for the server's next bytes.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The client of the pod watch (`crate::cluster::pod_directory`): the same as [`node_client`],
/// but a read may wait `longest_watch` (the longest `timeoutSeconds` a watch asks for) plus
/// [`crate::cluster::pod_directory::WATCH_MARGIN`], so that a watch on a quiet node is ended by
/// the server, never cut by the client ([`READ_TIMEOUT`] would end it after 30 s without an
/// event, and every node would relist its pods twice a minute).
pub async fn watch_client(
    creds: &Credentials,
    longest_watch: Duration,
    as_node: Option<&str>,
) -> anyhow::Result<Client> {
    client_as(
        creds,
        longest_watch + crate::cluster::pod_directory::WATCH_MARGIN,
        as_node.map(|n| format!("system:node:{n}")),
    )
    .await
}

/// The client of what only the node's own pods concern: listing them (the pod facts, an
/// evicted pod read back) and evicting them. [`client`], or with `[kubernetes] evict_as`
/// resolved to the node, one that asks the API server to act as `system:node:<node>` (the
/// `Impersonate-User` header; with constrained impersonation the API server lets a service
/// account bound to a pod on that node do so and sets the node's groups itself,
/// `impersonate:associated-node`). As the node, the Node authorizer serves only lists and
/// watches whose field selector names it (`spec.nodeName=<node>`), and NodeRestriction admits
/// only Evictions of its pods: `crate::cluster::permissions::AS_NODE`.
pub async fn node_client(creds: &Credentials, as_node: Option<&str>) -> anyhow::Result<Client> {
    client_as(
        creds,
        READ_TIMEOUT,
        as_node.map(|n| format!("system:node:{n}")),
    )
    .await
}

/// `[kubernetes] evict_as` resolved for `creds`: `Some(node)` to evict and read this node's
/// pods as the node, `None` as topolet itself; an error for `"node"` without in-cluster
/// credentials.
pub fn evict_as_node<'a>(
    evict_as: EvictAs,
    creds: &Credentials,
    node: &'a str,
) -> Result<Option<&'a str>, String> {
    match (evict_as, creds) {
        (EvictAs::Itself, _) => Ok(None),
        (EvictAs::Node | EvictAs::Auto, Credentials::InCluster) => Ok(Some(node)),
        (EvictAs::Auto, _) => Ok(None),
        (EvictAs::Node, other) => Err(format!(
            "kubernetes.evict_as = \"node\" needs the in-cluster service account (a token bound \
             to this node's pod names the node to act as), not {}; set evict_as = \"self\"",
            other.describe()
        )),
    }
}

async fn client_as(
    creds: &Credentials,
    read_timeout: Duration,
    impersonate: Option<String>,
) -> anyhow::Result<Client> {
    let mut config = match creds {
        Credentials::Kubeconfig(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).with_context(|| {
                format!("kubernetes.kubeconfig: cannot read {}", path.display())
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("kubernetes.kubeconfig: {}", path.display()))?
        }
        Credentials::KubeconfigEnv(paths) => {
            let mut merged: Option<kube::config::Kubeconfig> = None;
            for path in paths {
                let kc = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("KUBECONFIG: cannot read {}", path.display()))?;
                merged = Some(match merged {
                    None => kc,
                    Some(m) => m
                        .merge(kc)
                        .with_context(|| format!("KUBECONFIG: merging {}", path.display()))?,
                });
            }
            let kc = merged.context("KUBECONFIG names no file")?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .context("KUBECONFIG")?
        }
        Credentials::InCluster => {
            kube::Config::incluster().context("the in-cluster service account")?
        }
    };
    // Bounded: a hung API server holds the recorder task, never a container event.
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(read_timeout);
    config.write_timeout = Some(Duration::from_secs(30));
    // No built-in retry: kube's (up to 15 attempts on 429/503/504, back-off up to 1000 s) would
    // hold the eviction loop for minutes on a PodDisruptionBudget's 429, which means "try
    // another pod". Every user retries on its own terms (the recorder's back-off, the eviction
    // loop's next interval, the node status publisher's next tick).
    config.default_retry = false;
    config.auth_info.impersonate = impersonate;
    Client::try_from(config).context("building the Kubernetes client")
}

/// The client and this node's name when `config` (and the environment) enables the API
/// client; `Ok(None)`: off. Errors name the key at fault.
pub async fn connect(
    config: &KubernetesConfig,
) -> anyhow::Result<Option<(Client, String, Credentials)>> {
    let creds = credentials(
        config,
        std::env::var_os("KUBECONFIG").as_deref(),
        in_cluster_available(),
    )
    .map_err(anyhow::Error::msg)?;
    let Some(creds) = creds else {
        return Ok(None);
    };
    let node = node_name(config, std::env::var("NODE_NAME").ok(), hostname())
        .map_err(anyhow::Error::msg)?;
    let client = client(&creds).await?;
    Ok(Some((client, node, creds)))
}

/// The client as `topolet run` starts it.
pub struct Started {
    /// Where the NRI handlers (and the eviction loop) hand Events.
    pub sink: EventSink,
    /// The recorder task.
    pub recorder: tokio::task::JoinHandle<()>,
    /// The client of topolet's own writes (Events, node conditions, NRT, the reclaimed amount).
    pub client: Client,
    /// The client of the pod watch ([`watch_client`]): as the node, or as topolet.
    pub watch_client: Client,
    /// The client of this node's pods ([`node_client`]): their lists and evictions, as the
    /// node, or [`Started::client`].
    pub node_client: Client,
    /// Pod reads and evictions go out as this node (`[kubernetes] evict_as`).
    pub acts_as_node: bool,
    /// The credentials are the in-cluster service account's: topolet runs as its DaemonSet's
    /// pod (`[reclaimed] withdraw_on_stop` "auto").
    pub in_cluster: bool,
    /// This node's name.
    pub node: String,
}

/// The client when `config` (and the environment) enables it: the sink for the plugin, the
/// recorder task, the client and the node name. `Ok(None)`: off.
pub async fn start(
    config: &KubernetesConfig,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Option<Started>> {
    let Some((client, node, creds)) = connect(config).await? else {
        tracing::info!(
            enabled = ?config.enabled,
            "kubernetes API client off (disabled, or no credentials found: no \
             kubernetes.kubeconfig, no KUBECONFIG, no in-cluster service account): no Events"
        );
        return Ok(None);
    };
    tracing::info!(
        node = %node,
        credentials = %creds.describe(),
        "kubernetes API client on: Events on pods"
    );
    metrics.set_kube_client(true);
    let (sink, rx) = EventSink::channel(QUEUE, metrics.clone());
    let recorder = Recorder::new(client.clone(), node.clone(), metrics);
    let as_node = evict_as_node(config.evict_as, &creds, &node).map_err(anyhow::Error::msg)?;
    // A watch asks for at most twice `watch_timeout_s` (`crate::cluster::pod_directory`).
    let watch_client = watch_client(&creds, 2 * config.watch_timeout(), as_node).await?;
    let node_client = match as_node {
        Some(n) => node_client(&creds, Some(n)).await?,
        None => client.clone(),
    };
    tracing::info!(
        acting_as = %as_node.map_or_else(|| "topolet's own identity".to_string(), |n| format!("system:node:{n}")),
        "this node's pods read and evicted through the API"
    );
    Ok(Some(Started {
        sink,
        recorder: tokio::spawn(recorder.run(rx)),
        client,
        watch_client,
        node_client,
        acts_as_node: as_node.is_some(),
        in_cluster: matches!(creds, Credentials::InCluster),
        node,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(enabled: KubernetesEnabled, kubeconfig: Option<&str>) -> KubernetesConfig {
        KubernetesConfig {
            enabled,
            kubeconfig: kubeconfig.map(PathBuf::from),
            ..KubernetesConfig::default()
        }
    }

    #[test]
    fn credentials_follow_enabled() {
        use KubernetesEnabled::*;
        let kc = Some(Credentials::Kubeconfig("/k".into()));
        assert_eq!(
            credentials(&cfg(Auto, None), None, false),
            Ok(None),
            "off as today"
        );
        assert_eq!(
            credentials(&cfg(Auto, None), None, true),
            Ok(Some(Credentials::InCluster))
        );
        assert_eq!(
            credentials(&cfg(Auto, Some("/k")), None, true),
            Ok(kc.clone())
        );
        assert_eq!(credentials(&cfg(On, Some("/k")), None, false), Ok(kc));
        assert_eq!(credentials(&cfg(Off, Some("/k")), None, true), Ok(None));
        let err = credentials(&cfg(On, None), None, false).unwrap_err();
        assert!(err.contains("kubernetes.enabled"), "{err}");
        assert!(err.contains("KUBECONFIG"), "{err}");
    }

    #[test]
    fn credentials_honour_kubeconfig_in_the_usual_order() {
        use std::ffi::OsStr;
        use KubernetesEnabled::*;
        let env = Some(OsStr::new("/a:/b"));
        let from_env = Ok(Some(Credentials::KubeconfigEnv(vec![
            "/a".into(),
            "/b".into(),
        ])));
        // The config key first, then KUBECONFIG, then the in-cluster account.
        assert_eq!(
            credentials(&cfg(Auto, Some("/k")), env, true),
            Ok(Some(Credentials::Kubeconfig("/k".into())))
        );
        assert_eq!(credentials(&cfg(Auto, None), env, true), from_env);
        assert_eq!(credentials(&cfg(Auto, None), env, false), from_env);
        assert_eq!(credentials(&cfg(On, None), env, false), from_env);
        assert_eq!(credentials(&cfg(Off, None), env, true), Ok(None));
        // Empty entries are skipped; an empty variable is unset.
        assert_eq!(
            credentials(&cfg(Auto, None), Some(OsStr::new("::/c:")), false),
            Ok(Some(Credentials::KubeconfigEnv(vec!["/c".into()])))
        );
        assert_eq!(
            credentials(&cfg(Auto, None), Some(OsStr::new("")), true),
            Ok(Some(Credentials::InCluster))
        );
        assert_eq!(
            credentials(&cfg(Auto, None), Some(OsStr::new("/a")), false)
                .map(|c| c.map(|c| c.describe())),
            Ok(Some("KUBECONFIG /a".to_string()))
        );
    }

    #[test]
    fn evict_as_resolves_to_the_node_only_with_a_pod_s_token() {
        let kc = Credentials::Kubeconfig("/etc/topolet/kubeconfig".into());
        let pod = Credentials::InCluster;
        assert_eq!(evict_as_node(EvictAs::Auto, &pod, "n1"), Ok(Some("n1")));
        assert_eq!(evict_as_node(EvictAs::Node, &pod, "n1"), Ok(Some("n1")));
        assert_eq!(evict_as_node(EvictAs::Itself, &pod, "n1"), Ok(None));
        assert_eq!(evict_as_node(EvictAs::Auto, &kc, "n1"), Ok(None));
        let e = evict_as_node(EvictAs::Node, &kc, "n1").unwrap_err();
        assert!(
            e.starts_with("kubernetes.evict_as = \"node\" needs the in-cluster service account")
                && e.contains("kubernetes.kubeconfig /etc/topolet/kubeconfig"),
            "{e}"
        );
    }

    #[test]
    fn node_name_from_config_env_or_hostname() {
        let mut c = cfg(KubernetesEnabled::Auto, None);
        let h = || Some("Node-A\n".to_string());
        assert_eq!(node_name(&c, None, h()), Ok("node-a".into()));
        assert_eq!(node_name(&c, Some("n1".into()), h()), Ok("n1".into()));
        assert_eq!(node_name(&c, Some(String::new()), h()), Ok("node-a".into()));
        assert!(node_name(&c, Some("Bad_Name".into()), h())
            .unwrap_err()
            .contains("NODE_NAME"));
        assert!(node_name(&c, None, Some("under_score".into())).is_err());
        assert!(node_name(&c, None, None).is_err());
        c.node_name = Some("n2".into());
        assert_eq!(node_name(&c, Some("n1".into()), h()), Ok("n2".into()));
    }
}
