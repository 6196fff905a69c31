#!/usr/bin/env python3
"""hack/gen-sysfs-fixtures.py — generate the sysfs fixture trees topolet's tests run against.

Usage: hack/gen-sysfs-fixtures.py [--out DIR] [NAME ...]

Writes plain-text trees under DIR — one directory per machine, holding only the standard files
topolet's discovery reads (see plugin/src/host/sysfs.rs):

    devices/system/cpu/online
    devices/system/cpu/cpuN/topology/{physical_package_id,die_id,core_id,thread_siblings_list}
    devices/system/cpu/cpuN/cache/indexK/{level,id,shared_cpu_list}
    devices/system/node/online
    devices/system/node/nodeN/{cpulist,meminfo,distance}
    devices/system/node/nodeN/hugepages/hugepages-<size>kB/nr_hugepages
    bus/pci/devices/<address>/numa_node

plus README.md describing each machine. Each named machine directory is deleted and rewritten; other
entries of DIR are left alone. With NAMEs, only those machines are written. Deterministic: the same
script always writes byte-identical trees. Nothing it writes is committed: the test kit
(testkit/build.rs) runs it into its build directory, and plugin/tests/fixtures/sysfs/README.md is
a copy of its README (testkit checks they match). Python 3 standard library only.

CPU numbering follows Linux on x86: the first thread of every core (in core order), then the second
thread of every core — the same convention as topolet's `SyntheticSpec`.
"""

import argparse
import os
import shutil
import sys

KB_2M = 2048
KB_1G = 1048576


def cpulist(ids):
    """Linux list format, as the kernel prints it (`0-3,8,10-11`)."""
    ids = sorted(ids)
    out = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else "%d-%d" % (ids[i], ids[j]))
        i = j + 1
    return ",".join(out)


