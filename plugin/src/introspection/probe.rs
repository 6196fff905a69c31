//! `topolet probe`: the install check the Helm chart's test hook runs. Every topolet pod of the
//! release is found through the API (its namespace and labels) and asked over its HTTP endpoint,
//! as the kubelet's probes and Prometheus ask it: `/readyz` (200 once its NRI connection is
//! synchronized) and `/metrics` (200, the exposition text). One line per pod; an error naming
//! each pod that is not Running, not ready or not answering.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

/// How long one request may take (connect, send, answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest answer read (a /metrics page is a few tens of KiB).
pub const MAX_ANSWER: u64 = 8 << 20;

/// `GET path` from `addr`: the status code and the body's length.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, usize), String> {
    let mut s =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("{addr}: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes())
        .map_err(|e| format!("GET {path} from {addr}: {e}"))?;
    let mut answer = Vec::new();
    s.take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .map_err(|e| format!("GET {path} from {addr}: no answer: {e}"))?;
    parse_answer(&answer).map_err(|e| format!("GET {path} from {addr}: {e}"))
}

/// The status code and body length of an HTTP/1.1 answer.
pub fn parse_answer(answer: &[u8]) -> Result<(u16, usize), String> {
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("an incomplete answer ({} bytes)", answer.len()))?;
    let head = String::from_utf8_lossy(&answer[..head_end]);
    let status_line = head.lines().next().unwrap_or("");
    let mut parts = status_line.split(' ');
    match (parts.next(), parts.next().map(str::parse::<u16>)) {
        (Some(v), Some(Ok(code))) if v.starts_with("HTTP/1.") => {
            Ok((code, answer.len() - head_end - 4))
        }
        _ => Err(format!("not an HTTP answer: {status_line:?}")),
    }
}

/// One topolet pod, probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodProbe {
    pub pod: String,
    pub node: String,
    /// `Ok` with the /metrics body length, or what failed.
    pub result: Result<usize, String>,
}

/// Probes one pod at `ip:port`.
pub fn probe_pod(ip: &str, port: u16, timeout: Duration) -> Result<usize, String> {
    let addr: SocketAddr = format!("{ip}:{port}")
        .parse()
        .or_else(|_| format!("[{ip}]:{port}").parse())
        .map_err(|_| format!("pod IP {ip:?} is not an address"))?;
    match http_get(addr, "/readyz", timeout)? {
        (200, _) => {}
        (code, _) => {
            return Err(format!(
                "/readyz answered {code} (not synchronized with the runtime)"
            ))
        }
    }
    match http_get(addr, "/metrics", timeout)? {
        (200, len) if len > 0 => Ok(len),
        (code, len) => Err(format!("/metrics answered {code} with {len} bytes")),
    }
}

/// Which pods to probe, and where.
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub namespace: String,
    /// Label selector of the topolet pods.
    pub selector: String,
    pub port: u16,
    /// Connect here instead of each pod's IP, and probe only the pods of [`Target::node`] (a
    /// loopback `[metrics] address` on the host's network: reachable from that node only).
    pub host: Option<String>,
    /// The node this probe runs on.
    pub node: Option<String>,
    /// Reach the pods of [`Target::node`] here (on the host's network: the node's own loopback
    /// reaches its agent whether or not the pod reports an IP), the others at their pod IP.
    pub local_address: Option<String>,
}

/// Probes every pod `target` names; an error when there is none.
pub async fn probe_pods(client: kube::Client, target: &Target) -> anyhow::Result<Vec<PodProbe>> {
    let (namespace, selector, port) = (&target.namespace, &target.selector, target.port);
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| anyhow::anyhow!("listing pods {selector} in {namespace}: {e}"))?;
    anyhow::ensure!(
        !list.items.is_empty(),
        "no pod matches {selector} in namespace {namespace}"
    );
    let mut out = Vec::new();
    for p in list.items {
        let pod = p.metadata.name.clone().unwrap_or_default();
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| "(not scheduled)".into());
        let on_this_node = target.node.as_ref().is_some_and(|n| *n == node);
        if target.host.is_some() && !on_this_node {
            continue;
        }
        let status = p.status.as_ref();
        let phase = status.and_then(|s| s.phase.clone()).unwrap_or_default();
        let local = target.local_address.clone().filter(|_| on_this_node);
        let ip = target
            .host
            .clone()
            .or(local)
            .or_else(|| status.and_then(|s| s.pod_ip.clone()));
        let result = match (phase.as_str(), ip) {
            ("Running", Some(ip)) => {
                tokio::task::spawn_blocking(move || probe_pod(&ip, port, REQUEST_TIMEOUT))
                    .await
                    .map_err(|e| format!("probe task: {e}"))
                    .and_then(|r| r)
            }
            (phase, _) => Err(format!("phase {phase:?}, no pod IP to probe")),
        };
        out.push(PodProbe { pod, node, result });
    }
    anyhow::ensure!(
        !out.is_empty(),
        "no pod matching {selector} in namespace {namespace} runs on node {}",
        target.node.as_deref().unwrap_or("")
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_parsed_or_named() {
        assert_eq!(
            parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"),
            Ok((200, 3))
        );
        assert_eq!(
            parse_answer(b"HTTP/1.1 503 Service Unavailable\r\n\r\n"),
            Ok((503, 0))
        );
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\n")
            .unwrap_err()
            .contains("incomplete"));
        assert!(parse_answer(b"SSH-2.0-x\r\n\r\n")
            .unwrap_err()
            .contains("not an HTTP answer"));
    }

    #[tokio::test]
    async fn a_pod_is_probed_through_the_real_endpoint() {
        use crate::introspection::http::{self, Admission, Answer, Count};
        use hyper::Method;
        use std::sync::{Arc, Mutex};
        let listener = http::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let ready = Arc::new(Mutex::new(false));
        let r = ready.clone();
        let answer: Answer = Arc::new(move |m: &Method, p: &str| {
            let ok = *r.lock().unwrap();
            http::route(
                m,
                p,
                || "topolet_build_info 1\n".into(),
                || {
                    if ok {
                        Ok(())
                    } else {
                        Err("NRI Connecting".into())
                    }
                },
            )
        });
        let count: Count = Arc::new(|_| {});
        let server = tokio::spawn(http::serve_with(
            listener,
            Admission::new(8, 8),
            answer,
            count,
        ));
        let probe =
            || tokio::task::spawn_blocking(move || probe_pod("127.0.0.1", port, REQUEST_TIMEOUT));
        let e = probe().await.unwrap().unwrap_err();
        assert!(e.contains("/readyz answered 503"), "{e}");
        *ready.lock().unwrap() = true;
        assert_eq!(probe().await.unwrap(), Ok(21));
        server.abort();
    }
}
