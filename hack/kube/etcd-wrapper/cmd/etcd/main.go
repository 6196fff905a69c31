// Command etcd runs go.etcd.io/etcd/server/v3's etcdmain, built from topolet's wrapper module
// (see hack/kube/gen-wrapper.sh for why a wrapper is needed).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
