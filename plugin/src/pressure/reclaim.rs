//! Node-level reclaim, the I/O half: before the eviction loop evicts a pod for a disk signal,
//! it lists the runtime's containers, sandboxes and images through the CRI, asks the core
//! (`topolet_core::eviction::reclaim`) what may go, removes it (RemoveContainer,
//! RemovePodSandbox, RemoveImage), and reports what it freed; the loop then observes the
//! signals again and evicts only if the threshold is still met with its minimum reclaim
//! (`reclaimNodeLevelResources` in `pkg/kubelet/eviction/eviction_manager.go`).
//!
//! [`NodeReclaim`] also keeps the image tracker (first detected, last used) the kubelet keeps
//! in `pkg/kubelet/images/image_gc_manager.go`: [`NodeReclaim::detect`] lists images and
//! containers every [`IMAGE_DETECT_PERIOD`] (the kubelet's `ImageGCPeriod`) while a disk
//! threshold is configured, so that an image's age is known when pressure comes.
//!
//! With `action = "dry-run"` it lists and plans, logs each removal it would do, and removes
//! nothing.

use std::collections::{BTreeSet, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use topolet_core::eviction::observe::Timestamp;
use topolet_core::eviction::reclaim::{
    dead_containers, images_in_use, need, reclaim_steps, ContainerInfo, ContainerPlan, ImageInfo,
    ImageTracker, Need, PlannedImage, ReclaimStep, SandboxInfo, IMAGE_DETECT_PERIOD,
};
use topolet_core::eviction::settings::ReclaimSettings;
use topolet_core::eviction::Threshold;

use crate::pressure::cri::{self, ContainerState, CriClient, CriError, PodSandboxState};

/// The core's view of a CRI image: sizes of 0 ("must be > 0") are unknown; tags and digests
/// are the names.
pub fn image_info(image: &cri::Image) -> ImageInfo {
    ImageInfo {
        id: image.id.clone(),
        names: image
            .repo_tags
            .iter()
            .chain(&image.repo_digests)
            .filter(|n| !n.is_empty())
            .cloned()
            .collect(),
        size: (image.size > 0).then_some(image.size),
        pinned: image.pinned,
    }
}

/// The core's view of a CRI container.
pub fn container_info(c: &cri::Container) -> ContainerInfo {
    ContainerInfo {
        id: c.id.clone(),
        sandbox_id: c.pod_sandbox_id.clone(),
        name: c
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default(),
        running: c.state() == ContainerState::ContainerRunning,
        created_at: c.created_at,
        image_refs: c.image_refs(),
    }
}

/// The core's view of a CRI pod sandbox.
pub fn sandbox_info(s: &cri::PodSandbox) -> SandboxInfo {
    SandboxInfo {
        id: s.id.clone(),
        pod_uid: s
            .metadata
            .as_ref()
            .map(|m| m.uid.clone())
            .unwrap_or_default(),
        ready: s.state() == PodSandboxState::SandboxReady,
        created_at: s.created_at,
    }
}

/// What one reclaim removed (or, in dry run, would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reclaimed {
    pub steps: Vec<ReclaimStep>,
    pub dry_run: bool,
    /// Dead containers and sandboxes removed.
    pub containers: Vec<String>,
    pub sandboxes: Vec<String>,
    /// Images removed, in order.
    pub images: Vec<PlannedImage>,
    /// Their sizes as the runtime listed them.
    pub image_bytes: u64,
    /// What the images had to free.
    pub need: Option<Need>,
    /// The image plan covered the need (the kubelet's `FreeDiskSpaceFailed` when it did not).
    pub images_enough: bool,
    /// Removals that failed (logged each).
    pub errors: usize,
    /// Bytes the runtime says images use on the image filesystem (ImageFsInfo), before and
    /// after; `None` when it did not answer.
    pub images_used_before: Option<u64>,
    pub images_used_after: Option<u64>,
}

/// Node-level reclaim through one CRI endpoint.
pub struct NodeReclaim {
    pub cri: CriClient,
    pub settings: ReclaimSettings,
    /// `action = "dry-run"`: plan and log only.
    pub dry_run: bool,
    tracker: Mutex<ImageTracker>,
    epoch: Instant,
}

