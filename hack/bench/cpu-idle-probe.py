#!/usr/bin/env python3
# hack/bench/cpu-idle-probe.py — does cgroup cpu.idle help a regular pod's wake-ups against a
# batch pod (docs/src/reclaimed-cpu.md, "Kernel levers")? Builds a kubepods-shaped tree under the
# cgroup v1 cpu controller (besteffort shares 2 / pod shares 2 with a spinner; burstable shares
# 1024 / pod shares 512 with a 1 ms wake-up probe), both pinned to CPU 1, and alternates cpu.idle
# off, on the batch pod's cgroup, and on the besteffort QoS cgroup; prints the probe's lateness
# per setting. Root, cgroup v1 with cpu.idle (Linux >= 5.15). Removes its cgroups on exit.
# Usage: hack/bench/cpu-idle-probe.py [ROUNDS]   (each round: 5 s per setting)
import os, subprocess, time, sys
R = "/sys/fs/cgroup/cpu/topolet-cpu-idle-probe"
def w(p, v): open(p, "w").write(str(v))
def mk(p):
    os.makedirs(p, exist_ok=True)
for d in ["besteffort/podB", "burstable/podR"]:
    mk(f"{R}/{d}")
w(f"{R}/besteffort/cpu.shares", 2); w(f"{R}/besteffort/podB/cpu.shares", 2)
w(f"{R}/burstable/cpu.shares", 1024); w(f"{R}/burstable/podR/cpu.shares", 512)
spin = subprocess.Popen(["taskset", "-c", "1", "sh", "-c", "while :; do :; done"])
w(f"{R}/besteffort/podB/cgroup.procs", spin.pid)
PROBE = r'''
import time, sys
out = []
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    t = time.monotonic()
    target = (int(t * 1000) + 1) / 1000.0
    time.sleep(max(0.0, target - time.monotonic()))
    out.append(time.monotonic() - target)
print(" ".join(f"{x*1e6:.0f}" for x in out))
'''
res = {'none': [], 'pod': [], 'qos': []}
try:
    for rnd in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
        for idle in ('none', 'pod', 'qos'):
            w(f"{R}/besteffort/podB/cpu.idle", 1 if idle == 'pod' else 0)
            w(f"{R}/besteffort/cpu.idle", 1 if idle == 'qos' else 0)
            p = subprocess.Popen(["taskset", "-c", "1", "python3", "-c", PROBE, "5"], stdout=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: open(f"{R}/burstable/podR/cgroup.procs", "w").write(str(os.getpid())))
            o, _ = p.communicate()
            res[idle] += [int(x) for x in o.split()]
finally:
    spin.kill(); spin.wait()
    w(f"{R}/besteffort/cpu.idle", 0)
    time.sleep(0.2)
    for d in ["besteffort/podB", "burstable/podR", "besteffort", "burstable", ""]:
        try: os.rmdir(f"{R}/{d}".rstrip("/"))
        except OSError as e: print("cleanup", d, e)
def q(v, f): v = sorted(v); return v[min(len(v)-1, int(f*len(v)))]
for idle in ('none', 'pod', 'qos'):
    v = res[idle]
    print(f"cpu.idle on {idle}: n={len(v)} p50={q(v,.5)}us p99={q(v,.99)}us p99.9={q(v,.999)}us max={max(v)}us")
print("load", open("/proc/loadavg").read().split()[:3])
