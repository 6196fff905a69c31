// colocation: the workload of hack/bench.sh part `reclaimed` (integration/tests/kubelet_colocation.rs),
// one static binary (standard library only) that the test's pods run from a hostPath directory DIR.
//
//	colocation regular DIR   the regular pod's probe. At start it calibrates a work unit (a fixed
//	                         loop of integer hashing) and the units per tick (-work-us of work);
//	                         then it waits for requests: DIR/req holds one JSON object
//	                         {"id":N,"mode":"ticks"|"spin","seconds":S,"threads":K} (written by
//	                         rename). "ticks": every 1 ms tick (clock_nanosleep TIMER_ABSTIME on
//	                         CLOCK_REALTIME) it records how late it woke, then does its units and
//	                         sleeps to the next tick it has not missed; "spin": K threads do units
//	                         without sleeping. Either lasts S seconds or until DIR/stop-N exists.
//	                         The answer is DIR/res-N.json (by rename), and for "spin" also
//	                         DIR/ack-N.json as soon as the threads start (with their start time).
//	                         "cpus" (optional, any mode but "isolation"): the CPUs every thread of
//	                         the request runs on (sched_setaffinity), e.g. the batch pods' CPUs, so
//	                         the regular pod competes with them instead of escaping to the
//	                         reserved CPUs its cpuset also allows. A "ticks" result counts its
//	                         throughput over the whole window's wall time: a late or missed tick
//	                         is lost work ("work_units_per_s" is the speed of the work phases alone).
//	                         "isolation" (hack/bench.sh part `isolation`,
//	                         integration/tests/kubelet_isolation.rs): one thread wakes every 1 ms
//	                         tick as "ticks" does, without work, and records every tick's lateness;
//	                         meanwhile, every "burst_every_ms", "burst_threads" threads each run until
//	                         their own CPU time (CLOCK_THREAD_CPUTIME_ID) has grown by "burst_ms",
//	                         and the burst's wall time (first start to last end) is recorded; a burst
//	                         that outlasts its period delays the next. The result carries the
//	                         lateness and wall times themselves (late_ns, burst_wall_ns). At start the
//	                         probe writes DIR/started.json ({"start_ns"}).
//	colocation batch DIR     the batch pod's hog: spins one thread while DIR/hog exists, else
//	                         checks every 20 ms.
//	colocation spin THREADS  a neighbour: THREADS OS threads spinning until killed.
//	colocation steps SEED    a regular pod's load that changes every few seconds (hack/api-cost.sh
//	                         API_RECLAIMED=1): 2-8 s steps of 0-600 milli-CPU on two threads, a
//	                         fixed sequence per SEED, until killed (steps.go).
//
// Times are Unix nanoseconds (CLOCK_REALTIME), so the test on the host compares them with its own.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const (
	clockRealtime      = 0
	clockThreadCputime = 3
	timerAbstime       = 1
	tick               = time.Millisecond
	// One work unit: this many rounds of a 64-bit xorshift-multiply, a few µs on a current core.
	unitRounds = 2000
)

var sink atomic.Uint64

// unit does one work unit (nothing the compiler can drop: the result is published).
func unit(seed uint64) uint64 {
	x := seed | 1
	for i := 0; i < unitRounds; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		x *= 0x9E3779B97F4A7C15
	}
	return x
}

// sleepUntil sleeps until the Unix time `at` (ns) with clock_nanosleep(CLOCK_REALTIME,
// TIMER_ABSTIME): the kernel's hrtimer, not the Go runtime's timer wheel (ms granularity).
func sleepUntil(at int64) {
	ts := syscall.NsecToTimespec(at)
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_CLOCK_NANOSLEEP, clockRealtime, timerAbstime,
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if e != syscall.EINTR {
			return
		}
	}
}

// pin confines the calling OS thread to cpus (sched_setaffinity on thread 0, i.e. itself); the
// caller holds runtime.LockOSThread, so the goroutine stays on the pinned thread. Empty: no-op.
func pin(cpus []int) error {
	if len(cpus) == 0 {
		return nil
	}
	var mask [16]uint64 // 1024 CPUs, the kernel's default cpumask size
	for _, c := range cpus {
		if c < 0 || c >= len(mask)*64 {
			return fmt.Errorf("cpu %d out of range", c)
		}
		mask[c/64] |= 1 << (uint(c) % 64)
	}
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(mask),
		uintptr(unsafe.Pointer(&mask[0])))
	if e != 0 {
		return fmt.Errorf("sched_setaffinity %v: %v", cpus, e)
	}
	return nil
}

type request struct {
	ID      int     `json:"id"`
	Mode    string  `json:"mode"`
	Seconds float64 `json:"seconds"`
	Threads int     `json:"threads"`
	Cpus    []int   `json:"cpus"`
	// "isolation" only.
	BurstMs      float64 `json:"burst_ms"`
	BurstEveryMs float64 `json:"burst_every_ms"`
	BurstThreads int     `json:"burst_threads"`
}