class Machine:
    """A regular machine: sockets → NUMA nodes → L3 groups → cores → threads.

    `l3_scope` is "group" (cores_per_l3 cores share an L3) or "socket" (one L3 per socket, even when
    the socket holds several NUMA nodes — what Intel sub-NUMA clustering reports).
    """

    def __init__(self, name, summary, details, sockets, nodes_per_socket, l3_per_node, cores_per_l3,
                 threads, mem_kb, hugepages, distances, pci, offline=(), core_id=None,
                 l3_scope="group", has_die=True, has_siblings=True, cache="full", has_nodes=True,
                 synthetic=None):
        self.name = name
        self.summary = summary
        self.details = details
        self.sockets = sockets
        self.nodes_per_socket = nodes_per_socket
        self.l3_per_node = l3_per_node
        self.cores_per_l3 = cores_per_l3
        self.threads = threads
        self.mem_kb = mem_kb  # per node
        self.hugepages = hugepages  # per node: {size_kb: count}
        self.distances = distances  # matrix, node-id order
        self.pci = pci  # [(address, numa_node)]
        self.offline = set(offline)
        self.core_id = core_id or (lambda local: local)
        self.l3_scope = l3_scope
        self.has_die = has_die
        self.has_siblings = has_siblings
        self.cache = cache  # "full" (L1d, L1i, L2, L3), "l3" (index3 only) or None
        self.has_nodes = has_nodes
        self.synthetic = synthetic

    # Geometry -----------------------------------------------------------------------------------
    @property
    def cores_per_node(self):
        return self.l3_per_node * self.cores_per_l3

    @property
    def cores_per_socket(self):
        return self.nodes_per_socket * self.cores_per_node

    @property
    def total_cores(self):
        return self.sockets * self.cores_per_socket

    @property
    def total_nodes(self):
        return self.sockets * self.nodes_per_socket

    def cpu(self, core, thread):
        return thread * self.total_cores + core

    def threads_of(self, core):
        return [self.cpu(core, t) for t in range(self.threads)]

    def online(self):
        return [c for c in range(self.total_cores * self.threads) if c not in self.offline]

    def online_of(self, cpus):
        return [c for c in cpus if c not in self.offline]

    def l3_key(self, core):
        if self.l3_scope == "socket":
            return core // self.cores_per_socket
        return core // self.cores_per_l3

    def l3_cores(self, key):
        return [c for c in range(self.total_cores) if self.l3_key(c) == key]

    # Writing ------------------------------------------------------------------------------------
    def write(self, root):
        files = {}
        online = self.online()
        cpu_dir = "devices/system/cpu"
        files[cpu_dir + "/online"] = cpulist(online)
        l3_members = {}
        for core in range(self.total_cores):
            l3_members.setdefault(self.l3_key(core), []).extend(self.threads_of(core))
        for core in range(self.total_cores):
            socket = core // self.cores_per_socket
            siblings = self.online_of(self.threads_of(core))
            l3 = self.l3_key(core)
            for cpu in siblings:
                d = "%s/cpu%d" % (cpu_dir, cpu)
                files[d + "/topology/physical_package_id"] = str(socket)
                if self.has_die:
                    files[d + "/topology/die_id"] = "0"
                files[d + "/topology/core_id"] = str(self.core_id(core % self.cores_per_socket))
                if self.has_siblings:
                    files[d + "/topology/thread_siblings_list"] = cpulist(siblings)
                caches = []
                if self.cache == "full":
                    caches = [(0, 1, core, siblings), (1, 1, core, siblings), (2, 2, core, siblings)]
                if self.cache in ("full", "l3"):
                    caches.append((3, 3, l3, self.online_of(l3_members[l3])))
                for index, level, cid, shared in caches:
                    c = "%s/cache/index%d" % (d, index)
                    files[c + "/level"] = str(level)
                    files[c + "/id"] = str(cid)
                    files[c + "/shared_cpu_list"] = cpulist(shared)
        if self.has_nodes:
            node_dir = "devices/system/node"
            files[node_dir + "/online"] = cpulist(range(self.total_nodes))
            for node in range(self.total_nodes):
                d = "%s/node%d" % (node_dir, node)
                cpus = []
                for core in range(node * self.cores_per_node, (node + 1) * self.cores_per_node):
                    cpus.extend(self.online_of(self.threads_of(core)))
                files[d + "/cpulist"] = cpulist(cpus)
                files[d + "/meminfo"] = meminfo(node, self.mem_kb[node], self.hugepages[node])
                files[d + "/distance"] = " ".join(str(x) for x in self.distances[node])
                for size_kb in (KB_2M, KB_1G):
                    count = self.hugepages[node].get(size_kb, 0)
                    files["%s/hugepages/hugepages-%dkB/nr_hugepages" % (d, size_kb)] = str(count)
        for address, numa in self.pci:
            files["bus/pci/devices/%s/numa_node" % address] = str(numa)
        made = set()
        for rel in sorted(files):
            path = os.path.join(root, *rel.split("/"))
            parent = os.path.dirname(path)
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            with open(path, "w", encoding="ascii", newline="\n") as f:
                f.write(files[rel] + "\n")
        return len(files)


