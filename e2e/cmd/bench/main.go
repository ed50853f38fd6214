// Command bench measures the operator on a real control plane, against
// loaders that send the same objects, and as root the day-2 operations on
// a real node against etcd's own timings. It prints its results as
// markdown tables, which e2e/README.md's Performance section pastes as
// they are, and exits 1 when a target is missed:
//
//	go run -C e2e ./cmd/bench
//
// The idea: a performance claim is only as good as its anchor, so every
// time is printed beside what the same requests, sent by a plain loader,
// cost on the same control plane.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"etcd-operator/e2e"
)

func main() {
	o := e2e.BenchOptions{Out: os.Stdout}
	flag.IntVar(&o.Rounds, "rounds", 3, "rounds of operator against loaders, alternating which goes first (medians are reported)")
	flag.IntVar(&o.Clusters, "clusters", 200, "clusters of size 3 applied at once")
	flag.IntVar(&o.Singles, "singles", 9, "one-cluster runs (the median is reported)")
	flag.IntVar(&o.RSSClusters, "rss-clusters", 2000, "watched clusters for the memory comparison against 10")
	flag.DurationVar(&o.Window, "window", time.Minute, "how long the restart and steady-state windows last")
	flag.BoolVar(&o.Day2, "day2", os.Geteuid() == 0, "measure day-2 operations on a real node (needs root)")
	opFlags := flag.String("operator-flags", "", "extra operator flags, space-separated (e.g. \"-workers=8\")")
	flag.Parse()
	o.OperatorFlags = strings.Fields(*opFlags)
	missed, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if len(missed) > 0 {
		fmt.Fprintf(os.Stderr, "bench: %d targets missed:\n  %s\n", len(missed), strings.Join(missed, "\n  "))
		os.Exit(1)
	}
}

func run(o e2e.BenchOptions) ([]string, error) {
	cp, err := e2e.Up(os.Stdout, "etcd-operator-bench-", 0)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(cp.Dir)
	defer cp.Stop()
	if o.Day2 {
		if _, err := cp.StartNode(); err != nil {
			return nil, err
		}
	}
	r, err := e2e.RunBenchmark(cp, o)
	if err != nil {
		cp.DumpLogs(os.Stdout, 30)
		return nil, err
	}
	fmt.Printf("\nKubernetes %s, etcd %s, %s, %d cores, through kubectl proxy; operator flags: defaults %s\n\n", e2e.KubernetesVersion, e2e.EtcdVersion, runtime.Version(), runtime.NumCPU(), strings.Join(o.OperatorFlags, " "))
	r.Table(os.Stdout)
	return r.Missed(), nil
}