type result struct {
	ID           int     `json:"id"`
	Mode         string  `json:"mode"`
	StartNs      int64   `json:"start_ns"`
	EndNs        int64   `json:"end_ns"`
	Units        uint64  `json:"units"`
	UnitsPerTick int     `json:"units_per_tick"`
	Ticks        int     `json:"ticks"`
	Missed       int     `json:"missed_ticks"`
	WorkSeconds  float64 `json:"work_seconds"`
	// Units per second of the window's wall time: the work done, a missed tick's included.
	Throughput float64 `json:"throughput_units_per_s"`
	// Units per second of the work phases' wall time (the speed of the CPU-bound part).
	WorkSpeed float64 `json:"work_units_per_s"`
	// The CPUs the request's threads were confined to (empty: the container's cpuset).
	Cpus      []int   `json:"cpus,omitempty"`
	LateP50Us float64 `json:"late_p50_us"`
	LateP99Us float64 `json:"late_p99_us"`
	LateMaxUs float64 `json:"late_max_us"`
	// "isolation" only: every tick's lateness and every burst's wall time (ns).
	LateNs      []int64 `json:"late_ns,omitempty"`
	BurstWallNs []int64 `json:"burst_wall_ns,omitempty"`
}

func writeAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func quantile(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i]) / 1e3
}

// calibrate: the units that take workUs of work, measured as the fastest of several tries (the
// machine is shared: the fastest is the one least disturbed).
func calibrate(workUs int) int {
	best := time.Duration(1 << 62)
	for try := 0; try < 50; try++ {
		t := time.Now()
		for i := 0; i < 20; i++ {
			sink.Add(unit(uint64(i)))
		}
		if d := time.Since(t); d < best {
			best = d
		}
	}
	per := best / 20
	n := int(time.Duration(workUs) * time.Microsecond / per)
	if n < 1 {
		n = 1
	}
	return n
}

