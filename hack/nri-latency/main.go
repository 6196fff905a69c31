// nri-latency: times CRI calls through a real containerd from an in-process gRPC client (no
// process start-up in the measurement), for hack/nri-latency.sh and hack/bench.sh.
//
//	nri-latency run   -endpoint SOCK -state DIR -label L -pod NAME -cgroup-parent P -logdir D -image I -n N -out FILE [-mode create|create-start]
//	nri-latency stats FILE
//	nri-latency json  FILE
//
// run: creates (once, remembered in DIR/<pod>.id) a host-network pod, then N times:
//   - mode create (default): CreateContainer (timed, µs), RemoveContainer (not timed);
//   - mode create-start: CreateContainer + StartContainer (timed together, µs), then
//     StopContainer (timeout 0) and RemoveContainer (not timed).
//
// One warm-up iteration is discarded. Appends "<label> <µs>" lines to FILE.
// stats: per label, n, median, p10, p90 and mean in ms, in the order labels first appear; then
// each label's median minus the first label's, with a 95% bootstrap interval (2000 resamples).
// json: the same as one JSON object (ms): {"conditions":{L:{"n","median","p99","p10","p90","mean"}},
// "overhead":{L:{"median_diff","ci95_lo","ci95_hi"}}}, overhead against the first label.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nri-latency: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		die("usage: nri-latency run|stats ...")
	}
	switch os.Args[1] {
	case "run":
		run(os.Args[2:])
	case "stats":
		if len(os.Args) != 3 {
			die("usage: nri-latency stats FILE")
		}
		stats(os.Args[2])
	case "json":
		if len(os.Args) != 3 {
			die("usage: nri-latency json FILE")
		}
		statsJSON(os.Args[2])
	default:
		die("unknown command %q", os.Args[1])
	}
}

func run(args []string) {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	endpoint := fs.String("endpoint", "", "containerd CRI socket path")
	state := fs.String("state", "", "directory remembering pod ids")
	label := fs.String("label", "", "sample label")
	podName := fs.String("pod", "", "pod name (also uid)")
	cgroupParent := fs.String("cgroup-parent", "", "absolute pod cgroup parent")
	logDir := fs.String("logdir", "", "pod log directory")
	image := fs.String("image", "", "container image")
	n := fs.Int("n", 25, "timed creates")
	out := fs.String("out", "", "samples file (appended)")
	mode := fs.String("mode", "create", "what is timed: create | create-start")
	_ = fs.Parse(args)
	if *mode != "create" && *mode != "create-start" {
		die("run: -mode %q: want create or create-start", *mode)
	}
	if *endpoint == "" || *state == "" || *label == "" || *podName == "" || *cgroupParent == "" || *image == "" || *out == "" {
		die("run: -endpoint, -state, -label, -pod, -cgroup-parent, -image and -out are required")
	}

	conn, err := grpc.NewClient("unix://"+*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		die("dial %s: %v", *endpoint, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx := context.Background()
	if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		die("CRI Version on %s: %v", *endpoint, err)
	}

	nsNode := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER}
	podCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: *podName, Uid: *podName, Namespace: "latency"},
		LogDirectory: *logDir,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    *cgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: nsNode},
		},
	}
	idFile := filepath.Join(*state, *podName+".id")
	podID := ""
	if b, err := os.ReadFile(idFile); err == nil {
		podID = strings.TrimSpace(string(b))
	} else {
		r, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
		if err != nil {
			die("RunPodSandbox %s: %v", *podName, err)
		}
		podID = r.PodSandboxId
		if err := os.WriteFile(idFile, []byte(podID), 0o644); err != nil {
			die("write %s: %v", idFile, err)
		}
	}

	f, err := os.OpenFile(*out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		die("open %s: %v", *out, err)
	}
	defer f.Close()
	// BestEffort-shaped resources, as the kubelet sends them.
	res := &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000}
	for i := 0; i <= *n; i++ {
		name := fmt.Sprintf("c%d", time.Now().UnixNano())
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			// The name as the user wrote it, as the kubelet sends it: CRI-O refuses a create
			// without it ("user specified image not specified, cannot verify image signature").
			Image:   &runtimeapi.ImageSpec{Image: *image, UserSpecifiedImage: *image},
			Command: []string{"/bin/sleep", "3600"},
			LogPath: name + ".log",
			Linux: &runtimeapi.LinuxContainerConfig{
				Resources:       res,
				SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: nsNode},
			},
		}
		t0 := time.Now()
		r, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			die("CreateContainer in %s: %v", *podName, err)
		}
		if *mode == "create-start" {
			if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: r.ContainerId}); err != nil {
				die("StartContainer %s in %s: %v", r.ContainerId, *podName, err)
			}
		}
		d := time.Since(t0)
		if *mode == "create-start" {
			if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: r.ContainerId, Timeout: 0}); err != nil {
				die("StopContainer %s: %v", r.ContainerId, err)
			}
		}
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: r.ContainerId}); err != nil {
			die("RemoveContainer %s: %v", r.ContainerId, err)
		}
		if i == 0 {
			continue // warm-up
		}
		fmt.Fprintf(f, "%s %d\n", *label, d.Microseconds())
	}
}

