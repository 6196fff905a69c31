//! Unsolicited container updates (Runtime.UpdateContainers): a cloneable handle that
//! queues requests for a separate sender task, so event handlers never block on the
//! runtime's NRI lock: containerd holds that lock while it calls a plugin, and applies
//! UpdateContainers under the same lock, so a handler that awaited one would wait for the
//! runtime's request timeout (containerd `internal/nri/nri.go`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::api::{ContainerEviction, ContainerUpdate, UpdateContainersRequest};
use crate::api_ttrpc::RuntimeClient;

/// Errors of an unsolicited update.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UpdateError {
    /// The stub is gone (its sender task ended).
    #[error("update queue is closed: the nri stub has stopped")]
    StubStopped,
    /// No registered runtime connection when the update was due.
    #[error("no runtime connection for update containers")]
    NotConnected,
    /// The runtime answered with an error or the call failed.
    #[error("runtime rejected update containers: {0}")]
    Rpc(String),
}

struct Job {
    req: UpdateContainersRequest,
    /// The connection registered when the job was queued: the job goes out on it or not at all
    /// (a request computed for one connection must not reach the next before its Synchronize).
    /// `None`: queued while disconnected; it waits for the next connection.
    pinned: Option<Arc<RuntimeClient>>,
    reply: oneshot::Sender<Result<Vec<ContainerUpdate>, UpdateError>>,
}

/// Cloneable handle for unsolicited updates; usable from any task, including
/// from inside a plugin handler (enqueueing never blocks).
#[derive(Clone)]
pub struct ContainerUpdater {
    tx: mpsc::UnboundedSender<Job>,
    slot: ClientSlot,
}

impl std::fmt::Debug for ContainerUpdater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerUpdater").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").finish_non_exhaustive()
    }
}

/// Completion of a queued update: resolves to the containers the runtime
/// reported as failed. Dropping it does not cancel the update.
///
/// Do not `.await` this inside a plugin handler: the runtime holds its NRI lock
/// while the handler runs, so the update cannot complete until the handler returns.
#[derive(Debug)]
pub struct PendingUpdate {
    rx: oneshot::Receiver<Result<Vec<ContainerUpdate>, UpdateError>>,
}

impl Future for PendingUpdate {
    type Output = Result<Vec<ContainerUpdate>, UpdateError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(Ok(r)) => Poll::Ready(r),
            Poll::Ready(Err(_)) => Poll::Ready(Err(UpdateError::StubStopped)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl ContainerUpdater {
    /// Queues an UpdateContainers request; returns at once.
    pub fn update(
        &self,
        update: Vec<ContainerUpdate>,
        evict: Vec<ContainerEviction>,
    ) -> Result<PendingUpdate, UpdateError> {
        let (reply, rx) = oneshot::channel();
        let req = UpdateContainersRequest {
            update,
            evict,
            ..Default::default()
        };
        let pinned = self.slot.borrow().clone();
        self.tx
            .send(Job { req, pinned, reply })
            .map_err(|_| UpdateError::StubStopped)?;
        Ok(PendingUpdate { rx })
    }
}

/// Current runtime client, set by the stub while a connection is registered.
pub(crate) type ClientSlot = watch::Receiver<Option<Arc<RuntimeClient>>>;

/// Creates the handle and spawns its sender task. Jobs are sent one at a time,
/// in order; a job queued while disconnected waits up to `connect_wait` for a
/// connection, else fails with [`UpdateError::NotConnected`]; a job queued on one
/// connection fails the same way if that connection is gone when its turn comes.
pub(crate) fn spawn_updater(
    mut slot: ClientSlot,
    request_timeout: Duration,
    connect_wait: Duration,
) -> ContainerUpdater {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    let handle_slot = slot.clone();
    tokio::spawn(async move {
        while let Some(job) = rx.recv().await {
            let client = {
                let wait = slot.wait_for(|c| c.is_some());
                match tokio::time::timeout(connect_wait, wait).await {
                    Ok(Ok(c)) => c.clone(),
                    _ => None,
                }
            };
            let Some(client) = client else {
                let _ = job.reply.send(Err(UpdateError::NotConnected));
                continue;
            };
            if job
                .pinned
                .as_ref()
                .is_some_and(|p| !Arc::ptr_eq(p, &client))
            {
                tracing::debug!("nri update containers of an earlier connection dropped");
                let _ = job.reply.send(Err(UpdateError::NotConnected));
                continue;
            }
            let ctx = ttrpc::context::with_duration(request_timeout);
            let n = job.req.update.len();
            let res = client
                .update_containers(ctx, &job.req)
                .await
                .map(|r| r.failed)
                .map_err(|e| UpdateError::Rpc(e.to_string()));
            match &res {
                Ok(failed) => tracing::debug!(
                    updates = n,
                    failed = failed.len(),
                    "nri update containers sent"
                ),
                Err(e) => tracing::warn!(updates = n, error = %e, "nri update containers failed"),
            }
            let _ = job.reply.send(res);
        }
    });
    ContainerUpdater {
        tx,
        slot: handle_slot,
    }
}
