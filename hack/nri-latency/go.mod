module topolet.invalid/hack/nri-latency

go 1.25.0

// The versions containerd v2.2.7 builds with, so hack/install-deps.sh has already put every
// module in the private module cache (.deps/go) and this builds offline.
require (
	golang.org/x/net v0.55.0
	golang.org/x/sys v0.46.0
	golang.org/x/text v0.38.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251029180050-ab9386a59fda
	google.golang.org/grpc v1.78.0
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af
	k8s.io/cri-api v0.34.10
)
