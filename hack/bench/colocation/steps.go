package main

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// The load of `colocation steps SEED` (hack/api-cost.sh API_RECLAIMED=1): a regular pod whose CPU
// use changes every few seconds, the same sequence for every run with the same seed.
const (
	stepsThreads  = 2
	stepsPeriod   = 10 * time.Millisecond
	stepsMinMs    = 2000
	stepsMaxMs    = 8000
	stepsLevels   = 7   // 0, 100, ..., 600 milli-CPU
	stepsLevelMil = 100 // milli-CPU between two levels
)

// splitmix64 is the generator (Steele, Lea, Flood: "Fast splittable pseudorandom number
// generators"), small enough to be the same in any language that reruns the sequence.
type splitmix64 struct{ x uint64 }

func (s *splitmix64) next() uint64 {
	s.x += 0x9E3779B97F4A7C15
	z := s.x
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// steps runs until killed: step after step, each lasting 2 to 8 s (uniform, whole ms) at a load
// of 0 to 600 milli-CPU (uniform, steps of 100m), both drawn from splitmix64(seed). The load is
// spread over two threads, each busy (work units) for load/2 of every 10 ms period and asleep for
// the rest, so a Burstable pod's threads go wherever its cpuset lets the kernel put them. Partial
// load rather than whole spinning threads: one or two spinning threads keep the pool's CPU busy,
// so the peak over the advertised amount's window (1 min by default) — and the amount with it —
// would sit at 0 and nothing would move. Each step is printed as it starts (Unix ns, milli-CPU, ms).
func steps(seed uint64) {
	runtime.GOMAXPROCS(stepsThreads + 2)
	var busyNs atomic.Int64
	for k := 0; k < stepsThreads; k++ {
		go func() {
			runtime.LockOSThread()
			period := time.Now().UnixNano()
			for {
				until := period + busyNs.Load()
				for time.Now().UnixNano() < until {
					sink.Add(unit(uint64(k)))
				}
				period += int64(stepsPeriod)
				if now := time.Now().UnixNano(); period < now {
					period = now // behind (preempted): start afresh rather than catch up
				}
				sleepUntil(period)
			}
		}()
	}
	g := splitmix64{x: seed}
	at := time.Now().UnixNano()
	for i := 0; ; i++ {
		ms := stepsMinMs + int64(g.next()%(stepsMaxMs-stepsMinMs+1))
		millis := int64(g.next()%stepsLevels) * stepsLevelMil
		// Each thread's share of the period: millis/1000 of a CPU split over the threads.
		busyNs.Store(millis * int64(stepsPeriod) / 1000 / stepsThreads)
		fmt.Printf("step %d at %d: %dm for %d ms\n", i, time.Now().UnixNano(), millis, ms)
		at += ms * int64(time.Millisecond)
		sleepUntil(at)
	}
}
