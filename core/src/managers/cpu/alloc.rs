//! Topology-aware choice of `n` CPUs out of a free set: [`take_by_topology`].
//!
//! Mirrors `pkg/kubelet/cm/cpumanager/cpu_assignment.go` (`takeByTopologyNUMAPacked`,
//! `takeByTopologyNUMADistributed`, the `CPUSortingStrategySpread` sorter and the uncore-cache
//! steps). Pure: no I/O, no clock, no globals; the same inputs always give the same set.
//!
//! # Packed algorithm (the default)
//! The machine is a hierarchy of levels, outermost first: sockets and NUMA nodes (whichever is
//! larger comes first, as the kubelet's `numaFirst`/`socketsFirst`), L3 (uncore) groups when
//! `prefer_align_cpus_by_uncorecache` is set, cores, then threads. Inside the current scope (at
//! first: every free CPU), at each level:
//! 1. whole free groups are taken while the request still needs at least a group's worth
//!    (whole sockets, then whole NUMA nodes, whole L3 groups, whole cores), lowest id first;
//! 2. the rest goes to the **best-fitting** group: among the groups whose free CPUs can hold the
//!    whole remainder, the one where it would share the fewest cores with other containers (so
//!    whole free cores of one node win over single threads of another node's partly used cores,
//!    as the kubelet's take-whole-cores-first step), then the one with the fewest free CPUs
//!    (ties: lowest id), and the algorithm descends into it;
//! 3. if no single group can hold the remainder, it spans the minimum number of groups: it picks
//!    the smallest group that still lets the remainder fit in the fewest groups, takes all of its
//!    free CPUs, and repeats; the last group is again a best fit and is descended into. If
//!    that would split cores (take threads of partly used ones) while the scope's whole free
//!    cores can hold the request, whole free cores are taken first wherever they are, then the
//!    remainder, when that splits fewer cores: the kubelet's takeFullCores comes before any
//!    partial core, whatever made the others busy (another container or the reservation).
//! 4. **Packing floor** (the default packed mode; not with `distribute_cpus_across_cores`, which
//!    spreads on purpose, nor `prefer_align_cpus_by_uncorecache`, where the kubelet itself puts
//!    the L3 group before whole cores): the result must be as packed as `n` CPUs of the free set
//!    can be, i.e. hold `min(n / threads per core, whole free cores)` whole cores and touch the
//!    fewest cores in all (those whole cores, then the fewest others the rest fits in, largest
//!    first). Steps 1–3 choose NUMA nodes and sockets first; where that costs whole cores or
//!    touches more cores (e.g. four threads per core, both sockets fragmented: one socket's
//!    whole core plus threads of its partly used cores, against one whole core of each socket),
//!    the whole cores are placed by steps 1–3 over the whole free cores only, and the rest goes
//!    to the fewest other cores, preferring the NUMA nodes and sockets already used.
//!
//! The floor mirrors the kubelet's packed rule, `takeByTopologyNUMAPacked` in
//! `pkg/kubelet/cm/cpumanager/cpu_assignment.go`: whole NUMA nodes and sockets
//! (`takeFullFirstLevel`/`takeFullSecondLevel`), then whole cores (`takeFullCores`: as many as
//! the request holds), then single threads (`takeRemainingCPUs`, cores with the fewest free
//! threads first within the tightest socket/NUMA node). That rule takes the same number of whole
//! cores as the floor and can only touch as many cores or more, so topolet is at least as packed
//! as the kubelet on every machine whose cores have equal thread counts; the property test
//! `at_least_as_packed_as_the_kubelet` checks this against a reference model of those functions
//! (`kubelet_packed`, test-only) over generated machines with up to four threads per core. On
//! machines whose cores differ in thread count the kubelet's `CPUsPerCore` is an average and
//! there is no floor: steps 1–3 alone.
//!
//! Compared with the kubelet: its sorters also visit the group with the fewest free CPUs first
//! (ascending free count, then id), so on an unfragmented machine both pick the same CPUs (see the
//! transcribed table in the tests). The difference is that the kubelet *fills* groups in that
//! order, so a request that fits in one socket/NUMA node/L3 group can still be split across the
//! most-used ones (it only avoids this when the Topology Manager passes an affinity), whereas
//! step 2 keeps such a request inside one group, and step 3 never spans more groups than needed
//! (unless step 4 needs another group's whole cores or fuller cores).
//!
//! # Options
//! - `full_pcpus_only`: only whole free cores are candidates; a request that is not a multiple of
//!   the threads per core, or larger than the CPUs on whole free cores, is an
//!   [`CpuAllocError::SmtAlignment`] (the kubelet's `SMTAlignmentError`).
//! - `distribute_cpus_across_cores`: at the core level, one thread per core first (round robin,
//!   fully free cores first), instead of whole cores (the kubelet's spread sorting strategy).
//! - `distribute_cpus_across_numa`: the kubelet's KEP-2902 algorithm — the minimum number of NUMA
//!   nodes that can share the request evenly (in groups of a core's threads with
//!   `full_pcpus_only`), remainder placed to minimise the standard deviation of free CPUs per
//!   node; packed per node.
//! - `prefer_align_cpus_by_uncorecache`: adds the L3 level, so a request lands in a single L3
//!   group when one can hold it, else in as few L3 groups as possible.
//! - `align_by_socket`: used by the policy (alignment to the sockets of a NUMA affinity and
//!   socket-aligned hints); in this module sockets are already the outer level whenever NUMA
//!   nodes are smaller than sockets.

use crate::machine::cpuset::CpuSet;
use crate::machine::topology::Topology;

/// Allocation options, named as the kubelet's static-policy options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocOptions {
    pub full_pcpus_only: bool,
    pub distribute_cpus_across_numa: bool,
    pub distribute_cpus_across_cores: bool,
    pub align_by_socket: bool,
    pub prefer_align_cpus_by_uncorecache: bool,
}

/// Why `n` CPUs could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuAllocError {
    #[error("not enough cpus available to satisfy request: requested {requested}, available {available} (free: {free:?})")]
    NotEnough {
        requested: usize,
        available: usize,
        free: String,
    },
    #[error("smt alignment error: requested {requested} cpus, full-pcpus-only needs a multiple of {cpus_per_core} cpus per core and {available_physical} cpus are free on whole cores")]
    SmtAlignment {
        requested: usize,
        cpus_per_core: usize,
        available_physical: usize,
    },
}

const NONE: u32 = u32::MAX;

/// One level of the hierarchy: a partition of the online CPUs into groups.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Level {
    /// CPU id → group index (`NONE` for ids that are not online).
    group_of: Vec<u32>,
    /// Group index → its CPUs.
    groups: Vec<CpuSet>,
    /// Group index → its size (`groups[g].len()`), cached.
    sizes: Vec<usize>,
    /// Group index → a stable id used to break ties (kernel id for sockets/NUMA nodes, dense
    /// index otherwise).
    ids: Vec<usize>,
}

impl Level {
    fn new(topo: &Topology, groups: Vec<(usize, CpuSet)>) -> Level {
        let max = topo.cpus().iter().next_back().map_or(0, |c| c + 1);
        let mut group_of = vec![NONE; max];
        for (g, (_, set)) in groups.iter().enumerate() {
            for cpu in set.iter() {
                group_of[cpu] = g as u32;
            }
        }
        Level {
            group_of,
            sizes: groups.iter().map(|(_, s)| s.len()).collect(),
            ids: groups.iter().map(|(id, _)| *id).collect(),
            groups: groups.into_iter().map(|(_, s)| s).collect(),
        }
    }

    fn group(&self, cpu: usize) -> Option<usize> {
        match self.group_of.get(cpu) {
            Some(&g) if g != NONE => Some(g as usize),
            _ => None,
        }
    }

    /// Free CPUs per group within `scope`.
    fn counts(&self, scope: &CpuSet) -> Vec<usize> {
        let mut counts = vec![0usize; self.groups.len()];
        for cpu in scope.iter() {
            if let Some(g) = self.group(cpu) {
                counts[g] += 1;
            }
        }
        counts
    }
}

/// Derived, read-only index of a [`Topology`] for fast allocation (a pure function of the
/// topology: build it once and reuse it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuIndex {
    online: CpuSet,
    sockets: Level,
    numa: Level,
    l3: Level,
    cores: Level,
    /// NUMA nodes are at least as large as sockets (the kubelet's `numaFirst`).
    numa_first: bool,
    threads_per_core: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LevelKind {
    Socket,
    Numa,
    L3,
    Core,
}

impl CpuIndex {
    pub fn new(topo: &Topology) -> CpuIndex {
        let sockets = Level::new(
            topo,
            topo.socket_ids()
                .map(|s| (s, topo.socket_cpus(s)))
                .collect(),
        );
        let numa = Level::new(
            topo,
            topo.numa_ids().map(|n| (n, topo.numa_cpus(n))).collect(),
        );
        let l3 = Level::new(topo, topo.l3_groups().iter().cloned().enumerate().collect());
        let cores = Level::new(topo, topo.cores().iter().cloned().enumerate().collect());
        CpuIndex {
            online: topo.cpus().clone(),
            numa_first: sockets.groups.len() >= numa.groups.len(),
            sockets,
            numa,
            l3,
            cores,
            threads_per_core: topo.max_threads_per_core(),
        }
    }

    /// Every online CPU.
    pub fn online(&self) -> &CpuSet {
        &self.online
    }

