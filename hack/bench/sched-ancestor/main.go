// Command sched-ancestor measures, on plain cgroups and without Kubernetes, what a batch hog
// placed where the kubelet puts a BestEffort pod (kubepods/besteffort/<pod>) does to the wake-up
// lateness of a regular pod (kubepods/burstable/<pod>) on the CPU they share, and which of the
// scheduler levers a node agent can pull changes it. It isolates the kernel's part of the
// reclaimed-CPU bench's wake-up figure (integration/tests/kubelet_colocation.rs) from the stack's.
//
// Every process runs on one CPU (-cpu). The roles, each a child process of this one that moves
// itself into its cgroup first:
//
//	waker   the regular pod: every 1 ms tick (clock_nanosleep TIMER_ABSTIME on CLOCK_MONOTONIC)
//	        it records how late it woke, then computes for -work µs;
//	hog     the batch pod: -hog-threads spinning threads under a CFS quota of -quota µs per
//	        100 ms (topolet's suppress loop sets one on every batch container);
//	daemon  a task outside kubepods (a system daemon: on a node the container runtime, the
//	        kubelet, the API server's clients): busy for -daemon-busy µs every -daemon-period µs.
//
// The conditions, each a -seconds window per round, in an order rotated every round so drift and
// the machine's noise hit all alike; the lateness samples of every round are pooled:
//
//	solo                   daemon + waker
//	batch                  daemon + hog in kubepods/besteffort/pod + waker
//	batch cpu.idle         the hog's pod cgroup with cpu.idle = 1 (Linux 5.15, commit 304000390f88)
//	batch QoS cpu.idle     the BestEffort QoS cgroup (kubepods/besteffort, the hog's pod's parent)
//	                       with cpu.idle = 1: the level where the hog's and the waker's ancestors
//	                       meet (kubepods' children), so check_preempt_wakeup_fair compares an
//	                       idle entity with a non-idle one and preempts at once
//	batch QoS cpu.idle SCHED_IDLE  both
//	batch SCHED_IDLE       the hog's threads under the SCHED_IDLE policy (what an OCI
//	                       process.scheduler of SCHED_IDLE gives every task of a container):
//	                       kernel/sched/fair.c check_preempt_wakeup_fair preempts an idle-policy
//	                       task for a waking non-idle one before it compares cgroup entities
//	batch slice 100ms      the hog's threads asking for a 100 ms slice (sched_setattr
//	                       sched_runtime, EEVDF custom slices, Linux 6.12)
//	batch slice 0.1ms      the same, 0.1 ms
//	batch outside kubepods the hog in a cgroup beside kubepods (cpu.shares 2) instead of in it
//	solo no-daemon         waker only
//	batch no-daemon        hog + waker
//	batch SCHED_IDLE no-daemon  the same, the hog's threads under SCHED_IDLE
//	batch QoS cpu.idle no-daemon  the same, the BestEffort QoS cgroup with cpu.idle = 1
//
// Output: one JSON object per condition on stdout ({"condition", "n", "p50_us", "p99_us",
// "max_us", "p99_ratio"}, the ratio against "solo", or against "solo no-daemon" for the
// no-daemon rows), a table on stderr. Needs root and the cpu controller (cgroup v1 or v2); every
// cgroup it makes lives under <cpu root>/topolet-sched-ancestor and is removed at exit, also on
// SIGINT and SIGTERM.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

const (
	clockMonotonic = 1
	timerAbstime   = 1
	tickNs         = 1_000_000
	groupName      = "topolet-sched-ancestor"
)

// pin confines the calling OS thread to cpu (sched_setaffinity on thread 0, itself); the caller
// holds runtime.LockOSThread.
func pin(cpu int) error {
	var mask [16]uint64 // 1024 CPUs, the kernel's default cpumask size
	if cpu < 0 || cpu >= len(mask)*64 {
		return fmt.Errorf("cpu %d out of range", cpu)
	}
	mask[cpu/64] |= 1 << (uint(cpu) % 64)
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(mask),
		uintptr(unsafe.Pointer(&mask[0])))
	if e != 0 {
		return fmt.Errorf("sched_setaffinity %d: %v", cpu, e)
	}
	return nil
}

