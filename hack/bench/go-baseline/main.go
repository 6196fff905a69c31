// Command go-baseline is the benchmark's reference NRI plugin: a minimal plugin on containerd's own
// github.com/containerd/nri/pkg/stub that subscribes to CreateContainer only and answers every
// container with a fixed adjustment equivalent to what topolet returns for a pinned container
// (cpuset, mems, cpu shares, quota -1, oom_score_adj, pids limit 1024). It keeps no state and does
// no topology work, so it measures the Go stub's own per-request cost.
//
// The cpuset, mems and oom_score_adj are flags (defaults "1", "0", 0: fine for the fake runtime);
// against a real runtime pass values valid on the host (hack/bench.sh passes the online CPUs and
// NUMA nodes and the kubelet's BestEffort oom_score_adj, since runc cannot lower it without
// CAP_SYS_RESOURCE).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	cpus, mems string
	oom        int
}

func (p plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	shares := uint64(1024)
	if r := c.GetLinux().GetResources().GetCpu(); r != nil && r.GetShares() != nil {
		shares = r.GetShares().GetValue()
	}
	adj.SetLinuxCPUShares(shares)
	adj.SetLinuxCPUQuota(-1)
	adj.SetLinuxCPUSetCPUs(p.cpus)
	adj.SetLinuxCPUSetMems(p.mems)
	oom := p.oom
	adj.SetLinuxOomScoreAdj(&oom)
	adj.SetLinuxPidLimits(1024)
	return adj, nil, nil
}

func main() {
	socket := flag.String("socket", "/var/run/nri/nri.sock", "NRI socket to connect to")
	idx := flag.String("idx", "60", "plugin index")
	name := flag.String("name", "go-baseline", "plugin name")
	cpus := flag.String("cpuset", "1", "cpuset.cpus to set on every container")
	mems := flag.String("mems", "0", "cpuset.mems to set on every container")
	oom := flag.Int("oom-score-adj", 0, "oom_score_adj to set on every container")
	flag.Parse()

	s, err := stub.New(plugin{cpus: *cpus, mems: *mems, oom: *oom},
		stub.WithSocketPath(*socket), stub.WithPluginIdx(*idx), stub.WithPluginName(*name),
		stub.WithOnClose(func() { os.Exit(0) }))
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-baseline: %v\n", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "go-baseline: %v\n", err)
		os.Exit(1)
	}
}
