// Command go-baseline is the benchmark's reference NRI plugin: a minimal plugin on containerd's own
// github.com/containerd/nri/pkg/stub that subscribes to CreateContainer only and answers every
// container with a fixed adjustment equivalent to what topolet returns for a pinned container
// (cpuset "1", mems "0", cpu shares, quota -1, oom_score_adj 0, pids limit 1024). It keeps no state
// and does no topology work, so it measures the Go stub's own per-request cost.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct{}

func (plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	shares := uint64(1024)
	if r := c.GetLinux().GetResources().GetCpu(); r != nil && r.GetShares() != nil {
		shares = r.GetShares().GetValue()
	}
	adj.SetLinuxCPUShares(shares)
	adj.SetLinuxCPUQuota(-1)
	adj.SetLinuxCPUSetCPUs("1")
	adj.SetLinuxCPUSetMems("0")
	oom := 0
	adj.SetLinuxOomScoreAdj(&oom)
	adj.SetLinuxPidLimits(1024)
	return adj, nil, nil
}

func main() {
	socket := flag.String("socket", "/var/run/nri/nri.sock", "NRI socket to connect to")
	idx := flag.String("idx", "60", "plugin index")
	name := flag.String("name", "go-baseline", "plugin name")
	flag.Parse()

	s, err := stub.New(plugin{},
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
