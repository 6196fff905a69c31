// Command kube-controller-manager runs k8s.io/kubernetes' own kube-controller-manager command, built
// from topolet's wrapper module (see hack/kube/gen-wrapper.sh for why a wrapper is needed). Only the
// Helm suite's node runs it (hack/kube-node.sh, KUBE_CONTROLLERS): DaemonSets and ServiceAccounts.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() { os.Exit(cli.Run(app.NewControllerManagerCommand())) }