// schedAttr is the kernel's struct sched_attr (include/uapi/linux/sched/types.h), version 1.
type schedAttr struct {
	size, policy     uint32
	flags            uint64
	nice             int32
	priority         uint32
	runtime          uint64
	deadline, period uint64
	utilMin, utilMax uint32
}

// setIdle puts the calling thread under SCHED_IDLE (include/uapi/linux/sched.h: 5).
func setIdle() error {
	nr := map[string]uintptr{"amd64": 314, "arm64": 274}[runtime.GOARCH]
	if nr == 0 {
		return fmt.Errorf("sched_setattr: syscall number unknown on %s", runtime.GOARCH)
	}
	a := schedAttr{policy: 5}
	a.size = uint32(unsafe.Sizeof(a))
	_, _, e := syscall.RawSyscall(nr, 0, uintptr(unsafe.Pointer(&a)), 0)
	if e != 0 {
		return fmt.Errorf("sched_setattr SCHED_IDLE: %v", e)
	}
	return nil
}

// setSlice asks for a fair-class slice of ns nanoseconds for the calling thread (SCHED_OTHER with
// sched_runtime set: the EEVDF custom slice, Linux 6.12 kernel/sched/syscalls.c).
func setSlice(ns uint64) error {
	nr := map[string]uintptr{"amd64": 314, "arm64": 274}[runtime.GOARCH]
	if nr == 0 {
		return fmt.Errorf("sched_setattr: syscall number unknown on %s", runtime.GOARCH)
	}
	a := schedAttr{runtime: ns}
	a.size = uint32(unsafe.Sizeof(a))
	_, _, e := syscall.RawSyscall(nr, 0, uintptr(unsafe.Pointer(&a)), 0)
	if e != 0 {
		return fmt.Errorf("sched_setattr sched_runtime=%d: %v", ns, e)
	}
	return nil
}

func nowNs() int64 {
	var ts syscall.Timespec
	_, _, _ = syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func sleepUntil(at int64) {
	ts := syscall.NsecToTimespec(at)
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_CLOCK_NANOSLEEP, clockMonotonic, timerAbstime,
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if e != syscall.EINTR {
			return
		}
	}
}

func busyFor(ns int64) {
	end := nowNs() + ns
	for nowNs() < end {
	}
}

// The cpu controller's files, v1 or v2.
type hier struct {
	root string // the controller's mount
	v2   bool
}

func detect() (hier, error) {
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.shares"); err == nil {
		return hier{root: "/sys/fs/cgroup/cpu"}, nil
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil &&
		strings.Contains(" "+string(b)+" ", " cpu ") {
		return hier{root: "/sys/fs/cgroup", v2: true}, nil
	}
	return hier{}, errors.New("no cpu controller: neither /sys/fs/cgroup/cpu/cpu.shares (v1) nor cpu in /sys/fs/cgroup/cgroup.controllers (v2)")
}

