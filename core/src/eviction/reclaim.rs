//! Node-level reclaim before eviction: for a disk signal whose threshold drives eviction, which
//! dead containers, dead pod sandboxes and unused images to remove first, in what order, how much
//! must be freed, and whether a pod must still be evicted once the signal is observed again.
//! The shell lists and removes through the CRI (`topolet::pressure::reclaim`); everything it
//! removes is decided here.
//!
//! Mirrors the kubelet:
//! - `buildSignalToNodeReclaimFuncs` (`pkg/kubelet/eviction/helpers.go`): with an image
//!   filesystem apart from nodefs, `nodefs.*` pressure reclaims nothing at node level and
//!   `imagefs.*` pressure removes dead containers, then unused images; with one filesystem,
//!   every disk signal does both ([`reclaim_steps`]).
//! - `reclaimNodeLevelResources` (`pkg/kubelet/eviction/eviction_manager.go`): after reclaim the
//!   signals are observed again and no pod is evicted when no threshold of the signal is met
//!   with its minimum reclaim added ([`still_under_pressure`]).
//! - `freeSpace` / `imagesInEvictionOrder` / `detectImages` (`pkg/kubelet/images/image_gc_manager.go`):
//!   an image is a candidate unless a container (of any state) uses it, it is pinned, or it was
//!   first detected less than the minimum age ago; candidates go least recently used first
//!   (never-used ones before used ones), then first detected first ([`ImageTracker`]).
//!   Difference: the kubelet's eviction reclaim (`DeleteUnusedImages`) removes every candidate;
//!   topolet stops once the bytes needed ([`Need`]: threshold + minimum reclaim − available)
//!   are freed, and removes every candidate only for an inode signal (an image's inodes are not
//!   reported). Images whose size the runtime does not report count 0 bytes and go last.
//! - `evictContainers` / `evictSandboxes` (`pkg/kubelet/kuberuntime/kuberuntime_gc.go`) with the
//!   kubelet's defaults (`MinAge` 0, `MaxPerPodContainer` 1) and `evictNonDeletedPods = true` as
//!   `DeleteAllUnusedContainers` passes it: a container that is not running may go, except the
//!   newest dead one of each (pod, container name) of a pod that is still alive (the kubelet
//!   reads its restart count from it); a sandbox that is not ready and holds no container left
//!   may go, except the newest sandbox of a live pod ([`dead_containers`]).
//!
//! Time is passed in ([`Timestamp`]); nothing here reads a clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::eviction::observe::{thresholds_met, Observations, Timestamp};
use crate::eviction::settings::{EvictionConfig, KubeletImageGc, ReclaimSettings};
use crate::eviction::signal::{Signal, SignalResource};
use crate::eviction::threshold::Threshold;

/// How often the shell lists images and containers to keep each image's first-detected and
/// last-used times when no reclaim needs them (the kubelet's `ImageGCPeriod`).
pub const IMAGE_DETECT_PERIOD: Duration = Duration::from_secs(300);

/// One node-level reclaim function (`nodeReclaimFunc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReclaimStep {
    /// `containerGC.DeleteAllUnusedContainers`: dead containers and sandboxes.
    DeadContainers,
    /// `imageGC.DeleteUnusedImages`: images no container uses.
    UnusedImages,
}

/// The reclaim functions of `signal`, in order (`buildSignalToNodeReclaimFuncs`, without the
/// split container filesystem topolet does not observe). `has_imagefs`: the image filesystem is
/// not the nodefs filesystem.
pub fn reclaim_steps(signal: Signal, has_imagefs: bool) -> &'static [ReclaimStep] {
    const BOTH: &[ReclaimStep] = &[ReclaimStep::DeadContainers, ReclaimStep::UnusedImages];
    match signal {
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree if has_imagefs => &[],
        Signal::NodeFsAvailable
        | Signal::NodeFsInodesFree
        | Signal::ImageFsAvailable
        | Signal::ImageFsInodesFree => BOTH,
        Signal::MemoryAvailable | Signal::PidAvailable => &[],
    }
}

