// Command bench measures the operator on a real control plane, against a
// loader that POSTs the same objects, and prints a table (see the README's
// Performance section):
//
//	go run -C e2e ./cmd/bench
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"etcd-operator/e2e"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds of operator against loader (medians are reported)")
	clusters := flag.Int("clusters", 200, "clusters of size 3 applied at once")
	singles := flag.Int("singles", 9, "one-cluster runs (the median is reported)")
	many := flag.Int("rss-clusters", 2000, "watched clusters for the memory comparison against 10")
	opFlags := flag.String("operator-flags", "", "extra operator flags, space-separated (e.g. \"-workers=8\")")
	flag.Parse()
	if err := run(*rounds, *clusters, *singles, *many, strings.Fields(*opFlags)); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(rounds, clusters, singles, many int, opFlags []string) error {
	cp, err := e2e.Up(os.Stdout, "etcd-operator-bench-", 0)
	if err != nil {
		return err
	}
	defer os.RemoveAll(cp.Dir)
	defer cp.Stop()
	op, err := e2e.BuildOperator(cp.Dir)
	if err != nil {
		return err
	}
	r, err := e2e.RunBenchmark(cp, e2e.BenchOptions{Rounds: rounds, Clusters: clusters, Singles: singles, RSSClusters: many, OperatorBin: op, OperatorFlags: opFlags, Out: os.Stdout})
	if err != nil {
		cp.DumpLogs(os.Stdout, 30)
		return err
	}
	fmt.Printf("\nKubernetes %s, etcd %s, %s, %d cores, through kubectl proxy; operator flags: defaults %s\n\n", e2e.KubernetesVersion, e2e.EtcdVersion, runtime.Version(), runtime.NumCPU(), strings.Join(opFlags, " "))
	r.Table(os.Stdout)
	return nil
}
