// hack/podresources-client: a PodResources consumer for topolet's tests, built on the kubelet's
// own client of the v1.37.2 modules (k8s.io/kubelet pkg/apis/podresources/v1,
// NewPodResourcesListerClient), as node-feature-discovery's topology updater and GPU exporters
// read a node's PodResources socket. It dials -socket (the kubelet's, or topolet's re-export),
// makes one call and prints the answer as JSON (protojson, the proto field names) on stdout; a
// failed call prints its gRPC code and message on stderr and exits 1.
//
// Usage: podresources-client -socket PATH list
//        podresources-client -socket PATH get NAMESPACE NAME
//        podresources-client -socket PATH allocatable
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func main() {
	socket := flag.String("socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the PodResources socket")
	timeout := flag.Duration("timeout", 10*time.Second, "the bound on the call")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: podresources-client -socket PATH list | get NAMESPACE NAME | allocatable")
		os.Exit(2)
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "dialling %s: %v\n", *socket, err)
		os.Exit(1)
	}
	defer conn.Close()
	client := podresourcesapi.NewPodResourcesListerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var answer proto.Message
	switch {
	case args[0] == "list" && len(args) == 1:
		answer, err = client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	case args[0] == "get" && len(args) == 3:
		answer, err = client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodNamespace: args[1], PodName: args[2]})
	case args[0] == "allocatable" && len(args) == 1:
		answer, err = client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	default:
		fmt.Fprintf(os.Stderr, "unknown call %q\n", args)
		os.Exit(2)
	}
	if err != nil {
		s, _ := status.FromError(err)
		fmt.Fprintf(os.Stderr, "%s: %s\n", s.Code(), s.Message())
		os.Exit(1)
	}
	out, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(answer)
	if err != nil {
		fmt.Fprintf(os.Stderr, "encoding the answer: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