/// How much reclaim must free for a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Bytes: the threshold amount plus its minimum reclaim, minus what is available.
    Bytes(u64),
    /// Every candidate (an inode signal: images do not report their inodes; the kubelet's
    /// `DeleteUnusedImages` frees all it can).
    All,
}

/// What reclaim must free for `threshold` given its signal's observation: [`Need::Bytes`] of
/// `threshold + minimum reclaim − available` for a byte signal (zero when nothing is needed),
/// [`Need::All`] for an inode signal. With the kubelet's image GC beside topolet (`gc`) and the
/// filesystem at or above its high threshold, at least what that GC would free (down to its low
/// threshold): topolet's reclaim then leaves the kubelet's GC, which starts only above its high
/// threshold, nothing to do right after it (see docs/src/eviction.md, "Node-level reclaim").
pub fn need(
    threshold: &Threshold,
    available: i64,
    capacity: u64,
    gc: Option<KubeletImageGc>,
) -> Need {
    if threshold.signal.resource() != SignalResource::Disk {
        return Need::All;
    }
    let target = i128::from(threshold.amount(capacity, true));
    let own = (target - i128::from(available)).max(0);
    let kubelet = gc.map_or(0, |gc| {
        let used = i128::from(capacity) - i128::from(available);
        let high = i128::from(capacity) * i128::from(gc.high_percent) / 100;
        let low = i128::from(capacity) * i128::from(gc.low_percent) / 100;
        if used >= high {
            (used - low).max(0)
        } else {
            0
        }
    });
    Need::Bytes(u64::try_from(own.max(kubelet)).unwrap_or(u64::MAX))
}

/// `reclaimNodeLevelResources`' last check: after reclaim, is any threshold of `signal` still
/// met with its minimum reclaim added (`thresholdsMet(…, enforceMinReclaim = true)`)? A signal
/// not observed counts as still under pressure (nothing shows reclaim was enough).
pub fn still_under_pressure(
    config: &EvictionConfig,
    signal: Signal,
    observations: &Observations,
) -> bool {
    if !observations.contains_key(&signal) {
        return true;
    }
    !thresholds_met(config.thresholds_for(signal), observations, true).is_empty()
}

/// One image as the runtime lists it (CRI `Image`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// The image id (`sha256:…`).
    pub id: String,
    /// Tags and digests (`repo:tag`, `repo@sha256:…`).
    pub names: Vec<String>,
    /// Bytes; `None` when the runtime did not say (proto3's 0).
    pub size: Option<u64>,
    /// The runtime asks that it be kept (containerd's sandbox image).
    pub pinned: bool,
}

impl ImageInfo {
    /// True when `reference` (an image id, a name or a digest a container reports) is this image.
    pub fn is(&self, reference: &str) -> bool {
        !reference.is_empty() && (self.id == reference || self.names.iter().any(|n| n == reference))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ImageRecord {
    info: ImageInfo,
    /// `None`: present at this tracker's first detection, so of unknown age and taken as old,
    /// as the kubelet's image manager does (`image_gc_manager.go`: the first `detectImages` after
    /// start runs with the zero time, so images found then are never too young to remove).
    first_detected: Option<Timestamp>,
    /// `None`: never seen in use by this process.
    last_used: Option<Timestamp>,
}

/// The images known, with when each was first detected and last seen in use (the kubelet's
/// `imageRecords`, kept in memory as there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageTracker {
    records: BTreeMap<String, ImageRecord>,
    last_detected: Option<Timestamp>,
    /// A detection listed the images: later ones stamp new images with their time.
    initialized: bool,
}

/// One image reclaim would remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedImage {
    pub id: String,
    pub names: Vec<String>,
    pub size: Option<u64>,
}

