// Command local is the operator with no cluster at hand: it builds (once)
// and starts a local control plane, applies the CRD, runs kubectl proxy and
// the operator against it, and, as root, the e2e node agent, which runs the
// member Pods as real etcd processes. It applies examples/etcd-cluster.yaml,
// shows what was created, and keeps running until Ctrl-C, then stops
// everything it started. With -operator=false it stops short of running the
// operator and applying the example, for those who want to run "go run ."
// against its kubectl proxy themselves.
//
//	go run -C e2e ./cmd/local
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"etcd-operator/e2e"
)

func main() {
	agentFlag := flag.Bool("agent", true, "run the member Pods as etcd processes with the node agent (needs root and ip(8))")
	proxyPort := flag.Int("proxy-port", 8001, "port for kubectl proxy (the operator's default -master); another free port if taken")
	operatorFlag := flag.Bool("operator", true, "run the operator and apply the example; false leaves both to you (go run . in the repository)")
	flag.Parse()
	if err := run(*agentFlag, *operatorFlag, *proxyPort); err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}

func run(withAgent, withOperator bool, proxyPort int) error {
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

	if withAgent && os.Geteuid() != 0 {
		say("not root: no node agent, so the Pods will stay Pending (the operator's part works the same)")
		withAgent = false
	} else if _, err := exec.LookPath("ip"); withAgent && err != nil {
		say("no ip(8): no node agent, so the Pods will stay Pending (apt-get install iproute2)")
		withAgent = false
	}
	var agent *e2e.Agent
	if withAgent {
		if agent, err = e2e.StartAgent(cp, "default", "eopl", "10.213.8"); err != nil {
			return err
		}
		defer agent.Stop()
		say("node agent running the default namespace's Pods in network namespaces on 10.213.8.0/24")
	}

	if withOperator {
		if err := startExample(cp, agent, example("etcd-cluster.yaml"), say); err != nil {
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
	if agent != nil && withOperator {
		fmt.Printf(`The members are real etcd processes, reachable from this machine:

  curl -s http://%s:2379/health
  curl -s -X POST http://%s:2379/v3/cluster/member/list
`, agent.PodIP("example-0"), agent.PodIP("example-1"))
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
// examples/etcd-cluster.yaml and waits for it (and, with the agent, for its
// members to run).
func startExample(cp *e2e.ControlPlane, agent *e2e.Agent, exampleFile string, say func(string, ...any)) error {
	say("building the operator (CGO_ENABLED=0 go build) and running it: etcd-operator -master=%s", cp.ProxyURL)
	opBin, err := e2e.BuildOperator(cp.Dir)
	if err != nil {
		return err
	}
	cp.OperatorOutput = prefixWriter("operator | ")
	if _, err := cp.StartOperator(opBin); err != nil {
		return err
	}
	say("kubectl apply -f examples/etcd-cluster.yaml")
	if _, err := cp.Kubectl("", "apply", "-f", exampleFile); err != nil {
		return err
	}
	err = e2e.Eventually(60*time.Second, "example to be Created", func() (bool, error) {
		out, err := cp.Kubectl("", "get", "etcdcluster", "example", "-o", "jsonpath={.status.phase}")
		return out == "Created", err
	})
	if err != nil || agent == nil {
		return err
	}
	err = e2e.Eventually(60*time.Second, "the members to run", func() (bool, error) {
		return len(agent.Running()) == 3, nil
	})
	if err != nil {
		return fmt.Errorf("%w; agent: %v", err, agent.Errors())
	}
	return nil
}