// load reads "<label> <µs>" lines; returns samples in ms per label and labels in first-seen order.
// A malformed line is an error naming the file and line.
func load(path string) (map[string][]float64, []string) {
	f, err := os.Open(path)
	if err != nil {
		die("open %s: %v", path, err)
	}
	defer f.Close()
	samples := map[string][]float64{}
	var order []string
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			die("%s:%d: want \"<label> <µs>\", got %q", path, line, sc.Text())
		}
		us, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			die("%s:%d: %v", path, line, err)
		}
		if _, ok := samples[fields[0]]; !ok {
			order = append(order, fields[0])
		}
		samples[fields[0]] = append(samples[fields[0]], us/1000)
	}
	if err := sc.Err(); err != nil {
		die("read %s: %v", path, err)
	}
	if len(order) == 0 {
		die("%s: no samples", path)
	}
	for _, l := range order {
		sort.Float64s(samples[l])
	}
	return samples, order
}

// q is the nearest-rank quantile of sorted s.
func q(s []float64, p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }

type summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P99    float64 `json:"p99"`
	P10    float64 `json:"p10"`
	P90    float64 `json:"p90"`
	Mean   float64 `json:"mean"`
}

func summarize(s []float64) summary {
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return summary{N: len(s), Median: q(s, 0.5), P99: q(s, 0.99), P10: q(s, 0.1), P90: q(s, 0.9), Mean: sum / float64(len(s))}
}

type overhead struct {
	MedianDiff float64 `json:"median_diff"`
	Lo         float64 `json:"ci95_lo"`
	Hi         float64 `json:"ci95_hi"`
}

// overheadOf: median(s) - median(base) with a 95% bootstrap interval (2000 resamples, fixed seed).
func overheadOf(s, base []float64) overhead {
	median := func(s []float64) float64 {
		c := append([]float64(nil), s...)
		sort.Float64s(c)
		return q(c, 0.5)
	}
	resample := func(r *rand.Rand, s []float64) []float64 {
		c := make([]float64, len(s))
		for i := range c {
			c[i] = s[r.IntN(len(s))]
		}
		return c
	}
	r := rand.New(rand.NewPCG(1, 2))
	diffs := make([]float64, 2000)
	for i := range diffs {
		diffs[i] = median(resample(r, s)) - median(resample(r, base))
	}
	sort.Float64s(diffs)
	return overhead{MedianDiff: median(s) - median(base), Lo: q(diffs, 0.025), Hi: q(diffs, 0.975)}
}

func stats(path string) {
	samples, order := load(path)
	fmt.Printf("%-12s %5s %9s %9s %9s %9s %9s\n", "label", "n", "median", "p10", "p90", "p99", "mean")
	for _, l := range order {
		m := summarize(samples[l])
		fmt.Printf("%-12s %5d %7.2fms %7.2fms %7.2fms %7.2fms %7.2fms\n", l, m.N, m.Median, m.P10, m.P90, m.P99, m.Mean)
	}
	for _, l := range order[1:] {
		o := overheadOf(samples[l], samples[order[0]])
		fmt.Printf("median(%s) - median(%s) = %+.2fms  (95%% bootstrap interval %+.2f .. %+.2fms)\n",
			l, order[0], o.MedianDiff, o.Lo, o.Hi)
	}
}

func statsJSON(path string) {
	samples, order := load(path)
	out := struct {
		Baseline   string              `json:"baseline"`
		Conditions map[string]summary  `json:"conditions"`
		Overhead   map[string]overhead `json:"overhead"`
	}{order[0], map[string]summary{}, map[string]overhead{}}
	for _, l := range order {
		out.Conditions[l] = summarize(samples[l])
	}
	for _, l := range order[1:] {
		out.Overhead[l] = overheadOf(samples[l], samples[order[0]])
	}
	b, err := json.Marshal(out)
	if err != nil {
		die("json: %v", err)
	}
	fmt.Println(string(b))
}