func write(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

// mk makes dir (relative to the group) with cpu.shares (v2: the kubelet's shares-to-weight
// conversion, pkg/kubelet/cm/cgroup_manager_linux.go CpuSharesToCpuWeight).
func (h hier) mk(rel string, shares int) (string, error) {
	dir := filepath.Join(h.root, groupName, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if h.v2 {
		for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
			if err := write(filepath.Join(d, "cgroup.subtree_control"), "+cpu"); err != nil {
				return "", err
			}
			if d == h.root {
				break
			}
		}
		return dir, write(filepath.Join(dir, "cpu.weight"), strconv.Itoa(1+((shares-2)*9999)/262142))
	}
	return dir, write(filepath.Join(dir, "cpu.shares"), strconv.Itoa(shares))
}

func (h hier) quota(dir string, us int) error {
	if h.v2 {
		return write(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d 100000", us))
	}
	if err := write(filepath.Join(dir, "cpu.cfs_period_us"), "100000"); err != nil {
		return err
	}
	return write(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.Itoa(us))
}

// cleanup removes the group, deepest first; a cgroup still holding a task (a child not yet
// reaped) is retried for a while.
func (h hier) cleanup() error {
	base := filepath.Join(h.root, groupName)
	var dirs []string
	_ = filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var last error
	for _, d := range dirs {
		for try := 0; ; try++ {
			last = os.Remove(d)
			if last == nil || errors.Is(last, os.ErrNotExist) || try == 200 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if last != nil && !errors.Is(last, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", base, last)
	}
	return nil
}

// enter moves this process into dir and pins the calling thread.
func enter(dir string, cpu int) error {
	runtime.LockOSThread()
	if err := write(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	return pin(cpu)
}

func roleWaker(dir string, cpu int, seconds float64, workUs int) error {
	if err := enter(dir, cpu); err != nil {
		return err
	}
	n := int(seconds * 1000)
	late := make([]int64, 0, n)
	next := nowNs()
	for i := 0; i < n; i++ {
		next += tickNs
		sleepUntil(next)
		woke := nowNs()
		l := woke - next
		if l < 0 {
			l = 0
		}
		late = append(late, l)
		if l > tickNs { // a missed tick: go on from now, do not catch up
			next = woke
		}
		busyFor(int64(workUs) * 1000)
	}
	return json.NewEncoder(os.Stdout).Encode(late)
}

func roleHog(dir string, cpu, threads int, sliceNs uint64, idlePolicy bool) error {
	if err := enter(dir, cpu); err != nil {
		return err
	}
	errs := make(chan error, threads)
	var wg sync.WaitGroup
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			if err := pin(cpu); err != nil {
				errs <- err
				return
			}
			if idlePolicy {
				if err := setIdle(); err != nil {
					errs <- err
					return
				}
			}
			if sliceNs > 0 {
				if err := setSlice(sliceNs); err != nil {
					errs <- err
					return
				}
			}
			var x uint64 = 1
			for {
				x ^= x << 13
				x ^= x >> 7
			}
		}()
	}
	go func() { wg.Wait(); close(errs) }()
	return <-errs // blocks while the threads spin; the parent kills this process
}

func roleDaemon(dir string, cpu, busyUs, periodUs int) error {
	if err := enter(dir, cpu); err != nil {
		return err
	}
	next := nowNs()
	for {
		next += int64(periodUs) * 1000
		sleepUntil(next)
		busyFor(int64(busyUs) * 1000)
	}
}

type condition struct {
	name      string
	daemon    bool
	hog       string // "", "in", "out"
	idle      bool   // cpu.idle = 1 on the hog's pod cgroup
	qosIdle   bool   // cpu.idle = 1 on the BestEffort QoS cgroup (kubepods/besteffort)
	sliceNs   uint64
	policy    bool // the hog's threads under SCHED_IDLE
	reference string
}

var conditions = []condition{
	{name: "solo", daemon: true},
	{name: "batch", daemon: true, hog: "in", reference: "solo"},
	{name: "batch cpu.idle", daemon: true, hog: "in", idle: true, reference: "solo"},
	{name: "batch QoS cpu.idle", daemon: true, hog: "in", qosIdle: true, reference: "solo"},
	{name: "batch QoS cpu.idle SCHED_IDLE", daemon: true, hog: "in", qosIdle: true, policy: true, reference: "solo"},
	{name: "batch SCHED_IDLE", daemon: true, hog: "in", policy: true, reference: "solo"},
	{name: "batch slice 100ms", daemon: true, hog: "in", sliceNs: 100_000_000, reference: "solo"},
	{name: "batch slice 0.1ms", daemon: true, hog: "in", sliceNs: 100_000, reference: "solo"},
	{name: "batch outside kubepods", daemon: true, hog: "out", reference: "solo"},
	{name: "solo no-daemon"},
	{name: "batch no-daemon", hog: "in", reference: "solo no-daemon"},
	{name: "batch SCHED_IDLE no-daemon", hog: "in", policy: true, reference: "solo no-daemon"},
	{name: "batch QoS cpu.idle no-daemon", hog: "in", qosIdle: true, reference: "solo no-daemon"},
}

type opts struct {
	cpu, rounds, workUs, hogThreads, quotaUs, daemonBusyUs, daemonPeriodUs int
	seconds                                                                float64
}

// The children running now, killed by stop or by the signal handler before the cgroups go.
var (
	childrenMu sync.Mutex
	children   = map[*exec.Cmd]bool{}
)

// self is this program in another role; it dies with this process (PR_SET_PDEATHSIG).
func self(args ...string) *exec.Cmd {
	exe, _ := os.Executable()
	c := exec.Command(exe, args...)
	c.Stderr = os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return c
}

func start(c *exec.Cmd) error {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	if err := c.Start(); err != nil {
		return err
	}
	children[c] = true
	return nil
}

func stop(c *exec.Cmd) {
	if c == nil || c.Process == nil {
		return
	}
	childrenMu.Lock()
	delete(children, c)
	childrenMu.Unlock()
	_ = c.Process.Kill()
	_ = c.Wait()
}

func stopAll() {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	for c := range children {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	children = map[*exec.Cmd]bool{}
}

func one(h hier, o opts, dirs map[string]string, c condition) ([]int64, error) {
	cpu := strconv.Itoa(o.cpu)
	var daemon, hog *exec.Cmd
	defer func() { stop(hog); stop(daemon) }()
	if c.daemon {
		daemon = self("daemon", dirs["system"], cpu, strconv.Itoa(o.daemonBusyUs), strconv.Itoa(o.daemonPeriodUs))
		if err := start(daemon); err != nil {
			return nil, err
		}
	}
	if c.hog != "" {
		dir := dirs["batch-"+c.hog]
		if err := write(filepath.Join(dir, "cpu.idle"), map[bool]string{true: "1", false: "0"}[c.idle]); err != nil && c.idle {
			return nil, err
		}
		if c.qosIdle {
			if err := write(filepath.Join(dirs["besteffort"], "cpu.idle"), "1"); err != nil {
				return nil, err
			}
			defer func() { _ = write(filepath.Join(dirs["besteffort"], "cpu.idle"), "0") }()
		}
		hog = self("hog", dir, cpu, strconv.Itoa(o.hogThreads), strconv.FormatUint(c.sliceNs, 10), strconv.FormatBool(c.policy))
		if err := start(hog); err != nil {
			return nil, err
		}
	}
	time.Sleep(300 * time.Millisecond) // the hog and daemon in their cgroups and running
	w := self("waker", dirs["regular"], cpu, strconv.FormatFloat(o.seconds, 'f', -1, 64), strconv.Itoa(o.workUs))
	var buf strings.Builder
	w.Stdout = &buf
	if err := start(w); err != nil {
		return nil, fmt.Errorf("waker: %w", err)
	}
	err := w.Wait()
	childrenMu.Lock()
	delete(children, w)
	childrenMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("waker: %w", err)
	}
	out := []byte(buf.String())
	var late []int64
	if err := json.Unmarshal(out, &late); err != nil {
		return nil, fmt.Errorf("waker output: %w", err)
	}
	if c.hog != "" {
		if hog.ProcessState != nil {
			return nil, fmt.Errorf("hog exited early: %v", hog.ProcessState)
		}
		_ = write(filepath.Join(dirs["batch-"+c.hog], "cpu.idle"), "0")
	}
	return late, nil
}

func quantile(v []int64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	i := int(q * float64(len(v)-1))
	return float64(v[i]) / 1e3
}

func run(o opts) error {
	h, err := detect()
	if err != nil {
		return err
	}
	if err := h.cleanup(); err != nil { // a run killed before its own cleanup
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; stopAll(); _ = h.cleanup(); os.Exit(130) }()
	defer func() { _ = h.cleanup() }()
	dirs := map[string]string{}
	for _, d := range []struct {
		key, rel string
		shares   int
	}{
		{"", "kubepods", 1024},
		{"", "kubepods/burstable", 512},
		{"regular", "kubepods/burstable/pod-regular", 512},
		{"besteffort", "kubepods/besteffort", 2},
		{"batch-in", "kubepods/besteffort/pod-batch", 2},
		{"system", "system", 1024},
		{"", "reclaimed", 2},
		{"batch-out", "reclaimed/pod-batch", 2},
	} {
		dir, err := h.mk(d.rel, d.shares)
		if err != nil {
			return err
		}
		if d.key != "" {
			dirs[d.key] = dir
		}
	}
	for _, k := range []string{"batch-in", "batch-out"} {
		if err := h.quota(dirs[k], o.quotaUs); err != nil {
			return err
		}
	}
	pooled := map[string][]int64{}
	for r := 0; r < o.rounds; r++ {
		for i := range conditions {
			c := conditions[(i+r)%len(conditions)]
			late, err := one(h, o, dirs, c)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, c.name, err)
			}
			pooled[c.name] = append(pooled[c.name], late...)
		}
	}
	p99 := map[string]float64{}
	for _, c := range conditions {
		v := pooled[c.name]
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		p99[c.name] = quantile(v, 0.99)
	}
	fmt.Fprintf(os.Stderr, "%-24s %7s %8s %8s %9s %s\n", "condition", "n", "p50 µs", "p99 µs", "max µs", "p99 ratio")
	for _, c := range conditions {
		v := pooled[c.name]
		row := map[string]any{"condition": c.name, "n": len(v), "p50_us": quantile(v, 0.5),
			"p99_us": p99[c.name], "max_us": quantile(v, 1)}
		ratio := ""
		if c.reference != "" && p99[c.reference] > 0 {
			row["p99_ratio"] = p99[c.name] / p99[c.reference]
			row["reference"] = c.reference
			ratio = fmt.Sprintf("%.2fx %s", p99[c.name]/p99[c.reference], c.reference)
		}
		if err := json.NewEncoder(os.Stdout).Encode(row); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%-24s %7d %8.0f %8.0f %9.0f %s\n", c.name, len(v), row["p50_us"], row["p99_us"], row["max_us"], ratio)
	}
	return nil
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sched-ancestor: %q is not an integer\n", s)
		os.Exit(2)
	}
	return n
}

