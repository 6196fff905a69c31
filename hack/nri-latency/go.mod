module topolet.invalid/hack/nri-latency

go 1.26.0

// The versions containerd v2.4.2 (the default line) builds with, so hack/install-deps.sh has already
// put every module in the shared module cache ($TOPOLET_CACHE/go) and this builds offline.
require (
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260825221802-da73d73af1c5 // indirect
	google.golang.org/grpc v1.83.2
	google.golang.org/protobuf v1.36.12 // indirect
	k8s.io/cri-api v0.37.0
)