/// Which images to remove, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImagePlan {
    pub remove: Vec<PlannedImage>,
    /// The bytes they hold (images of unknown size count 0).
    pub bytes: u64,
    /// True when `bytes` covers the [`Need`] (always for [`Need::All`]).
    pub enough: bool,
    /// Images kept because a container uses them, pinned, or younger than the minimum age.
    pub kept_in_use: usize,
    pub kept_pinned: usize,
    pub kept_young: usize,
}

impl ImageTracker {
    pub fn new() -> ImageTracker {
        ImageTracker::default()
    }

    /// `detectImages` at `now`: records new images, refreshes sizes and pins, marks those
    /// `in_use` references (every container's image id, name or digest, whatever its state)
    /// name as used now, and forgets images no longer listed.
    /// The first detection that lists (a failed one does not count) takes every image it finds
    /// as present before this process started: of unknown age, old enough to remove.
    pub fn detect(&mut self, images: &[ImageInfo], in_use: &BTreeSet<String>, now: Timestamp) {
        let detected_at = self.initialized.then_some(now);
        let mut records = BTreeMap::new();
        for image in images {
            if image.id.is_empty() {
                continue;
            }
            let mut r = self.records.remove(&image.id).unwrap_or(ImageRecord {
                info: image.clone(),
                first_detected: detected_at,
                last_used: None,
            });
            r.info = image.clone();
            if in_use.iter().any(|reference| image.is(reference)) {
                r.last_used = Some(now);
            }
            records.insert(image.id.clone(), r);
        }
        self.records = records;
        self.last_detected = Some(now);
        self.initialized = true;
    }

    /// True when the last detection is [`IMAGE_DETECT_PERIOD`] old or there was none.
    pub fn detection_due(&self, now: Timestamp) -> bool {
        self.last_detected
            .is_none_or(|at| now.since(at) >= IMAGE_DETECT_PERIOD)
    }

    /// A detection at `now` that could not list (the runtime did not answer): the next one is
    /// due a period later, the records are kept.
    pub fn detection_attempted(&mut self, now: Timestamp) {
        self.last_detected = Some(now);
    }

    /// How many images are known.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when no image is known.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// `freeSpace` at `now`, right after a [`ImageTracker::detect`] at the same `now`: the
    /// images to remove for `need`, least recently used first.
    pub fn plan(&self, need: Need, now: Timestamp, settings: &ReclaimSettings) -> ImagePlan {
        let mut plan = ImagePlan::default();
        let mut candidates: Vec<&ImageRecord> = Vec::new();
        for r in self.records.values() {
            if r.last_used.is_some_and(|at| at >= now) {
                plan.kept_in_use += 1;
            } else if r.info.pinned
                || settings
                    .pinned_images
                    .iter()
                    .any(|keep| r.info.is(keep.as_str()))
            {
                plan.kept_pinned += 1;
            } else if r
                .first_detected
                .is_some_and(|at| now.since(at) < settings.image_minimum_age)
            {
                plan.kept_young += 1;
            } else {
                candidates.push(r);
            }
        }
        // imagesInEvictionOrder: last used, then first detected; unknown sizes after the rest
        // (they may free nothing), the id last so the order is total.
        candidates.sort_by(|a, b| {
            (
                a.info.size.is_none(),
                a.last_used,
                a.first_detected,
                &a.info.id,
            )
                .cmp(&(
                    b.info.size.is_none(),
                    b.last_used,
                    b.first_detected,
                    &b.info.id,
                ))
        });
        for r in candidates {
            if let Need::Bytes(n) = need {
                if plan.bytes >= n {
                    break;
                }
            }
            plan.bytes = plan.bytes.saturating_add(r.info.size.unwrap_or(0));
            plan.remove.push(PlannedImage {
                id: r.info.id.clone(),
                names: r.info.names.clone(),
                size: r.info.size,
            });
        }
        plan.enough = match need {
            Need::Bytes(n) => plan.bytes >= n,
            Need::All => true,
        };
        plan
    }
}