func main() {
	if len(os.Args) > 1 {
		a := os.Args[2:]
		want := map[string]int{"waker": 4, "hog": 5, "daemon": 4}[os.Args[1]]
		if want == 0 {
			goto flags
		}
		if len(a) != want {
			fmt.Fprintf(os.Stderr, "sched-ancestor %s: want %d arguments, got %d\n", os.Args[1], want, len(a))
			os.Exit(2)
		}
		var err error
		switch os.Args[1] {
		case "waker":
			var s float64
			s, err = strconv.ParseFloat(a[2], 64)
			if err == nil {
				err = roleWaker(a[0], atoi(a[1]), s, atoi(a[3]))
			}
		case "hog":
			err = roleHog(a[0], atoi(a[1]), atoi(a[2]), uint64(atoi(a[3])), a[4] == "true")
		case "daemon":
			err = roleDaemon(a[0], atoi(a[1]), atoi(a[2]), atoi(a[3]))
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "sched-ancestor %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
flags:
	var o opts
	flag.IntVar(&o.cpu, "cpu", 1, "the CPU every process runs on")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds over every condition")
	flag.Float64Var(&o.seconds, "seconds", 5, "each condition's window per round")
	flag.IntVar(&o.workUs, "work", 300, "the waker's work per 1 ms tick, µs")
	flag.IntVar(&o.hogThreads, "hog-threads", 2, "the hog's spinning threads")
	flag.IntVar(&o.quotaUs, "quota", 60000, "the hog's CFS quota, µs per 100 ms")
	flag.IntVar(&o.daemonBusyUs, "daemon-busy", 400, "the daemon's busy time per period, µs")
	flag.IntVar(&o.daemonPeriodUs, "daemon-period", 1000, "the daemon's period, µs")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "sched-ancestor: %v\n", err)
		os.Exit(1)
	}
}
