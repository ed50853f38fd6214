// Command kube-proxy is the upstream Service proxy, unchanged.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() { os.Exit(cli.Run(app.NewProxyCommand())) }