    pub fn threads_per_core(&self) -> usize {
        self.threads_per_core
    }

    /// The CPUs of `available` that lie on cores whose every thread is in `available`.
    pub fn whole_cores(&self, available: &CpuSet) -> CpuSet {
        let counts = self.cores.counts(available);
        let mut out = CpuSet::new();
        for (g, &c) in counts.iter().enumerate() {
            if c > 0 && c == self.cores.sizes[g] {
                out.extend_from(&self.cores.groups[g]);
            }
        }
        out
    }

    /// NUMA node (kernel id) of `cpu`.
    pub fn numa_of(&self, cpu: usize) -> Option<usize> {
        self.numa.group(cpu).map(|g| self.numa.ids[g])
    }

    /// The CPUs of the NUMA nodes (kernel ids) `nodes`.
    pub fn numa_cpus<I: IntoIterator<Item = usize>>(&self, nodes: I) -> CpuSet {
        let mut out = CpuSet::new();
        for n in nodes {
            if let Some(g) = self.numa.ids.iter().position(|&id| id == n) {
                out.extend_from(&self.numa.groups[g]);
            }
        }
        out
    }

    /// The CPUs of every socket holding a CPU of `cpus`.
    pub fn socket_closure(&self, cpus: &CpuSet) -> CpuSet {
        self.closure(&self.sockets, cpus)
    }

    /// The CPUs of every NUMA node holding a CPU of `cpus`.
    pub fn numa_closure(&self, cpus: &CpuSet) -> CpuSet {
        self.closure(&self.numa, cpus)
    }

    /// The CPUs of every L3 group holding a CPU of `cpus`.
    pub fn l3_closure(&self, cpus: &CpuSet) -> CpuSet {
        self.closure(&self.l3, cpus)
    }

    /// The CPUs of every core holding a CPU of `cpus`.
    pub fn core_closure(&self, cpus: &CpuSet) -> CpuSet {
        self.closure(&self.cores, cpus)
    }

    fn closure(&self, level: &Level, cpus: &CpuSet) -> CpuSet {
        let counts = level.counts(cpus);
        let mut out = CpuSet::new();
        for (g, &c) in counts.iter().enumerate() {
            if c > 0 {
                out.extend_from(&level.groups[g]);
            }
        }
        out
    }

    fn level(&self, kind: LevelKind) -> &Level {
        match kind {
            LevelKind::Socket => &self.sockets,
            LevelKind::Numa => &self.numa,
            LevelKind::L3 => &self.l3,
            LevelKind::Core => &self.cores,
        }
    }

    fn levels(&self, opts: &AllocOptions) -> Vec<LevelKind> {
        let mut v = if self.numa_first {
            vec![LevelKind::Numa, LevelKind::Socket]
        } else {
            vec![LevelKind::Socket, LevelKind::Numa]
        };
        if opts.prefer_align_cpus_by_uncorecache {
            v.push(LevelKind::L3);
        }
        v.push(LevelKind::Core);
        v
    }
}

/// Takes `n` CPUs out of `available` (see the module docs). Builds a [`CpuIndex`] on every call;
/// callers that allocate repeatedly use [`take_by_topology_indexed`].
pub fn take_by_topology(
    topo: &Topology,
    available: &CpuSet,
    n: usize,
    opts: &AllocOptions,
) -> Result<CpuSet, CpuAllocError> {
    take_by_topology_indexed(&CpuIndex::new(topo), available, n, opts)
}

/// [`take_by_topology`] with a prebuilt index.
pub fn take_by_topology_indexed(
    idx: &CpuIndex,
    available: &CpuSet,
    n: usize,
    opts: &AllocOptions,
) -> Result<CpuSet, CpuAllocError> {
    let mut free = available.intersection(&idx.online);
    let tpc = idx.threads_per_core.max(1);
    if opts.full_pcpus_only {
        free = idx.whole_cores(&free);
        if !n.is_multiple_of(tpc) || n > free.len() {
            return Err(CpuAllocError::SmtAlignment {
                requested: n,
                cpus_per_core: tpc,
                available_physical: free.len(),
            });
        }
    }
    if n == 0 {
        return Ok(CpuSet::new());
    }
    if n > free.len() {
        return Err(CpuAllocError::NotEnough {
            requested: n,
            available: free.len(),
            free: free.to_string(),
        });
    }
    if opts.distribute_cpus_across_numa {
        let group = if opts.full_pcpus_only { tpc } else { 1 };
        return Ok(take_distributed(idx, &free, n, group, opts));
    }
    Ok(take_packed(idx, &free, n, opts))
}

fn take_packed(idx: &CpuIndex, free: &CpuSet, n: usize, opts: &AllocOptions) -> CpuSet {
    let levels = idx.levels(opts);
    let mut out = CpuSet::new();
    fill(idx, &levels, free, n, 0, opts, &mut out);
    if opts.distribute_cpus_across_cores || opts.prefer_align_cpus_by_uncorecache {
        return out;
    }
    let Some(floor) = packing_floor(idx, free, n) else {
        return out;
    };
    if packing_of(idx, &out) == floor {
        return out;
    }
    match take_cores_packed(idx, &levels, free, n, floor.whole, opts) {
        Some(packed) if packed.len() == n => packed,
        _ => out,
    }
}

/// How packed a set of CPUs is: the cores it holds a CPU of, and the cores it holds whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Packing {
    touched: usize,
    whole: usize,
}

fn packing_of(idx: &CpuIndex, cpus: &CpuSet) -> Packing {
    let counts = idx.cores.counts(cpus);
    Packing {
        touched: counts.iter().filter(|&&c| c > 0).count(),
        whole: counts
            .iter()
            .enumerate()
            .filter(|&(g, &c)| c > 0 && c == idx.cores.sizes[g])
            .count(),
    }
}

/// The most packed any `n` CPUs of `free` can be (step 4 of the module docs): as many whole free
/// cores as the request holds (`whole`, what the kubelet's `takeFullCores` takes), and the
/// fewest cores in all (`touched`: those, then the fewest other cores the rest fits in, largest
/// first). `None` when the cores differ in thread count (hybrid CPUs, offline threads: the
/// kubelet's `CPUsPerCore` is then an average and there is no such rule to match).
fn packing_floor(idx: &CpuIndex, free: &CpuSet, n: usize) -> Option<Packing> {
    let tpc = idx.threads_per_core.max(1);
    if idx.cores.sizes.iter().any(|&s| s != tpc) {
        return None;
    }
    let counts = idx.cores.counts(free);
    let whole_free = counts.iter().filter(|&&c| c == tpc).count();
    let whole = (n / tpc).min(whole_free);
    // The other cores, largest first (whole ones left over included: their count is tpc).
    let mut rest: Vec<usize> = counts.iter().copied().filter(|&c| c > 0).collect();
    rest.sort_unstable_by(|a, b| b.cmp(a));
    let mut left = n - whole * tpc;
    let mut touched = whole;
    for c in rest.into_iter().skip(whole) {
        if left == 0 {
            break;
        }
        left = left.saturating_sub(c);
        touched += 1;
    }
    Some(Packing { touched, whole })
}

/// `n` CPUs of `free` as packed as [`packing_floor`] says they can be: `whole` whole free cores,
/// placed as [`fill`] places them (fewest sockets/NUMA nodes, best fit), then the rest in the
/// fewest other cores, each pick the one that keeps that count, preferring cores of the NUMA
/// nodes and sockets already used, then the fullest fit (fewest free threads, leaving larger
/// cores whole), then the tightest NUMA node, then the lowest id.
fn take_cores_packed(
    idx: &CpuIndex,
    levels: &[LevelKind],
    free: &CpuSet,
    n: usize,
    whole: usize,
    opts: &AllocOptions,
) -> Option<CpuSet> {
    let tpc = idx.threads_per_core.max(1);
    let mut out = CpuSet::new();
    let whole_cores = idx.whole_cores(free);
    fill(idx, levels, &whole_cores, whole * tpc, 0, opts, &mut out);
    let left = free.difference(&out);
    let mut need = n.checked_sub(out.len())?;
    let counts = idx.cores.counts(&left);
    let numa_free = idx.numa.counts(&left);
    let mut pool: Vec<usize> = (0..counts.len()).filter(|&g| counts[g] > 0).collect();
    while need > 0 && !pool.is_empty() {
        // Cores still needed, `k` (largest first); a pick must keep that count: its free
        // threads plus the `k - 1` largest counts of the other cores hold the rest.
        let mut by_size: Vec<usize> = pool.iter().map(|&g| counts[g]).collect();
        by_size.sort_unstable_by(|a, b| b.cmp(a));
        let (mut k, mut acc) = (0, 0);
        while acc < need && k < by_size.len() {
            acc += by_size[k];
            k += 1;
        }
        let top = |j: usize| -> usize { by_size.iter().take(j).sum() };
        let (top_k, top_k1) = (top(k), top(k.saturating_sub(1)));
        let largest_others = |g: usize| -> usize {
            // Removing one instance of `counts[g]`: it was among the k - 1 largest, or not.
            match k.checked_sub(2).and_then(|i| by_size.get(i)) {
                Some(&kth) if counts[g] >= kth => top_k - counts[g],
                _ => top_k1,
            }
        };
        let used_numa = idx.numa.counts(&out);
        let used_socket = idx.sockets.counts(&out);
        let first_cpu = |g: usize| idx.cores.groups[g].first().unwrap_or(0);
        let key = |g: usize| {
            let cpu = first_cpu(g);
            let numa = idx.numa.group(cpu).unwrap_or(0);
            let socket = idx.sockets.group(cpu).unwrap_or(0);
            (
                used_numa.get(numa).copied().unwrap_or(0) == 0,
                used_socket.get(socket).copied().unwrap_or(0) == 0,
                counts[g],
                numa_free.get(numa).copied().unwrap_or(0),
                idx.cores.ids[g],
                g,
            )
        };
        let Some(g) = pool
            .iter()
            .copied()
            .filter(|&g| counts[g] + largest_others(g) >= need)
            .min_by_key(|&g| key(g))
        else {
            break;
        };
        let sub = left.intersection(&idx.cores.groups[g]);
        let m = need.min(sub.len());
        out.extend_from(&sub.lowest(m));
        need -= m;
        pool.retain(|&o| o != g);
    }
    (need == 0).then_some(out)
}

