module topolet.invalid/hack/bench/go-baseline

go 1.24.0

// nri v0.11.0 speaks the same wire as the fake runtime of hack/bench.sh (NRI v0.11: StateChange for
// the lifecycle events; containerd 2.2 bundled it). hack/bench.sh builds with -mod=readonly against
// the shared module cache ($TOPOLET_CACHE/go), fetching from the Go proxy only what is not cached yet.
require github.com/containerd/nri v0.11.0

require (
	github.com/containerd/log v0.1.0 // indirect
	github.com/containerd/ttrpc v1.2.7 // indirect
	github.com/golang/protobuf v1.5.3 // indirect
	github.com/knqyf263/go-plugin v0.9.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/tetratelabs/wazero v1.10.1 // indirect
	golang.org/x/sys v0.31.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20230731190214-cbb8c96f2d6d // indirect
	google.golang.org/grpc v1.57.1 // indirect
	google.golang.org/protobuf v1.34.1 // indirect
)
