// Command kube-scheduler runs k8s.io/kubernetes' own kube-scheduler command, built from topolet's wrapper module
// (see hack/kube/gen-wrapper.sh for why a wrapper is needed).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() { os.Exit(cli.Run(app.NewSchedulerCommand())) }