/// Adds `n` CPUs of `scope` (which holds at least `n`) to `out`, descending from `levels[depth]`.
fn fill(
    idx: &CpuIndex,
    levels: &[LevelKind],
    scope: &CpuSet,
    n: usize,
    depth: usize,
    opts: &AllocOptions,
    out: &mut CpuSet,
) {
    if n == 0 {
        return;
    }
    let have = scope.len();
    if n >= have {
        out.extend_from(scope);
        return;
    }
    let Some(&kind) = levels.get(depth) else {
        // Threads of one core: lowest ids.
        out.extend_from(&scope.lowest(n));
        return;
    };
    let level = idx.level(kind);
    if kind == LevelKind::Core && opts.distribute_cpus_across_cores {
        spread_threads(level, scope, n, out);
        return;
    }
    let mut counts = level.counts(scope);
    let mut need = n;

    // 1. Whole free groups, lowest id first, while at least a group's worth is needed.
    let mut full: Vec<usize> = (0..counts.len())
        .filter(|&g| counts[g] > 0 && counts[g] == level.sizes[g])
        .collect();
    full.sort_by_key(|&g| (level.ids[g], g));
    for g in full {
        if need >= level.sizes[g] {
            out.extend_from(&level.groups[g]);
            need -= level.sizes[g];
            counts[g] = 0;
        }
        if need == 0 {
            return;
        }
    }

    // 2./3. Best fit, spanning the fewest groups when no single group can hold the rest.
    {
        let mut cands: Vec<usize> = (0..counts.len()).filter(|&g| counts[g] > 0).collect();
        if cands.is_empty() {
            return; // unreachable: scope held at least n
        }
        // Fewest groups needed: largest-first prefix.
        let mut by_size: Vec<usize> = cands.iter().map(|&g| counts[g]).collect();
        by_size.sort_unstable_by(|a, b| b.cmp(a));
        let mut k = 0;
        let mut acc = 0;
        while acc < need && k < by_size.len() {
            acc += by_size[k];
            k += 1;
        }
        // Among the groups that hold it all, fewest split cores first (a request that can have
        // whole cores is not given single threads of partly used ones), then best fit.
        let split: Vec<usize> = if k <= 1 && kind != LevelKind::Core && idx.threads_per_core > 1 {
            (0..counts.len())
                .map(|g| {
                    if counts[g] >= need {
                        let mut trial = CpuSet::new();
                        let sub = scope.intersection(&level.groups[g]);
                        fill(idx, levels, &sub, need, depth + 1, opts, &mut trial);
                        split_count(idx, &trial)
                    } else {
                        usize::MAX
                    }
                })
                .collect()
        } else {
            vec![0; counts.len()]
        };
        cands.sort_by_key(|&g| (split[g], counts[g], level.ids[g], g));
        if k <= 1
            && opts.prefer_align_cpus_by_uncorecache
            && levels[depth..].contains(&LevelKind::L3)
            && kind != LevelKind::L3
        {
            // Prefer the group where the request needs the fewest L3 groups.
            let l3_counts = idx.l3.counts(scope);
            let mut per_group: Vec<Vec<usize>> = vec![Vec::new(); counts.len()];
            for (l, &c) in l3_counts.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                if let Some(g) = idx.l3.groups[l].first().and_then(|cpu| level.group(cpu)) {
                    per_group[g].push(c);
                }
            }
            let l3_needed = |g: usize| {
                let v = &mut per_group[g].clone();
                v.sort_unstable_by(|a, b| b.cmp(a));
                let (mut acc, mut k) = (0, 0);
                while acc < need && k < v.len() {
                    acc += v[k];
                    k += 1;
                }
                k
            };
            cands.sort_by_key(|&g| (l3_needed(g), split[g], counts[g], level.ids[g], g));
        }
        if k <= 1 {
            // Best fit: the smallest group that holds it all.
            let Some(&g) = cands.iter().find(|&&g| counts[g] >= need) else {
                return;
            };
            let sub = scope.intersection(&level.groups[g]);
            fill(idx, levels, &sub, need, depth + 1, opts, out);
            return;
        }
        // Span k groups (below). When that would split cores while the whole free cores of
        // the scope can hold the request, whole cores win, wherever they are (the kubelet's
        // takeFullCores, cpu_assignment.go, comes before any partial core: e.g. its
        // `ExpectAllocAllFullCoresFromThreeSockets`): a split core is a noisy neighbour, a
        // further socket only distance.
        let mut spanned = out.clone();
        span(
            idx,
            levels,
            scope,
            level,
            &counts,
            cands,
            k,
            need,
            depth,
            opts,
            &mut spanned,
        );
        let rest = scope.difference(out);
        let whole = idx.whole_cores(&rest);
        let taken = spanned.difference(out);
        // (At least one whole core to take: else "whole cores first" is this very call.)
        let tpc = idx.threads_per_core.max(1);
        if kind != LevelKind::Core
            && need >= tpc
            && whole.len() >= tpc
            && whole != rest
            && split_count(idx, &taken) > 0
        {
            let first = whole_cores_first(idx, levels, &rest, &whole, need, depth, opts);
            if split_count(idx, &first) < split_count(idx, &taken) {
                out.extend_from(&first);
                return;
            }
        }
        *out = spanned;
    }
}

/// `need` CPUs of `rest` (its whole free cores `whole`), whole cores first: as many as the
/// request holds, packed (`fill` over `whole`), then the remainder from what is left.
fn whole_cores_first(
    idx: &CpuIndex,
    levels: &[LevelKind],
    rest: &CpuSet,
    whole: &CpuSet,
    need: usize,
    depth: usize,
    opts: &AllocOptions,
) -> CpuSet {
    let tpc = idx.threads_per_core.max(1);
    let w = (need / tpc * tpc).min(whole.len());
    let mut got = CpuSet::new();
    fill(idx, levels, whole, w, depth, opts, &mut got);
    if need > w {
        let left = rest.difference(&got);
        fill(idx, levels, &left, need - w, depth, opts, &mut got);
    }
    got
}

/// Adds `need` CPUs of `scope` to `out` across the `k` groups of `level` the request needs at
/// least: repeatedly the smallest group that still lets the rest fit in the remaining count,
/// the last one a best fit.
#[allow(clippy::too_many_arguments)]
fn span(
    idx: &CpuIndex,
    levels: &[LevelKind],
    scope: &CpuSet,
    level: &Level,
    counts: &[usize],
    cands: Vec<usize>,
    k: usize,
    mut need: usize,
    depth: usize,
    opts: &AllocOptions,
    out: &mut CpuSet,
) {
    {
        let mut chosen: Vec<usize> = Vec::with_capacity(k);
        let mut left = need;
        let mut pool = cands.clone();
        for step in 0..k {
            let rest = k - step - 1;
            let pick = pool.iter().copied().find(|&g| {
                let mut v: Vec<usize> = pool
                    .iter()
                    .filter(|&&o| o != g)
                    .map(|&o| counts[o])
                    .collect();
                v.sort_unstable_by(|a, b| b.cmp(a));
                counts[g] + v.iter().take(rest).sum::<usize>() >= left
            });
            let Some(g) = pick else {
                break;
            };
            left = left.saturating_sub(counts[g]);
            pool.retain(|&o| o != g);
            chosen.push(g);
        }
        let Some((&last, firsts)) = chosen.split_last() else {
            return;
        };
        // Fill the first groups with their whole cores (fragments wait), best fit in the last,
        // then fragments if still short: whole cores before split ones, as the kubelet.
        for &g in firsts {
            let sub = scope.intersection(&level.groups[g]).difference(out);
            let whole = idx.whole_cores(&sub);
            let m = need.min(whole.len());
            fill(idx, levels, &whole, m, depth + 1, opts, out);
            need -= m;
        }
        let sub = scope.intersection(&level.groups[last]).difference(out);
        let m = need.min(sub.len());
        fill(idx, levels, &sub, m, depth + 1, opts, out);
        need -= m;
        if need > 0 {
            let mut rest = CpuSet::new();
            for &g in firsts {
                rest.extend_from(&level.groups[g]);
            }
            let rest = rest.intersection(scope).difference(out);
            let m = need.min(rest.len());
            fill(idx, levels, &rest, m, depth + 1, opts, out);
        }
    }
}

