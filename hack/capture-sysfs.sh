#!/usr/bin/env bash
# hack/capture-sysfs.sh — copy this machine's topology files from sysfs into a fixture tree.
#
# Usage: hack/capture-sysfs.sh DEST [SYSFS_ROOT]
#
# Copies only the standard files topolet's discovery reads (plugin/src/host/sysfs.rs) from
# SYSFS_ROOT (default /sys) to DEST, as plain files and directories (PCI device symlinks are
# resolved): cpu/online; per online CPU topology/{physical_package_id,die_id,core_id,
# thread_siblings_list} and cache/indexK/{level,id,shared_cpu_list}; node/online and per node
# cpulist, meminfo, distance, hugepages/hugepages-*/nr_hugepages; bus/pci/devices/*/numa_node.
# Missing optional files are skipped. DEST must not exist yet (or be empty).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 DEST [SYSFS_ROOT]" >&2
  exit 2
fi
dest="$1"
src="${2:-/sys}"
if [[ -e "$dest" && -n "$(ls -A "$dest")" ]]; then
  echo "error: $dest exists and is not empty" >&2
  exit 1
fi

# copy REL: copy SRC/REL to DEST/REL when it is a readable file.
copy() {
  local rel="$1"
  [[ -f "$src/$rel" && -r "$src/$rel" ]] || return 0
  mkdir -p "$dest/$(dirname "$rel")"
  cat "$src/$rel" >"$dest/$rel"
}

cpu=devices/system/cpu
copy "$cpu/online"
# Expand the online list (e.g. 0-5,7) into ids.
IFS=, read -r -a ranges <"$src/$cpu/online"
for r in "${ranges[@]}"; do
  lo="${r%-*}"
  hi="${r#*-}"
  for ((id = lo; id <= hi; id++)); do
    d="$cpu/cpu$id"
    for f in physical_package_id die_id core_id thread_siblings_list; do
      copy "$d/topology/$f"
    done
    for idx in "$src/$d"/cache/index*; do
      [[ -d "$idx" ]] || continue
      for f in level id shared_cpu_list; do
        copy "$d/cache/$(basename "$idx")/$f"
      done
    done
  done
done

node=devices/system/node
if [[ -d "$src/$node" ]]; then
  copy "$node/online"
  for n in "$src/$node"/node[0-9]*; do
    [[ -d "$n" ]] || continue
    rel="$node/$(basename "$n")"
    for f in cpulist meminfo distance; do
      copy "$rel/$f"
    done
    for h in "$n"/hugepages/hugepages-*; do
      [[ -d "$h" ]] || continue
      copy "$rel/hugepages/$(basename "$h")/nr_hugepages"
    done
  done
fi

for dev in "$src"/bus/pci/devices/*; do
  [[ -e "$dev" ]] || continue
  copy "bus/pci/devices/$(basename "$dev")/numa_node"
done

echo "captured $(find "$dest" -type f | wc -l) files from $src into $dest"