impl NodeReclaim {
    pub fn new(cri: CriClient, settings: ReclaimSettings, dry_run: bool) -> NodeReclaim {
        NodeReclaim {
            cri,
            settings,
            dry_run,
            tracker: Mutex::new(ImageTracker::new()),
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp(self.epoch.elapsed())
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, ImageTracker> {
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when the image tracker is due a detection ([`IMAGE_DETECT_PERIOD`]).
    pub fn detection_due(&self) -> bool {
        self.tracker().detection_due(self.now())
    }

    /// `detectImages`: lists images and containers and records each image's first detection
    /// and last use. Errors are logged; the next period tries again.
    pub async fn detect(&self) {
        let (images, containers) = match (
            self.cri.list_images().await,
            self.cri.list_containers().await,
        ) {
            (Ok(i), Ok(c)) => (i, c),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, period_s = IMAGE_DETECT_PERIOD.as_secs(), "node reclaim: image detection failed");
                // Mark the attempt so a runtime that is down is not asked every interval.
                self.tracker().detection_attempted(self.now());
                return;
            }
        };
        let images: Vec<ImageInfo> = images.iter().map(image_info).collect();
        let in_use: BTreeSet<String> = containers.iter().flat_map(|c| c.image_refs()).collect();
        let now = self.now();
        let mut t = self.tracker();
        t.detect(&images, &in_use, now);
        tracing::debug!(images = t.len(), "node reclaim: images detected");
    }

    async fn images_used(&self) -> Option<u64> {
        match self.cri.image_fs_info().await {
            Ok(r) => Some(
                r.image_filesystems
                    .iter()
                    .filter_map(|f| f.used_bytes.as_ref().map(|u| u.value))
                    .sum(),
            ),
            Err(e) => {
                tracing::debug!(error = %e, "node reclaim: ImageFsInfo failed");
                None
            }
        }
    }

    /// The kubelet's node-level reclaim for `threshold` (its signal observed at `available` of
    /// `capacity`): dead containers and sandboxes, then unused images, as the signal's reclaim
    /// steps say (`has_imagefs`: the image filesystem is not nodefs). `api_pods`: the uids the
    /// API lists on this node, when known (such a pod is alive even without a ready sandbox:
    /// the kubelet will start it again). `None` when the signal has no reclaim step.
    pub async fn run(
        &self,
        threshold: &Threshold,
        available: i64,
        capacity: u64,
        has_imagefs: bool,
        api_pods: Option<&HashSet<String>>,
    ) -> Result<Option<Reclaimed>, CriError> {
        let steps = reclaim_steps(threshold.signal, has_imagefs);
        if steps.is_empty() {
            return Ok(None);
        }
        let signal = threshold.signal.to_string();
        let mut out = Reclaimed {
            steps: steps.to_vec(),
            dry_run: self.dry_run,
            images_enough: true,
            ..Reclaimed::default()
        };
        out.images_used_before = self.images_used().await;
        let containers: Vec<ContainerInfo> = self
            .cri
            .list_containers()
            .await?
            .iter()
            .map(container_info)
            .collect();
        let mut plan = ContainerPlan::default();
        if steps.contains(&ReclaimStep::DeadContainers) {
            let sandboxes: Vec<SandboxInfo> = self
                .cri
                .list_pod_sandboxes()
                .await?
                .iter()
                .map(sandbox_info)
                .collect();
            let ready: HashSet<&str> = sandboxes
                .iter()
                .filter(|s| s.ready)
                .map(|s| s.pod_uid.as_str())
                .collect();
            let alive =
                |uid: &str| ready.contains(uid) || api_pods.is_some_and(|p| p.contains(uid));
            plan = dead_containers(&containers, &sandboxes, alive);
            for id in &plan.containers {
                if self.remove(Kind::Container, id, &signal).await {
                    out.containers.push(id.clone());
                } else {
                    out.errors += 1;
                }
            }
            for id in &plan.sandboxes {
                if self.remove(Kind::Sandbox, id, &signal).await {
                    out.sandboxes.push(id.clone());
                } else {
                    out.errors += 1;
                }
            }
        }
        if steps.contains(&ReclaimStep::UnusedImages) {
            let images: Vec<ImageInfo> = self
                .cri
                .list_images()
                .await?
                .iter()
                .map(image_info)
                .collect();
            // In dry run the planned container removals count as done: the images they would
            // free are the ones reported.
            let in_use = images_in_use(&containers, &plan);
            let now = self.now();
            let need = need(
                threshold,
                available,
                capacity,
                self.settings.kubelet_image_gc,
            );
            let image_plan = {
                let mut t = self.tracker();
                t.detect(&images, &in_use, now);
                t.plan(need, now, &self.settings)
            };
            out.need = Some(need);
            out.images_enough = image_plan.enough;
            tracing::info!(
                signal = %signal,
                need = ?need,
                candidates_bytes = image_plan.bytes,
                remove = image_plan.remove.len(),
                kept_in_use = image_plan.kept_in_use,
                kept_pinned = image_plan.kept_pinned,
                kept_young = image_plan.kept_young,
                "node reclaim: unused images planned"
            );
            for image in image_plan.remove {
                if self.remove(Kind::Image, &image.id, &signal).await {
                    out.image_bytes += image.size.unwrap_or(0);
                    out.images.push(image);
                } else {
                    out.errors += 1;
                }
            }
        }
        out.images_used_after = if self.dry_run {
            out.images_used_before
        } else {
            self.images_used().await
        };
        Ok(Some(out))
    }

    /// Removes one object (in dry run: logs the removal it would do, calls nothing); true when
    /// it is gone (or would be). A runtime's NotFound counts as gone.
    async fn remove(&self, kind: Kind, id: &str, signal: &str) -> bool {
        let what = kind.as_str();
        if self.dry_run {
            tracing::warn!(
                kind = what,
                id,
                signal,
                "dry-run: node reclaim would remove"
            );
            return true;
        }
        let result = match kind {
            Kind::Container => self.cri.remove_container(id).await,
            Kind::Sandbox => self.cri.remove_pod_sandbox(id).await,
            Kind::Image => self.cri.remove_image(id).await,
        };
        match result {
            Ok(()) => {
                tracing::info!(kind = what, id, signal, "node reclaim: removed");
                true
            }
            Err(e) if e.is_not_found() => true,
            Err(e) => {
                tracing::warn!(kind = what, id, signal, error = %e, "node reclaim: removal failed");
                false
            }
        }
    }
}

/// What a removal removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Container,
    Sandbox,
    Image,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Container => "container",
            Kind::Sandbox => "sandbox",
            Kind::Image => "image",
        }
    }
}