/// The cores of `cpus` it does not own whole (another thread of the core is not in `cpus`).
fn split_count(idx: &CpuIndex, cpus: &CpuSet) -> usize {
    let counts = idx.cores.counts(cpus);
    counts
        .iter()
        .enumerate()
        .filter(|&(g, &c)| c > 0 && c < idx.cores.sizes[g])
        .count()
}

/// One thread per core first: round `r` takes the `r`-th free thread of each core, cores
/// ordered fully-free first, then by id.
fn spread_threads(level: &Level, scope: &CpuSet, n: usize, out: &mut CpuSet) {
    let counts = level.counts(scope);
    let mut cores: Vec<usize> = (0..counts.len()).filter(|&g| counts[g] > 0).collect();
    cores.sort_by_key(|&g| (counts[g] != level.sizes[g], level.ids[g], g));
    let threads: Vec<Vec<usize>> = cores
        .iter()
        .map(|&g| scope.intersection(&level.groups[g]).iter().collect())
        .collect();
    let mut need = n;
    let mut round = 0;
    while need > 0 {
        let mut progressed = false;
        for t in &threads {
            if let Some(&cpu) = t.get(round) {
                out.insert(cpu);
                need -= 1;
                progressed = true;
                if need == 0 {
                    return;
                }
            }
        }
        if !progressed {
            return;
        }
        round += 1;
    }
}

/// NUMA nodes with free CPUs, as dense indices, in the kubelet's `sortAvailableNUMANodes` order.
fn sorted_numa(idx: &CpuIndex, free: &CpuSet) -> Vec<usize> {
    let ncount = idx.numa.counts(free);
    let mut nodes: Vec<usize> = (0..ncount.len()).filter(|&g| ncount[g] > 0).collect();
    if idx.numa_first {
        nodes.sort_by_key(|&g| (ncount[g], idx.numa.ids[g]));
    } else {
        let scount = idx.sockets.counts(free);
        let socket_of = |g: usize| {
            idx.numa.groups[g]
                .first()
                .and_then(|c| idx.sockets.group(c))
                .unwrap_or(0)
        };
        nodes.sort_by_key(|&g| {
            let s = socket_of(g);
            (scount[s], idx.sockets.ids[s], ncount[g], idx.numa.ids[g])
        });
    }
    nodes
}

fn std_dev(xs: &[usize]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    let m = round(xs.iter().map(|&x| x as f64).sum::<f64>() / xs.len() as f64);
    let var = xs
        .iter()
        .map(|&x| (x as f64 - m) * (x as f64 - m))
        .sum::<f64>()
        / xs.len() as f64;
    round(var.sqrt())
}

/// Calls `f` on every `k`-subset of `items` in lexicographic order; stops when `f` returns false.
fn combinations(items: &[usize], k: usize, f: &mut dyn FnMut(&[usize]) -> bool) {
    fn rec(
        items: &[usize],
        k: usize,
        start: usize,
        acc: &mut Vec<usize>,
        f: &mut dyn FnMut(&[usize]) -> bool,
    ) -> bool {
        if acc.len() == k {
            return f(acc);
        }
        let left = k - acc.len();
        for i in start..items.len() {
            if items.len() - i < left {
                break;
            }
            acc.push(items[i]);
            let go = rec(items, k, i + 1, acc, f);
            acc.pop();
            if !go {
                return false;
            }
        }
        true
    }
    if k == 0 || k > items.len() {
        return;
    }
    rec(items, k, 0, &mut Vec::with_capacity(k), f);
}

/// The kubelet's `takeByTopologyNUMADistributed` (KEP-2902), packed within each node.
fn take_distributed(
    idx: &CpuIndex,
    free: &CpuSet,
    n: usize,
    group: usize,
    opts: &AllocOptions,
) -> CpuSet {
    let packed_opts = AllocOptions {
        distribute_cpus_across_numa: false,
        full_pcpus_only: false,
        ..*opts
    };
    if !n.is_multiple_of(group) {
        return take_packed(idx, free, n, &packed_opts);
    }
    let nodes = sorted_numa(idx, free);
    let counts = idx.numa.counts(free);
    // rangeNUMANodesNeededToSatisfy
    let total_nodes = idx.numa.groups.len().max(1);
    let total_cpus = idx.online.len();
    let groups_total = (total_cpus - 1) / group + 1;
    let groups_per_node = (groups_total - 1) / total_nodes + 1;
    let groups_needed = (n - 1) / group + 1;
    let min_nodes = (groups_needed - 1) / groups_per_node + 1;
    let max_nodes = groups_needed.min(nodes.len());

    for k in min_nodes..=max_nodes {
        let mut best_balance = f64::MAX;
        let mut best: Option<(Vec<usize>, Vec<usize>)> = None;
        combinations(&nodes, k, &mut |combo: &[usize]| {
            if best_balance == 0.0 {
                return false;
            }
            let avail: usize = combo.iter().map(|&g| counts[g]).sum();
            if avail < n {
                return true;
            }
            let groups_avail: usize = combo.iter().map(|&g| counts[g] / group).sum();
            if groups_avail * group < n {
                return true;
            }
            let distribution = (n / combo.len() / group) * group;
            if combo.iter().any(|&g| counts[g] < distribution) {
                return true;
            }
            let mut after: Vec<usize> = counts.clone();
            for &g in combo {
                after[g] -= distribution;
            }
            let values = |a: &Vec<usize>| -> Vec<usize> { nodes.iter().map(|&g| a[g]).collect() };
            let remainder = n - distribution * combo.len();
            let rem_combo: Vec<usize> = combo
                .iter()
                .copied()
                .filter(|&g| after[g] >= group)
                .collect();
            let mut local_best = f64::MAX;
            let mut local_rem: Vec<usize> = Vec::new();
            if remainder == 0 {
                local_best = std_dev(&values(&after));
            }
            let mut kk = rem_combo.len();
            while remainder > 0 && kk >= 1 {
                combinations(&rem_combo, kk, &mut |subset: &[usize]| {
                    let mut a = after.clone();
                    let mut r = remainder;
                    if subset.iter().map(|&g| a[g]).sum::<usize>() < r {
                        return true;
                    }
                    while r > 0 {
                        let mut moved = false;
                        for &g in subset {
                            if r == 0 {
                                break;
                            }
                            if a[g] < group {
                                continue;
                            }
                            a[g] -= group;
                            r -= group;
                            moved = true;
                        }
                        if !moved {
                            return true;
                        }
                    }
                    let b = std_dev(&values(&a));
                    if b < local_best {
                        local_best = b;
                        local_rem = subset.to_vec();
                    }
                    true
                });
                kk -= 1;
            }
            if local_best < best_balance {
                best_balance = local_best;
                best = Some((combo.to_vec(), local_rem));
            }
            true
        });
        let Some((combo, rem)) = best else {
            continue;
        };
        let mut out = CpuSet::new();
        let distribution = (n / combo.len() / group) * group;
        for &g in &combo {
            let node_free = free.difference(&out).intersection(&idx.numa.groups[g]);
            out.extend_from(&take_packed(idx, &node_free, distribution, &packed_opts));
        }
        let mut remainder = n - distribution * combo.len();
        while remainder > 0 {
            let mut moved = false;
            for &g in &rem {
                if remainder == 0 {
                    break;
                }
                let node_free = free.difference(&out).intersection(&idx.numa.groups[g]);
                if node_free.len() < group {
                    continue;
                }
                out.extend_from(&take_packed(idx, &node_free, group, &packed_opts));
                remainder -= group;
                moved = true;
            }
            if !moved {
                break;
            }
        }
        if out.len() == n {
            return out;
        }
    }
    take_packed(idx, free, n, &packed_opts)
}

/// Test machines with the kubelet's CPU numbering (`cpumanager/policy_test.go` fixtures).
#[cfg(test)]
pub(crate) mod kube_topos {
    use crate::machine::cpuset::CpuSet;
    use crate::machine::topology::{RawCpu, RawMachine, RawNode, Topology};
    use std::collections::BTreeMap;

    /// `(cpu, socket, numa, core, l3)`; cores are global ids as in the kubelet's `CPUDetails`.
    pub fn build(cpus: &[(usize, usize, usize, usize, Option<usize>)]) -> Topology {
        let mut nodes: BTreeMap<usize, CpuSet> = BTreeMap::new();
        let mut cores: BTreeMap<usize, CpuSet> = BTreeMap::new();
        let mut l3s: BTreeMap<usize, CpuSet> = BTreeMap::new();
        for &(id, _, numa, core, l3) in cpus {
            nodes.entry(numa).or_default().insert(id);
            cores.entry(core).or_default().insert(id);
            if let Some(l) = l3 {
                l3s.entry(l).or_default().insert(id);
            }
        }
        let raw = RawMachine {
            cpus: cpus
                .iter()
                .map(|&(id, socket, _, core, l3)| RawCpu {
                    id,
                    package: socket,
                    die: None,
                    core_id: core,
                    siblings: Some(cores[&core].clone()),
                    l3: l3.map(|l| (Some(l), l3s[&l].clone())),
                })
                .collect(),
            nodes: nodes
                .into_iter()
                .map(|(id, cpus)| RawNode {
                    id,
                    cpus,
                    memory_bytes: 1 << 30,
                    hugepages: BTreeMap::new(),
                    distances: Vec::new(),
                })
                .collect(),
            fallback_memory_bytes: 0,
            memory_capacity_bytes: None,
            devices: Vec::new(),
        };
        Topology::build(&raw).expect("test topology is consistent")
    }

