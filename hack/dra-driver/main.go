// hack/dra-driver: a small DRA driver for topolet's kubelet tests, built from the v1.37.2 modules
// on the upstream kubelet plugin library (k8s.io/dynamic-resource-allocation/kubeletplugin). It
// registers -driver (default topolet.test) with the kubelet whose plugin registry is
// -registry-dir, serves the DRA service from -plugin-dir, and publishes one ResourceSlice for
// -node: pool -node, -count devices (gpu-0, gpu-1, ...), each with the standard attribute
// resource.kubernetes.io/numaNode = -numa (or, with -numa -1, no NUMA attribute at all) and a
// model string. Preparing a claim returns its devices without CDI devices: the devices are
// fictitious (no device node, no CDI spec), their place in the kubelet's PodResources answer and
// their attributes are the only things under test.
//
// Usage: dra-driver -kubeconfig FILE -node NAME -registry-dir DIR/kubelet/plugins_registry
//                   -plugin-dir DIR/kubelet/plugins/topolet.test [-driver NAME] [-count N] [-numa ID]
// It runs until killed (SIGTERM/SIGINT: its ResourceSlice is left to the test to delete).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

type driver struct {
	name string
}

// PrepareResourceClaims gives each claim the devices the scheduler allocated to it from this
// driver, without CDI devices.
func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		var r kubeletplugin.PrepareResult
		if c.Status.Allocation == nil {
			r.Err = fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
			out[c.UID] = r
			continue
		}
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver != d.name {
				continue
			}
			r.Devices = append(r.Devices, kubeletplugin.Device{
				Requests:   []string{res.Request},
				PoolName:   res.Pool,
				DeviceName: res.Device,
			})
		}
		log.Printf("prepared claim %s/%s: %d device(s)", c.Namespace, c.Name, len(r.Devices))
		out[c.UID] = r
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		log.Printf("unprepared claim %s", c.NamespacedName)
		out[c.UID] = nil
	}
	return out, nil
}

func (d *driver) HandleError(_ context.Context, err error, msg string) {
	log.Printf("%s: %v", msg, err)
}

func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a user that may write ResourceSlices and read ResourceClaims")
	node := flag.String("node", "", "the node's name")
	name := flag.String("driver", "topolet.test", "the driver's name")
	registry := flag.String("registry-dir", "", "the kubelet's plugin registry directory (<root-dir>/plugins_registry)")
	pluginDir := flag.String("plugin-dir", "", "where the DRA service's socket goes (<root-dir>/plugins/<driver>)")
	count := flag.Int("count", 2, "devices to publish")
	numa := flag.Int64("numa", 0, "the NUMA node each device reports (-1: no NUMA attribute)")
	flag.Parse()
	if *kubeconfig == "" || *node == "" || *registry == "" || *pluginDir == "" {
		log.Fatal("usage: dra-driver -kubeconfig FILE -node NAME -registry-dir DIR -plugin-dir DIR [-driver NAME] [-count N] [-numa ID]")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig %s: %v", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatalf("client: %v", err)
	}
	if err := os.MkdirAll(*pluginDir, 0o750); err != nil {
		log.Fatalf("%s: %v", *pluginDir, err)
	}
	if err := os.MkdirAll(*registry, 0o750); err != nil {
		log.Fatalf("%s: %v", *registry, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	helper, err := kubeletplugin.Start(ctx, &driver{name: *name},
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*node),
		kubeletplugin.DriverName(*name),
		kubeletplugin.RegistrarDirectoryPath(*registry),
		kubeletplugin.PluginDataDirectoryPath(*pluginDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		log.Fatalf("starting the kubelet plugin: %v", err)
	}
	model := "topolet-test-gpu"
	var devices []resourceapi.Device
	for i := 0; i < *count; i++ {
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model": {StringValue: &model},
		}
		if *numa >= 0 {
			n := *numa
			attrs["resource.kubernetes.io/numaNode"] = resourceapi.DeviceAttribute{IntValue: &n}
		}
		devices = append(devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i), Attributes: attrs})
	}
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		*node: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		log.Fatalf("publishing the ResourceSlice: %v", err)
	}
	log.Printf("driver %s serving on node %s: %d device(s), numa %d", *name, *node, *count, *numa)
	<-ctx.Done()
	helper.Stop()
}
