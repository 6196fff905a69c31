// hack/device-plugin: a small Kubernetes device plugin for topolet's kubelet tests, built from
// the v1.37.2 modules (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1). It registers -resource
// (default topolet.test/gpu) with the kubelet at -kubelet-socket and advertises -count healthy
// devices (dev-0, dev-1, ...), each reporting NUMA node -numa in its topology, so that the
// kubelet's PodResources API answers them with that node. Allocate gives each device an
// environment variable (TOPOLET_TEST_DEVICE_<id>=1) and no device node: the devices are
// fictitious, their NUMA node is the only thing under test.
//
// Usage: device-plugin -kubelet-socket DIR/device-plugins/kubelet.sock [-resource NAME]
//                      [-count N] [-numa ID]
// It serves on DIR/device-plugins/topolet-test.sock, registers once serving, and runs until
// killed; it re-registers when the kubelet's socket is re-created (a kubelet restart).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		envs := map[string]string{}
		for _, id := range c.DevicesIds {
			envs["TOPOLET_TEST_DEVICE_"+strings.ReplaceAll(id, "-", "_")] = "1"
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: envs})
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func register(kubeletSocket, endpoint, resource string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
	})
	return err
}

func inode(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if s, ok := st.Sys().(interface{ Ino() uint64 }); ok {
		return s.Ino()
	}
	return uint64(st.ModTime().UnixNano())
}

func main() {
	kubeletSocket := flag.String("kubelet-socket", pluginapi.KubeletSocket, "the kubelet's registration socket")
	resource := flag.String("resource", "topolet.test/gpu", "the extended resource name")
	count := flag.Int("count", 2, "devices to advertise")
	numa := flag.Int64("numa", 0, "the NUMA node every device reports")
	flag.Parse()

	p := &plugin{}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{
			ID:       fmt.Sprintf("dev-%d", i),
			Health:   pluginapi.Healthy,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: *numa}}},
		})
	}
	endpoint := "topolet-test.sock"
	sock := filepath.Join(filepath.Dir(*kubeletSocket), endpoint)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatalf("device-plugin: listen %s: %v", sock, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() {
		if err := srv.Serve(l); err != nil {
			log.Fatalf("device-plugin: serve: %v", err)
		}
	}()
	registered := uint64(0)
	for {
		if ino := inode(*kubeletSocket); ino != 0 && ino != registered {
			if err := register(*kubeletSocket, endpoint, *resource); err != nil {
				log.Printf("device-plugin: register with %s: %v (retrying)", *kubeletSocket, err)
			} else {
				log.Printf("device-plugin: registered %s (%d devices on NUMA node %d) with %s", *resource, *count, *numa, *kubeletSocket)
				registered = ino
			}
		}
		time.Sleep(time.Second)
	}
}