    /// `topoSingleSocketHT`: 8 CPUs, 4 cores, siblings (i, i+4).
    pub fn single_socket_ht() -> Topology {
        build(&(0..8).map(|i| (i, 0, 0, i % 4, None)).collect::<Vec<_>>())
    }

    /// `topoDualSocketHT`: 12 CPUs, socket = NUMA = i % 2, core = i % 6.
    pub fn dual_socket_ht() -> Topology {
        build(
            &(0..12)
                .map(|i| (i, i % 2, i % 2, i % 6, None))
                .collect::<Vec<_>>(),
        )
    }

    /// `topoDualSocketNoHT`: 8 CPUs, socket 0 = 0-3, socket 1 = 4-7.
    pub fn dual_socket_no_ht() -> Topology {
        build(
            &(0..8)
                .map(|i| (i, i / 4, i / 4, i, None))
                .collect::<Vec<_>>(),
        )
    }

    /// `topoDualSocketMultiNumaPerSocketHT`: 80 CPUs, NUMA n = 10n..10n+9 and +40, sockets
    /// hold NUMA {0,1} and {2,3}, siblings (i, i+40).
    pub fn dual_socket_multi_numa_ht() -> Topology {
        build(
            &(0..80)
                .map(|i| {
                    let numa = (i % 40) / 10;
                    (i, numa / 2, numa, i % 40, None)
                })
                .collect::<Vec<_>>(),
        )
    }

    /// `topoQuadSocketFourWayHT` (a KNL SNC-4 machine): 288 CPUs, 4 sockets = NUMA nodes, 18
    /// cores of 4 threads each; `(core, [threads])` per socket, as in the kubelet's table.
    #[rustfmt::skip]
    const QUAD: [[(usize, [usize; 4]); 18]; 4] = [
        [(0, [0, 109, 169, 229]), (1, [50, 110, 170, 230]), (64, [1, 13, 25, 38]),
         (65, [2, 14, 26, 39]), (72, [9, 21, 33, 46]), (73, [10, 22, 34, 47]),
         (8, [57, 117, 177, 237]), (9, [58, 118, 178, 238]), (24, [71, 131, 191, 251]),
         (25, [72, 132, 192, 252]), (32, [79, 139, 199, 259]), (33, [80, 140, 200, 260]),
         (40, [87, 147, 207, 267]), (41, [88, 148, 208, 268]), (48, [95, 155, 215, 275]),
         (49, [96, 156, 216, 276]), (56, [103, 163, 223, 283]), (57, [104, 164, 224, 284])],
        [(66, [3, 15, 27, 40]), (67, [4, 16, 28, 41]), (74, [11, 23, 35, 48]),
         (75, [12, 24, 36, 49]), (2, [51, 111, 171, 231]), (3, [52, 112, 172, 232]),
         (10, [59, 119, 179, 239]), (11, [60, 120, 180, 240]), (18, [65, 125, 185, 245]),
         (19, [66, 126, 186, 246]), (26, [73, 133, 193, 253]), (27, [74, 134, 194, 254]),
         (34, [81, 141, 201, 261]), (35, [82, 142, 202, 262]), (42, [89, 149, 209, 269]),
         (43, [90, 150, 210, 270]), (50, [97, 157, 217, 277]), (51, [98, 158, 218, 278])],
        [(68, [5, 17, 29, 42]), (69, [6, 18, 30, 43]), (4, [53, 113, 173, 233]),
         (5, [54, 114, 174, 234]), (12, [61, 121, 181, 241]), (13, [62, 122, 182, 242]),
         (20, [67, 127, 187, 247]), (21, [68, 128, 188, 248]), (28, [75, 135, 195, 255]),
         (29, [76, 136, 196, 256]), (36, [83, 143, 203, 263]), (37, [84, 144, 204, 264]),
         (44, [91, 151, 211, 271]), (45, [92, 152, 212, 272]), (52, [99, 159, 219, 279]),
         (53, [100, 160, 220, 280]), (60, [105, 165, 225, 285]), (61, [106, 166, 226, 286])],
        [(70, [7, 19, 31, 44]), (71, [8, 20, 32, 45]), (63, [37, 108, 168, 228]),
         (62, [107, 167, 227, 287]), (6, [55, 115, 175, 235]), (7, [56, 116, 176, 236]),
         (14, [63, 123, 183, 243]), (15, [64, 124, 184, 244]), (22, [69, 129, 189, 249]),
         (23, [70, 130, 190, 250]), (30, [77, 137, 197, 257]), (31, [78, 138, 198, 258]),
         (38, [85, 145, 205, 265]), (39, [86, 146, 206, 266]), (46, [93, 153, 213, 273]),
         (47, [94, 154, 214, 274]), (54, [101, 161, 221, 281]), (55, [102, 162, 222, 282])],
    ];

    pub fn quad_socket_four_way_ht() -> Topology {
        let mut cpus = Vec::with_capacity(288);
        for (socket, cores) in QUAD.iter().enumerate() {
            for &(core, threads) in cores {
                cpus.extend(threads.iter().map(|&t| (t, socket, socket, core, None)));
            }
        }
        build(&cpus)
    }
}

#[cfg(test)]
mod tests {
    //! Transcribed from kubernetes `cpu_assignment_test.go` (`TestTakeByTopologyNUMAPacked`,
    //! `commonTakeByTopologyTestCases`, `TestTakeByTopologyWithSpreadPhysicalCPUsPreferredOption`,
    //! `TestTakeByTopologyNUMADistributed`). Topologies replicate the kubelet fixtures' numbering
    //! (see [`kube_topos`]); the uncore fixtures are rebuilt with [`SyntheticSpec`] from the shape
    //! their cases imply (same numbering: uncore caches of consecutive ids, siblings `i`/`i+n/2`).
    //!
    //! | kubelet case | result |
    //! |---|---|
    //! | common: more than available (error) | match (message names requested/available) |
    //! | common: zero / one / one-some-taken / two / all / two-one-core-free (single socket HT) | match |
    //! | common: socket of dual socket HT; socket / NUMA / NUMA-one-taken / socket+NUMA / socket+NUMA-core-taken (multi-NUMA) | match |
    //! | packed: one cpu, core from socket 0 | match |
    //! | packed: 4 full cores, 3 from first NUMA node | match |
    //! | packed: 32 full cores, 30 from first 3 NUMA nodes | match |
    //! | uncore: two full uncore caches + partial | match |
    //! | uncore: one cpu dual socket HT (kubelet: 1) | differ: 2, which fills the more-used socket 0 (kubelet's uncore path ignores socket fill there); same alignment (one thread, one socket) and less fragmentation |
    //! | uncore: first uncore of first socket / all uncore of first socket / first of second socket / first of available NUMA | match |
    //! | uncore SMT: best uncore group / multiple uncore groups | match |
    //! | spread: single socket 3 / dual socket 2,3,6,8 / no-HT 2 / multi-NUMA 8 | match |
    //! | distributed (group 1 and 2): every listed case except the 256-CPU "live machine" case (fixture not replicated) | match |
    //! | policy_static_test.go: `ExpectAllocAllFullCoresFromThreeSockets` (quad socket, four-way HT) | match (three whole cores over three sockets, not four split cores over two) |

    use super::kube_topos::*;
    use super::*;
    use crate::machine::topology::SyntheticSpec;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    fn packed() -> AllocOptions {
        AllocOptions::default()
    }

    fn check(topo: &Topology, opts: AllocOptions, avail: &str, n: usize, want: &str) {
        let got = take_by_topology(topo, &set(avail), n, &opts).unwrap();
        assert_eq!(got, set(want), "avail {avail} n {n} opts {opts:?}");
    }

    fn uncore(sockets: usize, numa: usize, l3: usize, cores: usize, t: usize) -> Topology {
        SyntheticSpec {
            sockets,
            numa_per_socket: numa,
            l3_per_numa: l3,
            cores_per_l3: cores,
            threads_per_core: t,
            memory_per_node: 1 << 30,
        }
        .build()
    }

    #[test]
    fn common_cases() {
        let s = single_socket_ht();
        let err = take_by_topology(&s, &set("0,2,4,6"), 5, &packed()).unwrap_err();
        assert_eq!(
            err,
            CpuAllocError::NotEnough {
                requested: 5,
                available: 4,
                free: "0,2,4,6".into()
            }
        );
        assert!(err.to_string().contains("requested 5, available 4"));
        check(&s, packed(), "0-7", 0, "");
        check(&s, packed(), "0-7", 1, "0");
        check(&s, packed(), "1,3,5-7", 1, "6");
        check(&s, packed(), "0-7", 2, "0,4");
        check(&s, packed(), "0-7", 8, "0-7");
        check(&s, packed(), "0-3,6", 2, "2,6");
        let d = dual_socket_ht();
        check(&d, packed(), "0-11", 6, "0,2,4,6,8,10");
        let m = dual_socket_multi_numa_ht();
        check(&m, packed(), "0-79", 40, "0-19,40-59");
        check(&m, packed(), "0-79", 20, "0-9,40-49");
        check(&m, packed(), "10-39,50-79", 20, "10-19,50-59");
        check(&m, packed(), "0-79", 60, "0-29,40-69");
        check(&m, packed(), "1-39,41-79", 60, "10-39,50-79");
    }

