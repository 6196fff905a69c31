//! Observation off the runtime: [`off_runtime`] runs the eviction loop's file reads and
//! directory walks on the runtime's blocking pool, so that no NRI request waits behind them.

/// Runs `f` (file reads, directory walks) on the runtime's blocking pool and waits for it: the
/// eviction loop's observation never runs on a runtime worker, which also carries the NRI socket
/// and every handler (a 200,000-entry walk or a stalled cgroup read would otherwise hold each
/// NRI request behind it, past containerd's 2 s deadline). A panic in `f` is resumed here, so the
/// iteration's own catch (in [`EvictionLoop::run`]) still sees it.
///
/// [`EvictionLoop::run`]: crate::pressure::eviction::EvictionLoop::run
pub async fn off_runtime<T, F>(f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("eviction: observation task cancelled: {e}"),
    }
}
