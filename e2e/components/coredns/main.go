// Command coredns is CoreDNS with the plugins the test cluster's DNS uses:
// the kubernetes plugin answers Service and Pod names, nothing is forwarded
// (the tests reach no resolver outside the machine). Importing only these
// plugins, not CoreDNS's whole set, keeps the build short.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	_ = dnsserver.Directives
	coremain.Run()
}