    #[test]
    fn packed_cases() {
        let d = dual_socket_ht();
        check(&d, packed(), "1-5,7-11", 1, "2");
        check(&d, packed(), "0-11", 8, "0,6,2,8,4,10,1,7");
        let m = dual_socket_multi_numa_ht();
        check(&m, packed(), "0-79", 64, "0-29,40-69,30,31,70,71");
    }

    #[test]
    fn uncore_cases() {
        let opts = AllocOptions {
            prefer_align_cpus_by_uncorecache: true,
            ..Default::default()
        };
        // topoUncoreSingleSocketNoSMT: 16 CPUs, 4 uncore caches of 4.
        check(&uncore(1, 1, 4, 4, 1), opts, "1-15", 10, "1,2,4-11");
        // Differs from kubelet (1), see the table.
        check(&dual_socket_ht(), opts, "1-5,7-11", 1, "2");
        // topoUncoreDualSocketNoSMT: 2 sockets × 2 uncore caches of 4.
        let ds = uncore(2, 1, 2, 4, 1);
        check(&ds, opts, "0-15", 4, "0-3");
        check(&ds, opts, "2-15", 6, "2-7");
        check(&ds, opts, "8-15", 4, "8-11");
        // topoUncoreSingleSocketMultiNuma: 2 NUMA nodes × 2 uncore caches of 4.
        check(&uncore(1, 2, 2, 4, 1), opts, "3,4-8,12", 2, "4,5");
        // topoUncoreSingleSocketSMT: 2 uncore caches × 4 cores × 2 threads.
        let smt = uncore(1, 1, 2, 4, 2);
        check(&smt, opts, "2-3,10-11,4-7,12-15", 6, "4,5,6,12,13,14");
        check(&smt, opts, "1-7,9-15", 10, "4-7,12-15,1,9");
    }

    #[test]
    fn spread_cases() {
        let opts = AllocOptions {
            distribute_cpus_across_cores: true,
            ..Default::default()
        };
        check(&single_socket_ht(), opts, "0-7", 3, "0-2");
        let d = dual_socket_ht();
        check(&d, opts, "0-11", 2, "0,2");
        check(&d, opts, "0-11", 3, "0,2,4");
        check(&d, opts, "0-11", 6, "0,2,4,6,8,10");
        check(&d, opts, "0-11", 8, "0,2,4,6,8,10,1,3");
        check(&dual_socket_no_ht(), opts, "0-7", 2, "0,1");
        check(&dual_socket_multi_numa_ht(), opts, "0-79", 8, "0-7");
    }

    fn dist(topo: &Topology, avail: &str, n: usize, group: usize, want: &str) {
        let free = set(avail);
        let opts = AllocOptions {
            distribute_cpus_across_numa: true,
            ..Default::default()
        };
        let got = take_distributed(&CpuIndex::new(topo), &free, n, group, &opts);
        assert_eq!(got, set(want), "avail {avail} n {n} group {group}");
    }

    #[test]
    fn distributed_cases() {
        let d = dual_socket_ht();
        let m = dual_socket_multi_numa_ht();
        // The common cases through the distributed path (group size 1).
        let s = single_socket_ht();
        dist(&s, "0-7", 1, 1, "0");
        dist(&s, "1,3,5-7", 1, 1, "6");
        dist(&s, "0-7", 2, 1, "0,4");
        dist(&s, "0-3,6", 2, 1, "2,6");
        dist(&d, "0-11", 6, 1, "0,2,4,6,8,10");
        dist(&m, "0-79", 40, 1, "0-19,40-59");
        dist(&m, "0-79", 20, 1, "0-9,40-49");
        dist(&m, "10-39,50-79", 20, 1, "10-19,50-59");
        dist(&m, "0-79", 60, 1, "0-29,40-69");
        dist(&m, "1-39,41-79", 60, 1, "10-39,50-79");
        // Extended cases.
        dist(&d, "0-11", 8, 1, "0,6,2,8,1,7,3,9");
        dist(
            &m,
            "0-79",
            64,
            1,
            "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77",
        );
        dist(&m, "0-79", 48, 1, "0-7,10-17,20-27,40-47,50-57,60-67");
        dist(
            &m,
            "1-29,32-39,41-69,72-79",
            48,
            1,
            "1-8,10-17,20-27,41-48,50-57,60-67",
        );
        dist(
            &m,
            "2-29,31-39,42-69,71-79",
            48,
            1,
            "10-17,20-27,31-38,50-57,60-67,71-78",
        );
        dist(
            &m,
            "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71",
            16,
            1,
            "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71",
        );
        dist(&d, "1-5,7-11", 1, 1, "1");
        dist(&d, "1-5,7-11", 1, 2, "2");
        dist(&m, "0-79", 26, 1, "0-6,10-16,40-45,50-55");
        dist(&m, "0-79", 26, 2, "0-6,10-15,40-46,50-55");
        dist(
            &m,
            "0-79",
            62,
            1,
            "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76",
        );
        dist(
            &m,
            "0-79",
            62,
            2,
            "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76",
        );
        dist(
            &m,
            "0-8,10-18,20-39,40-48,50-58,60-79",
            62,
            1,
            "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77",
        );
        dist(
            &m,
            "0-8,10-18,20-39,40-48,50-58,60-79",
            62,
            2,
            "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77",
        );
        dist(
            &m,
            "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76",
            34,
            1,
            "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74",
        );
    }

    #[test]
    fn full_pcpus_only_rejects_odd_requests_naming_the_numbers() {
        let opts = AllocOptions {
            full_pcpus_only: true,
            ..Default::default()
        };
        let s = single_socket_ht();
        let err = take_by_topology(&s, &set("0-7"), 3, &opts).unwrap_err();
        assert_eq!(
            err,
            CpuAllocError::SmtAlignment {
                requested: 3,
                cpus_per_core: 2,
                available_physical: 8
            }
        );
        // Only whole cores count: 0,4 and 1,5 are whole; 2 and 3 are not.
        let err = take_by_topology(&s, &set("0-2,4-5"), 6, &opts).unwrap_err();
        assert!(matches!(
            err,
            CpuAllocError::SmtAlignment {
                available_physical: 4,
                ..
            }
        ));
        check(&s, opts, "0-2,4-5,7", 4, "0-1,4-5");
    }

    #[test]
    fn best_fit_keeps_a_request_inside_one_numa_node() {
        // NUMA 0 has 4 free cores left, NUMA 1 is empty: a 6-CPU request stays on NUMA 1 (the
        // kubelet, without a Topology Manager affinity, fills NUMA 0 first and spills).
        let m = dual_socket_multi_numa_ht();
        let avail = set("6-39,46-79");
        let got = take_by_topology(&m, &avail, 6, &packed()).unwrap();
        assert_eq!(got, set("6-8,46-48"));
        let got = take_by_topology(&m, &avail, 10, &packed()).unwrap();
        assert_eq!(m.numa_nodes_of(&got).len(), 1, "{got}");
    }

    /// Cores of `got` the container shares with someone, counted from the topology itself.
    fn shared_cores(t: &Topology, got: &CpuSet) -> usize {
        t.cores()
            .iter()
            .filter(|c| !c.intersection(got).is_empty() && !c.is_subset(got))
            .count()
    }

    #[test]
    fn whole_cores_elsewhere_beat_single_threads_of_a_fragmented_node() {
        // NUMA node 0 (cpus 0-9, 40-49) has only 0-3 left, each the last thread of its core;
        // node 1 (10-19, 50-59) is free. Four CPUs fit both; node 0 is the tighter fit but
        // would give four cores shared with other containers, node 1 gives two whole cores
        // (what the kubelet's takeFullCores picks).
        let t = dual_socket_multi_numa_ht();
        let avail = set("0-3,10-39,50-79");
        let got = take_by_topology(&t, &avail, 4, &packed()).unwrap();
        assert_eq!(got, set("10-11,50-51"));
        assert_eq!(shared_cores(&t, &got), 0);
        // Three CPUs: one whole core and one thread, in node 1 (one split core, not three).
        let got = take_by_topology(&t, &avail, 3, &packed()).unwrap();
        assert_eq!(shared_cores(&t, &got), 1, "{got}");
        // Four single threads are all that fits in one node: still one node.
        let avail = set("0-3,10-13");
        let got = take_by_topology(&t, &avail, 4, &packed()).unwrap();
        assert_eq!(got, set("0-3"));
    }

    #[test]
    fn quad_socket_fixture_is_the_kubelet_s() {
        let t = quad_socket_four_way_ht();
        assert_eq!(t.cpus().len(), 288);
        assert_eq!(t.cores().len(), 72);
        assert!(t.cores().iter().all(|c| c.len() == 4));
    }

    /// The kubelet's `ExpectAllocAllFullCoresFromThreeSockets` (policy_static_test.go): 18 CPUs
    /// free, three whole cores (one in each of sockets 0, 1, 2) and six single threads of partly
    /// used cores; 12 CPUs. Fewer sockets (two: six CPUs each) would take four split cores;
    /// whole free cores win, as the kubelet's takeFullCores: the three whole cores.
    #[test]
    fn whole_free_cores_beat_fewer_sockets_of_split_cores() {
        let t = quad_socket_four_way_ht();
        let avail = set("1-2,9,11-13,23,25,35,38,48,51,53-54,61,113,173,233");
        let got = take_by_topology(&t, &avail, 12, &packed()).unwrap();
        assert_eq!(got, set("1,11,13,23,25,35,38,48,53,113,173,233"));
        assert_eq!(shared_cores(&t, &got), 0);
    }