/// The kubelet's `FreeDiskSpaceFailed` message (`image_gc_manager.go` `GarbageCollect`) for an
/// image plan that could not cover `needed` bytes.
pub fn free_disk_space_failed_message(needed: u64, eligible: u64) -> String {
    format!(
        "Failed to garbage collect required amount of images. Attempted to free {needed} bytes, but only found {eligible} bytes eligible to free."
    )
}

/// One container as the runtime lists it (CRI `Container`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub id: String,
    pub sandbox_id: String,
    /// The container's name in its pod (`metadata.name`).
    pub name: String,
    pub running: bool,
    /// Creation time, nanoseconds since the epoch (orders containers of one pod).
    pub created_at: i64,
    /// The references to its image the runtime reports (image id, `image_ref`, the spec's image).
    pub image_refs: Vec<String>,
}

/// One pod sandbox as the runtime lists it (CRI `PodSandbox`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    pub id: String,
    /// The pod's uid (`metadata.uid`); empty for a sandbox that does not say.
    pub pod_uid: String,
    pub ready: bool,
    pub created_at: i64,
}

/// Dead containers and sandboxes to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerPlan {
    pub containers: Vec<String>,
    pub sandboxes: Vec<String>,
}

/// `evictContainers` and `evictSandboxes` (see the module docs): the dead containers and
/// sandboxes that may go. `alive(uid)`: the pod still runs or will run again (the shell: a ready
/// sandbox, or the API still lists the pod). A container whose sandbox is not listed is left
/// alone (it is no pod's that the runtime knows).
pub fn dead_containers(
    containers: &[ContainerInfo],
    sandboxes: &[SandboxInfo],
    alive: impl Fn(&str) -> bool,
) -> ContainerPlan {
    let uid_of: BTreeMap<&str, &str> = sandboxes
        .iter()
        .map(|s| (s.id.as_str(), s.pod_uid.as_str()))
        .collect();
    let mut plan = ContainerPlan::default();
    // Evict units: (pod uid, container name) → dead containers, newest first.
    let mut units: BTreeMap<(&str, &str), Vec<&ContainerInfo>> = BTreeMap::new();
    for c in containers.iter().filter(|c| !c.running) {
        let Some(uid) = uid_of.get(c.sandbox_id.as_str()) else {
            continue;
        };
        if uid.is_empty() {
            continue;
        }
        units.entry((uid, c.name.as_str())).or_default().push(c);
    }
    for ((uid, _), mut dead) in units {
        dead.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        let keep = usize::from(alive(uid));
        plan.containers
            .extend(dead.iter().skip(keep).map(|c| c.id.clone()));
    }
    let removed: BTreeSet<&str> = plan.containers.iter().map(String::as_str).collect();
    let mut by_pod: BTreeMap<&str, Vec<&SandboxInfo>> = BTreeMap::new();
    for s in sandboxes.iter().filter(|s| !s.pod_uid.is_empty()) {
        by_pod.entry(s.pod_uid.as_str()).or_default().push(s);
    }
    for (uid, mut list) in by_pod {
        // Oldest first; a live pod keeps its newest sandbox whatever its state.
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        let n = if alive(uid) {
            list.len().saturating_sub(1)
        } else {
            list.len()
        };
        for s in list.into_iter().take(n) {
            let holds = containers
                .iter()
                .any(|c| c.sandbox_id == s.id && !removed.contains(c.id.as_str()));
            if !s.ready && !holds {
                plan.sandboxes.push(s.id.clone());
            }
        }
    }
    plan
}

