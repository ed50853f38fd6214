// Command local is the operator with no cluster at hand: it builds (once)
// and starts a local control plane, applies the CRD, runs kubectl proxy and
// the operator against it, and, as root, a real node (containerd, kubelet,
// kube-proxy, kube-scheduler, CoreDNS) that runs the member Pods from
// locally built images, so kubectl logs and exec work and members reach
// each other by Service name, and provisions PersistentVolumeClaims of the
// default StorageClass, local-path (local-path-provisioner). It applies examples/etcd-cluster.yaml,
// shows what was created, and keeps running until Ctrl-C, then stops
// everything it started. With -operator=false it stops short of running the
// operator and applying the example, for those who want to run "go run ."
// against its kubectl proxy themselves.
//
//	go run -C e2e ./cmd/local
//
// The idea: trying an operator should need nothing but Go. The control
// plane, node, operator starter (StartOperator) and example are the e2e
// tests' own, so what you try here is what the tests check.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"etcd-operator/e2e"
)

func main() {
	nodeFlag := flag.Bool("node", true, "run a real node for the Pods (needs root; installs containerd, runc and the CNI plugins from Debian's packages when missing)")
	proxyPort := flag.Int("proxy-port", 8001, "port for kubectl proxy (the operator's default -master); another free port if taken")
	operatorFlag := flag.Bool("operator", true, "run the operator and apply the example; false leaves both to you (go run . in the repository)")
	flag.Parse()
	if err := run(*nodeFlag, *operatorFlag, *proxyPort); err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}

func run(withNode, withOperator bool, proxyPort int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Output piped to a program that Ctrl-C also ends must not kill us
	// halfway through stopping everything.
	signal.Ignore(syscall.SIGPIPE)
	say := func(format string, args ...any) { fmt.Printf("local: "+format+"\n", args...) }

	say("starting etcd, kube-apiserver, kube-controller-manager and kubectl proxy; applying examples/crd.yaml")
	cp, err := e2e.Up(os.Stdout, "etcd-operator-local-", proxyPort)
	if err != nil {
		return err
	}
	defer func() {
		say("stopping everything")
		cp.Stop()
		os.RemoveAll(cp.Dir)
	}()
	root, err := e2e.RepoRoot()
	if err != nil {
		return err
	}
	example := func(name string) string { return filepath.Join(root, "examples", name) }

	if withNode && os.Geteuid() != 0 {
		say("not root: no node, so the Pods will stay Pending (the operator's part works the same)")
		withNode = false
	}
	var node *e2e.Node
	if withNode {
		say("starting the node: containerd, kubelet, kube-proxy, kube-scheduler, CoreDNS on %s; local-path-provisioner", e2e.NodeIP)
		if node, err = cp.StartNode(); err != nil {
			return err
		}
		// The default namespace's Pods run on the node.
		if err := cp.CreateNodeNamespace("default"); err != nil {
			return err
		}
	}

	if withOperator {
		if err := startExample(cp, node != nil, example("etcd-cluster.yaml"), say); err != nil {
			return err
		}
	}
	out, _ := cp.Kubectl("", "get", "etcdclusters,services,pods", "-o", "wide")
	fmt.Println()
	fmt.Println(out)
	fmt.Printf(`Try (any recent kubectl; this one matches the API server: %s):

  export KUBECONFIG=%s
  kubectl get etcdclusters
  kubectl describe etcdcluster example
  kubectl get pods,services -l etcd.coreos.com/cluster=example
  kubectl apply -f - <<< '{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","metadata":{"name":"five"},"spec":{"size":5}}'
  kubectl delete etcdcluster example     # the garbage collector removes its Pods and Services

`, cp.Bin.Kubectl, cp.Kubeconfig)
	if withOperator {
		fmt.Printf("\nkubectl proxy is at %s. The operator already runs here; to run your own\n(\"go run .\" in the repository), start this command with -operator=false.\n", cp.ProxyURL)
	} else {
		fmt.Printf(`
No operator runs yet. kubectl proxy is at %s, the operator's default -master:
in the repository, run it and apply the example:

  go run .
  kubectl apply -f examples/etcd-cluster.yaml
`, cp.ProxyURL)
	}
	if node != nil && withOperator {
		fmt.Printf(`The members run on a real node, in containers of the image
gcr.io/etcd-development/etcd:%s (built here), reachable from this machine by
Pod IP and by ClusterIP:

  kubectl logs example-0
  kubectl exec example-0 -- /usr/local/bin/etcd --version
  curl -s http://%s:2379/health                        # example-0's Pod IP
  curl -s -X POST http://%s:2379/v3/cluster/member/list  # the example-client Service
`, e2e.EtcdVersion, cp.PodIP("default", "example-0"), serviceIP(cp, "example-client"))
	}
	if node != nil {
		fmt.Printf(`
PersistentVolumeClaims of the default StorageClass, %s, are provisioned
by local-path-provisioner when their first Pod is scheduled, in
directories under %s (removed with everything else on Ctrl-C):

  kubectl get storageclass
  kubectl get pv,pvc
`, e2e.StorageClassName, e2e.VolumesDir())
	}
	fmt.Println("\nCtrl-C stops everything.")
	<-ctx.Done()
	fmt.Println()
	return nil
}

// prefixWriter writes each line it gets to stdout after a prefix.
type prefixWriter string

func (p prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Print(string(p) + line)
		}
	}
	return len(b), nil
}

// startExample builds and runs the operator against kubectl proxy, applies
// examples/etcd-cluster.yaml and waits for it (and, with the node, for its
// members to run).
func startExample(cp *e2e.ControlPlane, withNode bool, exampleFile string, say func(string, ...any)) error {
	say("building the operator (CGO_ENABLED=0 go build) and running it: etcd-operator -master=%s", cp.ProxyURL)
	if _, err := cp.StartOperator(e2e.OperatorOptions{Output: prefixWriter("operator | ")}); err != nil {
		return err
	}
	say("kubectl apply -f examples/etcd-cluster.yaml")
	if _, err := cp.Kubectl("", "apply", "-f", exampleFile); err != nil {
		return err
	}
	if !withNode {
		_, err := cp.WaitCreated("default", "example", 60*time.Second)
		return err
	}
	say("kubectl wait --for=condition=Available etcdcluster/example")
	if _, err := cp.Kubectl("", "wait", "--for=condition=Available", "etcdcluster/example", "--timeout=3m"); err != nil {
		return err
	}
	return e2e.Eventually(90*time.Second, "the members to be ready", func() (bool, error) {
		out, err := cp.Kubectl("", "get", "pods", "-l", "etcd.coreos.com/cluster=example", "-o", "jsonpath={.items[*].status.containerStatuses[*].ready}")
		return out == "true true true", err
	})
}

func serviceIP(cp *e2e.ControlPlane, name string) string {
	out, _ := cp.Kubectl("", "get", "service", name, "-o", "jsonpath={.spec.clusterIP}")
	return out
}