    /// A partly used socket: in socket 0 one thread of each of six cores is taken (by another
    /// container or the reservation), the other sockets are free. 12 CPUs fit socket 0 (the
    /// best fit) and are three of its twelve whole free cores, not threads of the six partly
    /// used ones.
    #[test]
    fn a_partly_used_socket_gives_whole_free_cores() {
        let t = quad_socket_four_way_ht();
        let used = set("0,50,1,2,9,10");
        let avail = t.cpus().difference(&used);
        let got = take_by_topology(&t, &avail, 12, &packed()).unwrap();
        assert_eq!(shared_cores(&t, &got), 0, "{got}");
        let socket0: CpuSet = QUAD_SOCKET0.iter().copied().collect();
        assert!(got.is_subset(&socket0), "{got}");
    }

    /// Issue 36 item 6: four threads per core, both sockets fragmented the same way (one whole
    /// free core, one with three free threads, one with one). Eight CPUs fit either socket, as
    /// one whole core and threads of two partly used ones (three cores, two shared); the
    /// kubelet's takeFullCores takes the two whole cores, one in each socket, and so does
    /// topolet (two cores, none shared).
    #[test]
    fn whole_cores_of_two_fragmented_sockets_beat_one_socket_s_split_cores() {
        // cpu = thread * 6 + core; socket 0 holds cores 0-2, socket 1 cores 3-5.
        let t = uncore(2, 1, 1, 3, 4);
        let used = set("19,8,14,20,22,11,17,23");
        let avail = t.cpus().difference(&used);
        let got = take_by_topology(&t, &avail, 8, &packed()).unwrap();
        assert_eq!(got, set("0,6,12,18,3,9,15,21"));
        assert_eq!(shared_cores(&t, &got), 0);
        let kube = kubelet_packed::take_by_topology_numa_packed(&t, &avail, 8);
        assert_eq!(kube, Some(got));
        // Seven: still both whole cores' worth less one thread, in two cores (the kubelet: one
        // whole core and three threads of partly used cores, three cores).
        let got = take_by_topology(&t, &avail, 7, &packed()).unwrap();
        assert_eq!(touched_and_whole(&t, &got), (2, 1), "{got}");
    }

    const QUAD_SOCKET0: [usize; 72] = [
        0, 109, 169, 229, 50, 110, 170, 230, 1, 13, 25, 38, 2, 14, 26, 39, 9, 21, 33, 46, 10, 22,
        34, 47, 57, 117, 177, 237, 58, 118, 178, 238, 71, 131, 191, 251, 72, 132, 192, 252, 79,
        139, 199, 259, 80, 140, 200, 260, 87, 147, 207, 267, 88, 148, 208, 268, 95, 155, 215, 275,
        96, 156, 216, 276, 103, 163, 223, 283, 104, 164, 224, 284,
    ];

    /// Reference, independent of `fill`: the fewest cores `n` CPUs of `scope` can be taken from without owning them whole: 0 or 1
    /// (the remainder of a core's worth) when `scope` has enough whole free cores, else one per
    /// partly free core the rest needs, largest first.
    fn split_cores(idx: &CpuIndex, scope: &CpuSet, n: usize) -> usize {
        let tpc = idx.threads_per_core.max(1);
        let counts = idx.cores.counts(scope);
        let mut whole = 0usize;
        let mut partial: Vec<usize> = Vec::new();
        for (g, &c) in counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if c == idx.cores.sizes[g] && c == tpc {
                whole += 1;
            } else {
                partial.push(c);
            }
        }
        if whole * tpc >= n {
            return usize::from(!n.is_multiple_of(tpc));
        }
        let mut rest = n - whole * tpc;
        partial.sort_unstable_by(|a, b| b.cmp(a));
        let mut used = 0;
        for c in partial {
            if rest == 0 {
                break;
            }
            rest = rest.saturating_sub(c);
            used += 1;
        }
        used
    }

    proptest::proptest! {
        /// When one NUMA node could give the request as whole cores (plus at most one split
        /// core for an odd remainder), the allocation splits no more cores than that.
        #[test]
        fn no_more_split_cores_than_the_best_node_allows(
            taken in proptest::collection::btree_set(0usize..80, 0..60),
            n in 1usize..12,
        ) {
            let t = dual_socket_multi_numa_ht();
            let mut avail = CpuSet::new();
            for cpu in 0..80 {
                if !taken.contains(&cpu) {
                    avail.insert(cpu);
                }
            }
            proptest::prop_assume!(avail.len() >= n);
            let idx = CpuIndex::new(&t);
            let best = t
                .numa_ids()
                .map(|node| avail.intersection(&t.numa_cpus(node)))
                .filter(|free| free.len() >= n)
                .map(|free| split_cores(&idx, &free, n))
                .min();
            let got = take_by_topology(&t, &avail, n, &packed()).unwrap();
            if let Some(best) = best {
                proptest::prop_assert!(
                    shared_cores(&t, &got) <= best,
                    "avail {} n {} got {} best {}", avail, n, got, best
                );
            }
        }
    }

    /// The reference model reproduces the kubelet's own expectations (the cases above that
    /// transcribe `cpu_assignment_test.go` and `policy_static_test.go`).
    #[test]
    fn kubelet_model_reproduces_upstream_cases() {
        let kube = |t: &Topology, avail: &str, n: usize, want: &str| {
            let got = kubelet_packed::take_by_topology_numa_packed(t, &set(avail), n);
            assert_eq!(got, Some(set(want)), "avail {avail} n {n}");
        };
        let s = single_socket_ht();
        assert_eq!(
            kubelet_packed::take_by_topology_numa_packed(&s, &set("0,2,4,6"), 5),
            None
        );
        kube(&s, "0-7", 1, "0");
        kube(&s, "1,3,5-7", 1, "6");
        kube(&s, "0-7", 2, "0,4");
        kube(&s, "0-7", 8, "0-7");
        kube(&s, "0-3,6", 2, "2,6");
        let d = dual_socket_ht();
        kube(&d, "0-11", 6, "0,2,4,6,8,10");
        kube(&d, "1-5,7-11", 1, "2");
        kube(&d, "0-11", 8, "0,6,2,8,4,10,1,7");
        let m = dual_socket_multi_numa_ht();
        kube(&m, "0-79", 40, "0-19,40-59");
        kube(&m, "0-79", 20, "0-9,40-49");
        kube(&m, "10-39,50-79", 20, "10-19,50-59");
        kube(&m, "0-79", 60, "0-29,40-69");
        kube(&m, "1-39,41-79", 60, "10-39,50-79");
        kube(&m, "0-79", 64, "0-29,40-69,30,31,70,71");
        kube(
            &quad_socket_four_way_ht(),
            "1-2,9,11-13,23,25,35,38,48,51,53-54,61,113,173,233",
            12,
            "1,11,13,23,25,35,38,48,53,113,173,233",
        );
    }

    /// Cores `got` holds a CPU of, and cores it holds every thread of.
    fn touched_and_whole(t: &Topology, got: &CpuSet) -> (usize, usize) {
        let touched = t.cores().iter().filter(|c| !c.is_disjoint(got)).count();
        let whole = t.cores().iter().filter(|c| c.is_subset(got)).count();
        (touched, whole)
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: PACKED_CASES,
            rng_seed: proptest::test_runner::RngSeed::Fixed(36),
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        /// At least as packed as the kubelet: on a generated machine (1–2 sockets, 1–2 NUMA
        /// nodes per socket, 1–5 cores per node, 1–4 threads per core) with some CPUs already
        /// taken, for any request the free CPUs can hold, the packed allocation
        /// - touches no more cores (cores holding at least one of its CPUs) than the kubelet's
        ///   `takeByTopologyNUMAPacked` ([`kubelet_packed`]), and
        /// - takes at least as many whole cores (every thread of the core, all of them free
        ///   before) as it does.
        ///
        /// (Equal counts, not equal sets: which sockets, nodes and cores is topolet's own choice.)
        #[test]
        fn at_least_as_packed_as_the_kubelet(
            sockets in 1usize..=2,
            numa_per_socket in 1usize..=2,
            cores_per_numa in 1usize..=5,
            threads_per_core in 1usize..=4,
            taken in proptest::collection::vec(proptest::bool::weighted(0.35), 80),
            pick in 0usize..80,
        ) {
            let spec = SyntheticSpec {
                sockets,
                numa_per_socket,
                l3_per_numa: 1,
                cores_per_l3: cores_per_numa,
                threads_per_core,
                memory_per_node: 1 << 30,
            };
            let t = spec.build();
            let avail: CpuSet = t.cpus().iter().filter(|&c| !taken[c]).collect();
            proptest::prop_assume!(!avail.is_empty());
            let n = 1 + pick % avail.len();
            let got = take_by_topology(&t, &avail, n, &packed()).map_err(|e| {
                proptest::test_runner::TestCaseError::fail(e.to_string())
            })?;
            let kube = kubelet_packed::take_by_topology_numa_packed(&t, &avail, n)
                .ok_or_else(|| proptest::test_runner::TestCaseError::fail("kubelet model failed"))?;
            proptest::prop_assert_eq!(got.len(), n);
            proptest::prop_assert!(got.is_subset(&avail));
            let (touched, whole) = touched_and_whole(&t, &got);
            let (k_touched, k_whole) = touched_and_whole(&t, &kube);
            proptest::prop_assert!(
                touched <= k_touched && whole >= k_whole,
                "{:?} avail {} n {}: topolet {} ({} cores, {} whole), kubelet {} ({} cores, {} whole)",
                spec, avail, n, got, touched, whole, kube, k_touched, k_whole
            );
        }
    }

    /// Cases of [`at_least_as_packed_as_the_kubelet`] (fixed seed: the same machines every run).
    const PACKED_CASES: u32 = 2048;

    #[test]
    fn never_leaves_available() {
        let t = uncore(2, 2, 2, 3, 2);
        let avail = set("0-5,30-33,40-47");
        for n in 0..=avail.len() {
            for opts in [
                packed(),
                AllocOptions {
                    distribute_cpus_across_cores: true,
                    ..Default::default()
                },
                AllocOptions {
                    distribute_cpus_across_numa: true,
                    ..Default::default()
                },
                AllocOptions {
                    prefer_align_cpus_by_uncorecache: true,
                    ..Default::default()
                },
            ] {
                let got = take_by_topology(&t, &avail, n, &opts).unwrap();
                assert_eq!(got.len(), n);
                assert!(got.is_subset(&avail));
            }
        }
    }
}