// stopper: a flag set once DIR/stop-ID exists (checked every 10 ms) or when the caller ends.
func stopper(dir string, id int) (*atomic.Bool, func()) {
	var stop, done atomic.Bool
	path := filepath.Join(dir, fmt.Sprintf("stop-%d", id))
	go func() {
		for !done.Load() {
			if _, err := os.Stat(path); err == nil {
				stop.Store(true)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return &stop, func() { done.Store(true) }
}

func ticks(dir string, req request, perTick int) result {
	stop, end0 := stopper(dir, req.ID)
	defer end0()
	// Locked and not unlocked: a pinned thread ends with this goroutine (the runtime exits a
	// thread whose locked goroutine returns) instead of serving others on the pinned CPUs.
	runtime.LockOSThread()
	r := result{ID: req.ID, Mode: req.Mode, UnitsPerTick: perTick, Cpus: req.Cpus}
	if err := pin(req.Cpus); err != nil {
		fmt.Fprintln(os.Stderr, "ticks:", err)
		return r
	}
	end := time.Now().Add(time.Duration(req.Seconds * float64(time.Second))).UnixNano()
	next := (time.Now().UnixNano()/int64(tick) + 1) * int64(tick)
	r.StartNs = next
	late := make([]int64, 0, int(req.Seconds*1000)+1)
	var work time.Duration
	for next < end && !stop.Load() {
		sleepUntil(next)
		woke := time.Now()
		late = append(late, woke.UnixNano()-next)
		for i := 0; i < perTick; i++ {
			sink.Add(unit(uint64(i)))
		}
		work += time.Since(woke)
		r.Units += uint64(perTick)
		r.Ticks++
		now := time.Now().UnixNano()
		next += int64(tick)
		for next <= now {
			next += int64(tick)
			r.Missed++
		}
	}
	r.EndNs = time.Now().UnixNano()
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	r.WorkSeconds = work.Seconds()
	if work > 0 {
		r.WorkSpeed = float64(r.Units) / work.Seconds()
	}
	if wall := r.EndNs - r.StartNs; wall > 0 {
		r.Throughput = float64(r.Units) / (float64(wall) / 1e9)
	}
	r.LateP50Us, r.LateP99Us = quantile(late, 0.5), quantile(late, 0.99)
	if len(late) > 0 {
		r.LateMaxUs = float64(late[len(late)-1]) / 1e3
	}
	return r
}

// threadCPU is the calling thread's CPU time (ns).
func threadCPU() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCputime, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// isolation: the Guaranteed pod's probe of part `isolation` (see the header).
func isolation(dir string, req request) result {
	// Every thread of ours must be able to run at once: the Go runtime would otherwise size
	// GOMAXPROCS to the cpuset (1 CPU for an exclusive container) and run the bursts' threads
	// and the tick thread in turns on one P, which is the runtime's scheduling, not the kernel's.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(req.BurstThreads + 4))
	stop, end0 := stopper(dir, req.ID)
	defer end0()
	r := result{ID: req.ID, Mode: req.Mode}
	d := time.Duration(req.Seconds * float64(time.Second))
	every := int64(req.BurstEveryMs * float64(time.Millisecond))
	work := int64(req.BurstMs * float64(time.Millisecond))
	start := time.Now()
	end := start.Add(d).UnixNano()
	var walls []int64
	bursts := make(chan struct{})
	go func() {
		defer close(bursts)
		if every <= 0 || work <= 0 || req.BurstThreads <= 0 {
			return
		}
		runtime.LockOSThread()
		next := (start.UnixNano()/every + 1) * every
		for next < end && !stop.Load() {
			sleepUntil(next)
			b := time.Now()
			var wg sync.WaitGroup
			for k := 0; k < req.BurstThreads; k++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					c0 := threadCPU()
					for threadCPU()-c0 < work {
						sink.Add(unit(uint64(k)))
					}
				}()
			}
			wg.Wait()
			now := time.Now()
			walls = append(walls, now.Sub(b).Nanoseconds())
			next += every
			for next <= now.UnixNano() {
				next += every
			}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	next := (start.UnixNano()/int64(tick) + 1) * int64(tick)
	r.StartNs = next
	late := make([]int64, 0, int(req.Seconds*1000)+1)
	for next < end && !stop.Load() {
		sleepUntil(next)
		now := time.Now().UnixNano()
		late = append(late, now-next)
		r.Ticks++
		next += int64(tick)
		for next <= now {
			next += int64(tick)
			r.Missed++
		}
	}
	<-bursts
	r.EndNs = time.Now().UnixNano()
	r.LateNs, r.BurstWallNs = late, walls
	sorted := append([]int64(nil), late...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	r.LateP50Us, r.LateP99Us = quantile(sorted, 0.5), quantile(sorted, 0.99)
	if len(sorted) > 0 {
		r.LateMaxUs = float64(sorted[len(sorted)-1]) / 1e3
	}
	return r
}

// spinForever: THREADS OS threads spinning (a neighbour of part `isolation`).
func spinForever(threads int) {
	runtime.GOMAXPROCS(threads + 2)
	for k := 0; k < threads; k++ {
		go func() {
			runtime.LockOSThread()
			for {
				sink.Add(unit(uint64(k)))
			}
		}()
	}
	select {}
}

func spin(dir string, req request) result {
	r := result{ID: req.ID, Mode: req.Mode, Cpus: req.Cpus}
	d := time.Duration(req.Seconds * float64(time.Second))
	var wg sync.WaitGroup
	var units atomic.Uint64
	stop, end0 := stopper(dir, req.ID)
	defer end0()
	start := time.Now()
	r.StartNs = start.UnixNano()
	for k := 0; k < max(req.Threads, 1); k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Locked for good: the pinned thread exits with the goroutine.
			runtime.LockOSThread()
			if err := pin(req.Cpus); err != nil {
				fmt.Fprintln(os.Stderr, "spin:", err)
				return
			}
			for !stop.Load() && time.Since(start) < d {
				sink.Add(unit(uint64(k)))
				units.Add(1)
			}
		}()
	}
	if err := writeAtomic(filepath.Join(dir, fmt.Sprintf("ack-%d.json", req.ID)), r); err != nil {
		fmt.Fprintln(os.Stderr, "ack:", err)
	}
	wg.Wait()
	r.EndNs = time.Now().UnixNano()
	r.Units = units.Load()
	return r
}

func regular(dir string) {
	if err := writeAtomic(filepath.Join(dir, "started.json"), map[string]int64{"start_ns": time.Now().UnixNano()}); err != nil {
		fmt.Fprintln(os.Stderr, "started:", err)
	}
	perTick := calibrate(300)
	fmt.Printf("regular: %d units per tick (300 µs of work when undisturbed)\n", perTick)
	last := -1
	for {
		b, err := os.ReadFile(filepath.Join(dir, "req"))
		var req request
		if err != nil || json.Unmarshal(b, &req) != nil || req.ID == last {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		last = req.ID
		var r result
		switch req.Mode {
		case "ticks":
			r = ticks(dir, req, perTick)
		case "spin":
			r = spin(dir, req)
		case "isolation":
			r = isolation(dir, req)
		default:
			fmt.Fprintln(os.Stderr, "unknown mode", req.Mode)
			continue
		}
		if err := writeAtomic(filepath.Join(dir, fmt.Sprintf("res-%d.json", req.ID)), r); err != nil {
			fmt.Fprintln(os.Stderr, "result:", err)
		}
	}
}

func batch(dir string) {
	hog := filepath.Join(dir, "hog")
	for {
		if _, err := os.Stat(hog); err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		t := time.Now()
		for time.Since(t) < 20*time.Millisecond {
			sink.Add(unit(1))
		}
	}
}

func main() {
	usage := func() {
		fmt.Fprintln(os.Stderr, "usage: colocation regular|batch DIR | colocation spin THREADS | colocation steps SEED")
		os.Exit(2)
	}
	if len(os.Args) != 3 {
		usage()
	}
	switch os.Args[1] {
	case "regular":
		regular(os.Args[2])
	case "batch":
		batch(os.Args[2])
	case "spin":
		n, err := strconv.Atoi(os.Args[2])
		if err != nil || n < 1 {
			usage()
		}
		spinForever(n)
	case "steps":
		seed, err := strconv.ParseUint(os.Args[2], 10, 64)
		if err != nil {
			usage()
		}
		steps(seed)
	default:
		usage()
	}
}