def meminfo(node, total_kb, hugepages):
    """A `nodeN/meminfo` in the kernel's layout (a representative subset of its lines)."""
    huge_kb = sum(size * count for size, count in hugepages.items())
    free_kb = (total_kb - huge_kb) * 9 // 10
    lines = [
        ("MemTotal:", total_kb, True),
        ("MemFree:", free_kb, True),
        ("MemUsed:", total_kb - free_kb, True),
        ("Active:", (total_kb - free_kb) // 3, True),
        ("Inactive:", (total_kb - free_kb) // 4, True),
        ("AnonHugePages:", 0, True),
        ("HugePages_Total:", hugepages.get(KB_2M, 0), False),
        ("HugePages_Free:", hugepages.get(KB_2M, 0), False),
        ("HugePages_Surp:", 0, False),
    ]
    out = []
    for key, value, kb in lines:
        if kb:
            out.append("Node %d %-15s %8d kB" % (node, key, value))
        else:
            out.append("Node %d %-16s %5d" % (node, key, value))
    return "\n".join(out)


def slit(total_nodes, nodes_per_socket):
    return [[10 if i == j else 12 if i // nodes_per_socket == j // nodes_per_socket else 21
             for j in range(total_nodes)] for i in range(total_nodes)]


def intel_core_id(local):
    # Xeon core_ids have holes: groups of 6 with 2 ids skipped (0-5, 8-13, 16-21, 24-29).
    return local + 2 * (local // 6)


MACHINES = [
    Machine(
        "ci-host-1s2c",
        "1 socket, 2 cores, no SMT — our CI host (a 2-vCPU VM).",
        "One node (8.3 GiB), one L3 shared by both CPUs, L1/L2 per CPU. Six PCI devices like the "
        "real host; the real VM reports `numa_node` -1 for all of them, the fixture reports -1 for "
        "the host bridge and 0 for the others so device locality is exercised. Compare "
        "`ci-host-captured/` (captured from the real machine with `hack/capture-sysfs.sh`).",
        sockets=1, nodes_per_socket=1, l3_per_node=1, cores_per_l3=2, threads=1,
        mem_kb=[8743124], hugepages=[{KB_2M: 0, KB_1G: 0}], distances=[[10]],
        pci=[("0000:00:00.0", -1), ("0000:00:01.0", 0), ("0000:00:02.0", 0),
             ("0000:00:03.0", 0), ("0000:00:04.0", 0), ("0000:00:05.0", 0)],
        synthetic="SyntheticSpec { sockets: 1, numa_per_socket: 1, l3_per_numa: 1, cores_per_l3: 2, "
                  "threads_per_core: 1 }",
    ),
    Machine(
        "2s-24c-ht",
        "2 sockets × 24 cores × 2 threads = 96 CPUs, one NUMA node and one L3 per socket.",
        "Cascade-Lake-like. CPUs 0-23 and 48-71 on socket 0, 24-47 and 72-95 on socket 1; "
        "core_ids have Xeon-style holes (0-5, 8-13, 16-21, 24-29). Nodes of ~188 GiB, distances "
        "10/21, 512 × 2 MiB and 4 × 1 GiB hugepages per node. PCI: NIC and NVMe on node 0, GPU on "
        "node 1, one device with numa_node -1.",
        sockets=2, nodes_per_socket=1, l3_per_node=1, cores_per_l3=24, threads=2,
        mem_kb=[196581616, 198159208],
        hugepages=[{KB_2M: 512, KB_1G: 4}, {KB_2M: 512, KB_1G: 4}],
        distances=slit(2, 1),
        pci=[("0000:00:1f.0", -1), ("0000:17:00.0", 0), ("0000:3b:00.0", 0), ("0000:86:00.0", 1)],
        core_id=intel_core_id,
        synthetic="SyntheticSpec { sockets: 2, numa_per_socket: 1, l3_per_numa: 1, "
                  "cores_per_l3: 24, threads_per_core: 2 }",
    ),
    Machine(
        "2s-snc2",
        "2 sockets × 2 NUMA nodes (sub-NUMA clustering) × 12 cores × 2 threads = 96 CPUs.",
        "Sapphire-Rapids-like with SNC2. Node n holds cores 12n..12n+11 (CPUs 12n-12n+11 and "
        "48+12n-48+12n+11). Distances 10 local, 12 to the other node of the same socket, 21 across "
        "sockets. As on real SNC hosts the L3 is reported per socket, so each L3 group spans two "
        "NUMA nodes (`SyntheticSpec` would put one L3 per node: the shapes differ only there). "
        "Nodes of ~126 GiB; 1024 × 2 MiB per node, 1 GiB pages on nodes 0 and 2 only. One PCI "
        "device per node plus one with numa_node -1.",
        sockets=2, nodes_per_socket=2, l3_per_node=1, cores_per_l3=12, threads=2,
        mem_kb=[130343136, 132095084, 132072324, 132081100],
        hugepages=[{KB_2M: 1024, KB_1G: 8}, {KB_2M: 1024, KB_1G: 0},
                   {KB_2M: 1024, KB_1G: 8}, {KB_2M: 1024, KB_1G: 0}],
        distances=slit(4, 2),
        pci=[("0000:00:00.0", -1), ("0000:16:00.0", 0), ("0000:38:00.0", 1),
             ("0000:97:00.0", 2), ("0000:b8:00.0", 3)],
        l3_scope="socket",
        synthetic="SyntheticSpec { sockets: 2, numa_per_socket: 2, l3_per_numa: 1, "
                  "cores_per_l3: 12, threads_per_core: 2 } (except L3: per socket here)",
    ),
    Machine(
        "1s-8l3-chiplets",
        "1 socket, 1 NUMA node, 8 L3 groups (chiplets) × 8 cores × 2 threads = 128 CPUs.",
        "EPYC-like in NPS1 mode. L3 group k holds cores 8k..8k+7, i.e. CPUs 8k-8k+7 and "
        "64+8k-64+8k+7 (16 threads). One node of ~503 GiB, 2048 × 2 MiB and 16 × 1 GiB hugepages. "
        "PCI: two devices on node 0, one with numa_node -1.",
        sockets=1, nodes_per_socket=1, l3_per_node=8, cores_per_l3=8, threads=2,
        mem_kb=[527965512], hugepages=[{KB_2M: 2048, KB_1G: 16}], distances=[[10]],
        pci=[("0000:01:00.0", 0), ("0000:41:00.0", 0), ("0000:c0:00.0", -1)],
        synthetic="SyntheticSpec { sockets: 1, numa_per_socket: 1, l3_per_numa: 8, "
                  "cores_per_l3: 8, threads_per_core: 2 }",
    ),
    Machine(
        "8s-4096",
        "8 sockets × 256 cores × 2 threads = 4096 CPUs, one NUMA node per socket, L3 groups of "
        "16 cores (32 threads), 16 per socket.",
        "The scale fixture. Socket s holds cores 256s..256s+255, i.e. CPUs 256s-256s+255 and "
        "2048+256s-2048+256s+255. Distances 10/21 (every socket one hop away). Nodes of ~1 TiB; "
        "4096 × 2 MiB and 32 × 1 GiB hugepages per node. To keep the tree small only the L3 "
        "(`cache/index3`) is written, not L1/L2. PCI: one device per socket plus one with "
        "numa_node -1.",
        sockets=8, nodes_per_socket=1, l3_per_node=16, cores_per_l3=16, threads=2,
        mem_kb=[1055807088 + (0 if n == 0 else 1120392 + 4096 * n) for n in range(8)],
        hugepages=[{KB_2M: 4096, KB_1G: 32} for _ in range(8)],
        distances=slit(8, 1),
        pci=[("0000:00:00.0", -1)] + [("0000:%02x:00.0" % (0x10 + 0x20 * s), s) for s in range(8)],
        cache="l3",
        synthetic="SyntheticSpec { sockets: 8, numa_per_socket: 1, l3_per_numa: 16, "
                  "cores_per_l3: 16, threads_per_core: 2 }",
    ),
    Machine(
        "offline-cpus",
        "2 sockets × 4 cores × 2 threads = 16 CPUs with 3 offline: online `0-5,7-8,10-13,15`.",
        "CPU 9 (the SMT sibling of CPU 1, socket 0) and both threads of core 6 (CPUs 6 and 14, "
        "socket 1) are offline. As Linux shows it: no `cpuN/` files for offline CPUs, and node "
        "cpulists, thread_siblings_list and cache shared_cpu_list name online CPUs only (node0 "
        "`0-3,8,10-11`, node1 `4-5,7,12-13,15`; CPU 1's siblings are `1`). Nodes of ~31 GiB, "
        "distances 10/21. PCI: one device per node.",
        sockets=2, nodes_per_socket=1, l3_per_node=1, cores_per_l3=4, threads=2,
        mem_kb=[32598628, 33023812],
        hugepages=[{KB_2M: 128, KB_1G: 0}, {KB_2M: 128, KB_1G: 0}],
        distances=slit(2, 1),
        pci=[("0000:03:00.0", 0), ("0000:83:00.0", 1)],
        offline=(6, 9, 14),
    ),
    Machine(
        "no-numa-no-siblings",
        "2 sockets × 4 cores × 2 threads = 16 CPUs as an old/minimal (CONFIG_NUMA=n) kernel shows "
        "them.",
        "Only `cpu/online`, `physical_package_id` and `core_id`: no `devices/system/node`, no "
        "`die_id`, no `thread_siblings_list`, no `cache/`, and no PCI `numa_node` (a non-NUMA kernel "
        "has none, so there are no device files at all). core_ids 0-3 repeat in both packages, so "
        "threads must be grouped by (package, core_id). Discovery falls back to one node 0 with "
        "every CPU and the memory the caller passes in, and one L3 group per socket.",
        sockets=2, nodes_per_socket=1, l3_per_node=1, cores_per_l3=4, threads=2,
        mem_kb=[0, 0], hugepages=[{}, {}], distances=slit(2, 1), pci=[],
        has_die=False, has_siblings=False, cache=None, has_nodes=False,
    ),
]


def readme(machines):
    out = [
        "# sysfs fixtures",
        "",
        "Plain-text sysfs trees of real machine shapes, for `topolet::host::sysfs` discovery tests "
        "(`plugin/tests/sysfs_fixtures.rs`)",
        "and for anyone needing a realistic `Topology` (`topolet plan --sysfs-root <dir>`).",
        "Each directory is a sysfs root holding only the standard files discovery reads:",
        "",
        "```",
        "devices/system/cpu/online",
        "devices/system/cpu/cpuN/topology/{physical_package_id,die_id,core_id,thread_siblings_list}",
        "devices/system/cpu/cpuN/cache/indexK/{level,id,shared_cpu_list}",
        "devices/system/node/online",
        "devices/system/node/nodeN/{cpulist,meminfo,distance}",
        "devices/system/node/nodeN/hugepages/hugepages-<size>kB/nr_hugepages",
        "bus/pci/devices/<address>/numa_node",
        "```",
        "",
        "CPU numbering follows Linux on x86: the first thread of every core, then the second thread "
        "of every core",
        "(so CPU `c` and CPU `c + cores` are siblings), as `SyntheticSpec` numbers them.",
        "",
        "## Where the trees are",
        "",
        "Every machine except `ci-host-captured/` is generated, not committed: the test kit "
        "(`testkit/build.rs`) runs",
        "`hack/gen-sysfs-fixtures.py` (Python 3 stdlib, deterministic) into its build directory, "
        "and tests name machines through",
        "`topolet_testkit::sysfs::fixture(name)`. To look at one or to run `topolet plan` on it:",
        "",
        "```",
        "python3 hack/gen-sysfs-fixtures.py --out /tmp/sysfs            # all machines",
        "python3 hack/gen-sysfs-fixtures.py --out /tmp/sysfs 2s-snc2    # one machine",
        "topolet plan --sysfs-root /tmp/sysfs/2s-snc2 --pods pods.yaml",
        "```",
        "",
        "This README is the generator's own, copied to `plugin/tests/fixtures/sysfs/README.md` "
        "(the test kit fails when the copy is stale).",
        "",
        "`ci-host-captured/` is a copy of the CI host's own /sys made with "
        "`hack/capture-sysfs.sh plugin/tests/fixtures/sysfs/ci-host-captured`",
        "(only the files above); it is committed and may be recaptured.",
        "",
        "## Machines",
        "",
    ]
    for m in machines:
        out.append("### `%s`" % m.name)
        out.append("")
        out.append(m.summary)
        out.append("")
        out.append(m.details)
        if m.synthetic:
            out.append("")
            out.append("Same shape as `%s`." % m.synthetic)
        out.append("")
    out.append("### `ci-host-captured`")
    out.append("")
    out.append("The real CI host (1 socket, 2 CPUs, no SMT, one node) as captured; same CPU, core, "
               "L3 and node shape as")
    out.append("`ci-host-1s2c`. Memory, hugepage and PCI values are whatever the host had when "
               "captured.")
    out.append("")
    return "\n".join(out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the machines into")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MACHINES}
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error("unknown machine(s): %s (known: %s)" % (", ".join(unknown), ", ".join(by_name)))
    selected = [by_name[n] for n in args.names] if args.names else MACHINES
    os.makedirs(args.out, exist_ok=True)
    for m in selected:
        root = os.path.join(args.out, m.name)
        if os.path.exists(root):
            shutil.rmtree(root)
        count = m.write(root)
        print("%s: %d files" % (root, count))
    with open(os.path.join(args.out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(readme(MACHINES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