/// A reference model of the kubelet's packed rule, for the property test below: a restatement,
/// over a [`Topology`], of `takeByTopologyNUMAPacked` in `pkg/kubelet/cm/cpumanager/
/// cpu_assignment.go` (without the uncore-cache step and the spread sorting strategy), its
/// functions named after the upstream ones. Independent of [`fill`] and [`CpuIndex`].
#[cfg(test)]
mod kubelet_packed {
    use crate::machine::cpuset::CpuSet;
    use crate::machine::topology::Topology;

    /// `cpuAccumulator`: `details` are the CPUs still available, `result` those taken.
    struct CpuAccumulator<'a> {
        topo: &'a Topology,
        details: CpuSet,
        num_cpus_needed: usize,
        result: CpuSet,
        /// `topo.NumSockets >= topo.NumNUMANodes` (`numaFirst`, else `socketsFirst`).
        numa_first: bool,
    }

    impl CpuAccumulator<'_> {
        fn cpus_per_core(&self) -> usize {
            self.topo.num_cpus() / self.topo.num_cores().max(1)
        }

        fn cpus_per_socket(&self) -> usize {
            self.topo.num_cpus() / self.topo.socket_ids().count().max(1)
        }

        fn cpus_in_socket(&self, s: usize) -> CpuSet {
            self.details.intersection(&self.topo.socket_cpus(s))
        }

        fn cpus_in_numa(&self, n: usize) -> CpuSet {
            self.details.intersection(&self.topo.numa_cpus(n))
        }

        fn cpus_in_core(&self, c: usize) -> CpuSet {
            self.details.intersection(self.topo.core_cpus(c))
        }

        fn take(&mut self, cpus: &CpuSet) {
            self.result.extend_from(cpus);
            self.details.remove_all(cpus);
            self.num_cpus_needed -= cpus.len();
        }

        fn needs_at_least(&self, n: usize) -> bool {
            self.num_cpus_needed >= n
        }

        fn is_satisfied(&self) -> bool {
            self.num_cpus_needed < 1
        }

        /// `sort`: ascending available CPUs, then id.
        fn sort(ids: &mut [usize], available: impl Fn(usize) -> usize) {
            ids.sort_by_key(|&id| (available(id), id));
        }

        /// Sockets (ids) holding an available CPU of `cpus`.
        fn sockets_in(&self, cpus: &CpuSet) -> Vec<usize> {
            let free = self.details.intersection(cpus);
            self.topo
                .socket_ids()
                .filter(|&s| !free.intersection(&self.topo.socket_cpus(s)).is_empty())
                .collect()
        }

        fn numas_in(&self, cpus: &CpuSet) -> Vec<usize> {
            let free = self.details.intersection(cpus);
            self.topo
                .numa_ids()
                .filter(|&n| !free.intersection(&self.topo.numa_cpus(n)).is_empty())
                .collect()
        }

        fn cores_in(&self, cpus: &CpuSet) -> Vec<usize> {
            let free = self.details.intersection(cpus);
            (0..self.topo.num_cores())
                .filter(|&c| !free.intersection(self.topo.core_cpus(c)).is_empty())
                .collect()
        }

        fn sort_available_numa_nodes(&self) -> Vec<usize> {
            if self.numa_first {
                let mut numas = self.numas_in(self.topo.cpus());
                Self::sort(&mut numas, |n| self.cpus_in_numa(n).len());
                return numas;
            }
            let mut out = Vec::new();
            for s in self.sort_available_sockets() {
                let mut numas = self.numas_in(&self.topo.socket_cpus(s));
                Self::sort(&mut numas, |n| self.cpus_in_numa(n).len());
                out.extend(numas);
            }
            out
        }

        fn sort_available_sockets(&self) -> Vec<usize> {
            if !self.numa_first {
                let mut sockets = self.sockets_in(self.topo.cpus());
                Self::sort(&mut sockets, |s| self.cpus_in_socket(s).len());
                return sockets;
            }
            let mut out = Vec::new();
            for n in self.sort_available_numa_nodes() {
                let mut sockets = self.sockets_in(&self.topo.numa_cpus(n));
                Self::sort(&mut sockets, |s| self.cpus_in_socket(s).len());
                out.extend(sockets);
            }
            out
        }

        fn sort_available_cores(&self) -> Vec<usize> {
            let mut out = Vec::new();
            if self.numa_first {
                for s in self.sort_available_sockets() {
                    let mut cores = self.cores_in(&self.topo.socket_cpus(s));
                    Self::sort(&mut cores, |c| self.cpus_in_core(c).len());
                    out.extend(cores);
                }
            } else {
                for n in self.sort_available_numa_nodes() {
                    let mut cores = self.cores_in(&self.topo.numa_cpus(n));
                    Self::sort(&mut cores, |c| self.cpus_in_core(c).len());
                    out.extend(cores);
                }
            }
            out
        }

        fn free_numa_nodes(&self) -> Vec<usize> {
            self.sort_available_numa_nodes()
                .into_iter()
                .filter(|&n| self.cpus_in_numa(n).len() == self.topo.numa_cpus(n).len())
                .collect()
        }

        fn free_sockets(&self) -> Vec<usize> {
            self.sort_available_sockets()
                .into_iter()
                .filter(|&s| self.cpus_in_socket(s).len() == self.cpus_per_socket())
                .collect()
        }

        fn free_cores(&self) -> Vec<usize> {
            self.sort_available_cores()
                .into_iter()
                .filter(|&c| self.cpus_in_core(c).len() == self.cpus_per_core())
                .collect()
        }

        fn take_full_numa_nodes(&mut self) {
            for n in self.free_numa_nodes() {
                let cpus = self.topo.numa_cpus(n);
                if self.needs_at_least(cpus.len()) {
                    self.take(&cpus);
                }
            }
        }

        fn take_full_sockets(&mut self) {
            for s in self.free_sockets() {
                let cpus = self.topo.socket_cpus(s);
                if self.needs_at_least(cpus.len()) {
                    self.take(&cpus);
                }
            }
        }

        fn take_full_cores(&mut self) {
            for c in self.free_cores() {
                let cpus = self.topo.core_cpus(c).clone();
                if self.needs_at_least(cpus.len()) {
                    self.take(&cpus);
                }
            }
        }

        /// `sortAvailableCPUsPacked`: the cores in `sortAvailableCores` order, each core's
        /// CPUs ascending.
        fn sort_available_cpus_packed(&self) -> Vec<usize> {
            self.sort_available_cores()
                .into_iter()
                .flat_map(|c| self.cpus_in_core(c).iter().collect::<Vec<_>>())
                .collect()
        }

        fn take_remaining_cpus(&mut self) {
            for cpu in self.sort_available_cpus_packed() {
                self.take(&std::iter::once(cpu).collect());
                if self.is_satisfied() {
                    return;
                }
            }
        }
    }

    /// `takeByTopologyNUMAPacked`; `None` when `available` holds fewer than `n` CPUs.
    pub fn take_by_topology_numa_packed(
        topo: &Topology,
        available: &CpuSet,
        n: usize,
    ) -> Option<CpuSet> {
        let mut acc = CpuAccumulator {
            topo,
            details: available.intersection(topo.cpus()),
            num_cpus_needed: n,
            result: CpuSet::new(),
            numa_first: topo.socket_ids().count() >= topo.numa_ids().count(),
        };
        if acc.is_satisfied() {
            return Some(acc.result);
        }
        if acc.num_cpus_needed > acc.details.len() {
            return None;
        }
        // takeFullFirstLevel, takeFullSecondLevel.
        if acc.numa_first {
            acc.take_full_numa_nodes();
            if acc.is_satisfied() {
                return Some(acc.result);
            }
            acc.take_full_sockets();
        } else {
            acc.take_full_sockets();
            if acc.is_satisfied() {
                return Some(acc.result);
            }
            acc.take_full_numa_nodes();
        }
        if acc.is_satisfied() {
            return Some(acc.result);
        }
        acc.take_full_cores();
        if acc.is_satisfied() {
            return Some(acc.result);
        }
        acc.take_remaining_cpus();
        acc.is_satisfied().then_some(acc.result)
    }
}