/// The image references of the containers that stay after `plan` (every state: an exited
/// container may be restarted and needs its image).
pub fn images_in_use(containers: &[ContainerInfo], plan: &ContainerPlan) -> BTreeSet<String> {
    let removed: BTreeSet<&str> = plan.containers.iter().map(String::as_str).collect();
    containers
        .iter()
        .filter(|c| !removed.contains(c.id.as_str()))
        .flat_map(|c| c.image_refs.iter().filter(|r| !r.is_empty()).cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::observe::SignalObservation;
    use crate::eviction::threshold::ThresholdValue;

    const MI: u64 = 1 << 20;

    fn image(id: &str, size: Option<u64>) -> ImageInfo {
        ImageInfo {
            id: id.into(),
            names: vec![format!("example.com/{id}:1")],
            size,
            pinned: false,
        }
    }

    fn settings(min_age_s: u64) -> ReclaimSettings {
        ReclaimSettings {
            image_minimum_age: Duration::from_secs(min_age_s),
            ..ReclaimSettings::default()
        }
    }

    fn refs(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn ids(plan: &ImagePlan) -> Vec<&str> {
        plan.remove.iter().map(|p| p.id.as_str()).collect()
    }

    #[test]
    fn with_an_imagefs_nodefs_pressure_reclaims_nothing_and_imagefs_both() {
        assert!(reclaim_steps(Signal::NodeFsAvailable, true).is_empty());
        assert!(reclaim_steps(Signal::NodeFsInodesFree, true).is_empty());
        for s in [Signal::ImageFsAvailable, Signal::ImageFsInodesFree] {
            assert_eq!(
                reclaim_steps(s, true),
                [ReclaimStep::DeadContainers, ReclaimStep::UnusedImages]
            );
        }
        for s in [
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        ] {
            assert_eq!(
                reclaim_steps(s, false),
                [ReclaimStep::DeadContainers, ReclaimStep::UnusedImages]
            );
        }
        assert!(reclaim_steps(Signal::MemoryAvailable, false).is_empty());
        assert!(reclaim_steps(Signal::PidAvailable, false).is_empty());
    }

    fn imagefs(value: &str, min_reclaim: Option<&str>) -> Threshold {
        use crate::eviction::threshold::{parse_min_reclaim, parse_threshold_value};
        Threshold {
            min_reclaim: min_reclaim.map(|m| parse_min_reclaim(m).unwrap()),
            ..Threshold::hard(
                Signal::ImageFsAvailable,
                parse_threshold_value(value).unwrap().unwrap(),
            )
        }
    }

    #[test]
    fn need_is_threshold_plus_minimum_reclaim_minus_available() {
        let t = imagefs("500Mi", Some("100Mi"));
        assert_eq!(
            need(&t, (450 * MI) as i64, 1000 * MI, None),
            Need::Bytes(150 * MI)
        );
        // Already above threshold + minimum reclaim: nothing.
        assert_eq!(need(&t, (700 * MI) as i64, 1000 * MI, None), Need::Bytes(0));
        // A negative available (never from statvfs, but the type allows it) still adds up.
        assert_eq!(need(&t, -1, 1000 * MI, None), Need::Bytes(600 * MI + 1));
        let inodes = Threshold::hard(Signal::ImageFsInodesFree, ThresholdValue::Quantity(10));
        assert_eq!(need(&inodes, 5, 100, None), Need::All);
    }

    #[test]
    fn above_the_kubelets_high_threshold_reclaim_frees_down_to_its_low_one() {
        let gc = KubeletImageGc {
            high_percent: 85,
            low_percent: 80,
        };
        // 10% threshold on 1000 MiB, 100 MiB available: used 90% >= 85%: free to 80% used.
        let t = imagefs("10%", None);
        let cap = 1000 * MI;
        assert_eq!(
            need(&t, (100 * MI) as i64, cap, Some(gc)),
            Need::Bytes(cap * 90 / 100 - cap * 80 / 100)
        );
        // Under the kubelet's high threshold its GC does nothing: topolet's own need only.
        let t = imagefs("200Mi", None);
        assert_eq!(
            need(&t, (190 * MI) as i64, cap, Some(gc)),
            Need::Bytes(10 * MI)
        );
    }

    #[test]
    fn unused_images_go_least_recently_used_first_until_enough() {
        let mut tr = ImageTracker::new();
        let all = [
            image("a", Some(100)),
            image("b", Some(100)),
            image("c", Some(100)),
            image("d", Some(100)),
        ];
        // t=0: a and b used; t=10: only b used; c, d never.
        tr.detect(&all, &refs(&["a", "b"]), Timestamp::from_secs(0));
        tr.detect(&all, &refs(&["example.com/b:1"]), Timestamp::from_secs(10));
        let now = Timestamp::from_secs(20);
        tr.detect(&all, &refs(&[]), now);
        let plan = tr.plan(Need::Bytes(250), now, &settings(0));
        assert_eq!(
            ids(&plan),
            ["c", "d", "a"],
            "never used first, then a (used at 0)"
        );
        assert_eq!(plan.bytes, 300);
        assert!(plan.enough);
        let plan = tr.plan(Need::All, now, &settings(0));
        assert_eq!(ids(&plan), ["c", "d", "a", "b"]);
        let plan = tr.plan(Need::Bytes(0), now, &settings(0));
        assert!(plan.remove.is_empty() && plan.enough);
    }

    #[test]
    fn in_use_pinned_and_young_images_are_kept() {
        let mut tr = ImageTracker::new();
        let mut pinned = image("pause", Some(1000));
        pinned.pinned = true;
        let all = [
            image("old", Some(10)),
            image("used", Some(1000)),
            image("keep", Some(1000)),
            pinned.clone(),
        ];
        tr.detect(&all, &refs(&[]), Timestamp::from_secs(0));
        let young = image("young", Some(1000));
        let mut later = all.to_vec();
        later.push(young);
        let now = Timestamp::from_secs(100);
        tr.detect(&later, &refs(&["used"]), now);
        let s = ReclaimSettings {
            pinned_images: vec!["example.com/keep:1".into()],
            ..settings(60)
        };
        let plan = tr.plan(Need::Bytes(5000), now, &s);
        assert_eq!(ids(&plan), ["old"]);
        assert!(!plan.enough);
        assert_eq!(
            (plan.kept_in_use, plan.kept_pinned, plan.kept_young),
            (1, 2, 1)
        );
        assert_eq!(
            free_disk_space_failed_message(5000, plan.bytes),
            "Failed to garbage collect required amount of images. Attempted to free 5000 bytes, but only found 10 bytes eligible to free."
        );
        // Once old enough, the young image may go too.
        let now = Timestamp::from_secs(200);
        tr.detect(&later, &refs(&["used"]), now);
        assert_eq!(ids(&tr.plan(Need::Bytes(5000), now, &s)), ["old", "young"]);
    }

    #[test]
    fn images_of_unknown_size_go_last_and_count_nothing() {
        let mut tr = ImageTracker::new();
        let now = Timestamp::from_secs(0);
        tr.detect(
            &[image("a", None), image("b", Some(50)), image("", Some(9))],
            &refs(&[]),
            now,
        );
        assert_eq!(tr.len(), 2, "an image without an id is not tracked");
        let plan = tr.plan(Need::Bytes(40), now, &settings(0));
        assert_eq!(ids(&plan), ["b"]);
        let plan = tr.plan(Need::Bytes(60), now, &settings(0));
        assert_eq!(ids(&plan), ["b", "a"]);
        assert!(!plan.enough);
        assert_eq!(plan.bytes, 50);
    }

    #[test]
    fn images_present_at_the_first_detection_count_as_old() {
        // topolet restarted at 10 s with two images on the node; a third is pulled at 40 s.
        let mut tr = ImageTracker::new();
        tr.detection_attempted(Timestamp::from_secs(5));
        let at_start = [image("a", Some(100)), image("b", Some(100))];
        tr.detect(&at_start, &refs(&[]), Timestamp::from_secs(10));
        let mut later = at_start.to_vec();
        later.push(image("new", Some(100)));
        let now = Timestamp::from_secs(40);
        tr.detect(&later, &refs(&[]), now);
        let plan = tr.plan(Need::All, now, &settings(120));
        assert_eq!(ids(&plan), ["a", "b"], "the pulled image is young");
        assert_eq!(plan.kept_young, 1);
    }

    #[test]
    fn a_removed_image_is_forgotten_and_detection_is_periodic() {
        let mut tr = ImageTracker::new();
        assert!(tr.detection_due(Timestamp::from_secs(0)));
        tr.detect(&[image("a", Some(1))], &refs(&[]), Timestamp::from_secs(0));
        assert!(!tr.detection_due(Timestamp::from_secs(299)));
        assert!(tr.detection_due(Timestamp::from_secs(300)));
        tr.detect(&[], &refs(&[]), Timestamp::from_secs(5));
        assert!(tr.is_empty());
    }

    fn c(id: &str, sandbox: &str, name: &str, running: bool, at: i64, img: &str) -> ContainerInfo {
        ContainerInfo {
            id: id.into(),
            sandbox_id: sandbox.into(),
            name: name.into(),
            running,
            created_at: at,
            image_refs: vec![img.into()],
        }
    }

    fn sb(id: &str, uid: &str, ready: bool, at: i64) -> SandboxInfo {
        SandboxInfo {
            id: id.into(),
            pod_uid: uid.into(),
            ready,
            created_at: at,
        }
    }

    #[test]
    fn a_live_pod_keeps_its_newest_dead_container_and_its_image() {
        let containers = [
            c("old", "s1", "app", false, 1, "img-old"),
            c("new", "s1", "app", false, 2, "img-new"),
            c("run", "s1", "side", true, 3, "img-side"),
            c("other", "s9", "x", false, 1, "img-x"),
        ];
        let sandboxes = [sb("s1", "u1", true, 0)];
        let plan = dead_containers(&containers, &sandboxes, |uid| uid == "u1");
        assert_eq!(plan.containers, ["old"]);
        assert!(plan.sandboxes.is_empty());
        let used = images_in_use(&containers, &plan);
        assert_eq!(used, refs(&["img-new", "img-side", "img-x"]));
    }

    #[test]
    fn a_dead_pod_loses_every_dead_container_and_its_sandboxes() {
        let containers = [
            c("a1", "s1", "app", false, 1, "i"),
            c("a2", "s2", "app", false, 2, "i"),
        ];
        let sandboxes = [sb("s1", "u1", false, 0), sb("s2", "u1", false, 1)];
        let plan = dead_containers(&containers, &sandboxes, |_| false);
        assert_eq!(plan.containers, ["a2", "a1"]);
        assert_eq!(plan.sandboxes, ["s1", "s2"]);
        // Alive: the newest container and the newest sandbox stay; the old sandbox still holds
        // nothing once a1 goes.
        let plan = dead_containers(&containers, &sandboxes, |_| true);
        assert_eq!(plan.containers, ["a1"]);
        assert_eq!(plan.sandboxes, ["s1"]);
    }

    #[test]
    fn a_ready_sandbox_or_one_holding_a_container_is_never_removed() {
        let containers = [c("r", "s1", "app", true, 1, "i")];
        let sandboxes = [sb("s1", "u1", false, 0), sb("s2", "u1", true, 1)];
        let plan = dead_containers(&containers, &sandboxes, |_| false);
        assert!(plan.containers.is_empty());
        assert!(plan.sandboxes.is_empty());
    }

    #[test]
    fn pressure_is_gone_only_past_the_minimum_reclaim() {
        let config = EvictionConfig {
            thresholds: vec![imagefs("500Mi", Some("100Mi"))],
            ..EvictionConfig::default()
        };
        let obs = |available: u64| -> Observations {
            [(
                Signal::ImageFsAvailable,
                SignalObservation {
                    available: available as i64,
                    capacity: 1000 * MI,
                    time: None,
                },
            )]
            .into()
        };
        let s = Signal::ImageFsAvailable;
        assert!(still_under_pressure(&config, s, &obs(450 * MI)));
        assert!(
            still_under_pressure(&config, s, &obs(550 * MI)),
            "over the threshold, under its minimum reclaim"
        );
        assert!(!still_under_pressure(&config, s, &obs(600 * MI)));
        assert!(still_under_pressure(&config, s, &Observations::new()));
    }
}
