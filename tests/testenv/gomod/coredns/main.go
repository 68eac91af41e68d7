// CoreDNS for the test node and the kind node image, with only the plugins their Corefiles use
// (tests/testenv/dns.py, and kubeadm's default Corefile): the full plugin set would pull in every cloud SDK.
// This is the upstream coredns.go with a shorter plugin list, the documented
// way to compile CoreDNS with a chosen set of plugins.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The order in which the plugins handle a query (upstream's plugin.cfg order).
var directives = []string{
	"reload", "bind", "log", "health", "ready", "prometheus", "errors", "loadbalance", "cache", "kubernetes", "loop",
	"forward",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
