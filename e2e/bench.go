package e2e

// The benchmark measures the operator on a real control plane against
// loaders that send the same objects, and, on the real node, the day-2
// operations against what etcd itself needs. RunBenchmark runs the phases
// in order; each phase is one function:
//
//	burst    many clusters at once: operator and loaders in alternating order (bench_phases.go)
//	single   one cluster at a time (bench_phases.go)
//	restart  a restart over every cluster created so far, then steady state (bench_phases.go)
//	memory   RSS idle, and with 10 against many watched clusters (bench_memory.go)
//	day2     apply, failover, resize, upgrade, steady state; needs the node (bench_day2.go)
//
// The control-plane phases (burst, single, restart, memory) make clusters
// on emptyDir: no node runs their Pods, and what they measure is the
// operator's requests for the 7 objects of a cluster. Day 2 on the node
// runs on volumes, as users do.
//
// This file is the harness they share: the options, the operator started
// through the counting proxy (bench_counter.go), the wait for a quiet
// control plane, and the stopwatch. The loaders are in bench_loader.go, the
// report and its markdown tables in bench_report.go.
//
// Fairness: every side gets the same control plane with nothing else going
// on. The operator is stopped only once it has been idle for 2 s (its
// Events, posted at 10/s after a burst of 25, drained) and the
// controllers have made every Service's EndpointSlice; the loaders then run
// at the operator's concurrency (16) and at 8 and 1. The counting proxy is
// reset before each operator start, and the windows that claim "no
// writes" last as long as BenchOptions.Window (60 s in cmd/bench).

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// BenchOptions sizes a benchmark run.
type BenchOptions struct {
	Rounds        int           // operator and loaders alternate; medians are reported
	Clusters      int           // applied at once, size 3 each
	Singles       int           // one-cluster runs; the median is reported
	RSSClusters   int           // watched clusters for the memory comparison (against 10)
	Window        time.Duration // how long the restart and steady-state windows last
	Day2          bool          // run the day-2 phase on cp.Node()
	OperatorFlags []string      // extra flags for the operator
	Out           io.Writer     // progress lines
}

// workers is the operator's default concurrency, and the loaders'.
const workers = 16

// bench is one run: the control plane, the counting proxy in front of the
// operator, and the report being filled in.
type bench struct {
	cp    *ControlPlane
	o     BenchOptions
	proxy *counter
	r     *BenchReport
	names []string // of the burst's clusters
	// objects are the Pods and Services the operator made in the first
	// round: what the loaders send.
	objects []map[string]any
}

// RunBenchmark runs the phases in order and returns what they measured.
func RunBenchmark(cp *ControlPlane, o BenchOptions) (*BenchReport, error) {
	o.Rounds = max(o.Rounds, 1)
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	b := &bench{cp: cp, o: o, r: &BenchReport{Objects: o.Clusters * 7, Rounds: o.Rounds, Singles: o.Singles, RSSManyClusters: o.RSSClusters, Window: o.Window}}
	bin, err := cp.BuildOperator()
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(bin); err == nil {
		b.r.BinarySize = st.Size()
	}
	if b.proxy, err = newCounter(cp.ProxyURL); err != nil {
		return nil, err
	}
	defer b.proxy.srv.Close()
	defer b.stopOperator()
	for i := range o.Clusters {
		b.names = append(b.names, fmt.Sprintf("c%04d", i))
	}
	for _, phase := range []func() error{b.burst, b.single, b.restart, b.memory, b.day2} {
		if err := phase(); err != nil {
			return nil, err
		}
	}
	return b.r, nil
}

func (b *bench) say(format string, args ...any) {
	fmt.Fprintf(b.o.Out, "bench: "+format+"\n", args...)
}

// startOperator starts the operator for ns through the counting proxy,
// which it resets first.
func (b *bench) startOperator(ns string) (*Process, error) {
	b.stopOperator()
	b.proxy.reset()
	return b.cp.StartOperator(OperatorOptions{Name: benchOperator, Master: b.proxy.url, Namespace: ns, Flags: b.o.OperatorFlags})
}

func (b *bench) stopOperator() { b.cp.StopProcess(benchOperator, 10*time.Second) }

// benchOperator names the benchmark's operator process (and its log).
const benchOperator = "etcd-operator-bench"

// settle waits until the operator has been idle for 2 s (its Events
// drained) and the controllers have given each of ns's Services an
// EndpointSlice, so that the next side starts on a quiet control plane.
func (b *bench) settle(ns string, services int) error {
	if err := waitIdle(b.proxy, 5*time.Minute); err != nil {
		return err
	}
	return Eventually(2*time.Minute, fmt.Sprintf("%d EndpointSlices in %s", services, ns), func() (bool, error) {
		var l struct{ Items []any }
		err := b.cp.Get("/apis/discovery.k8s.io/v1/namespaces/"+ns+"/endpointslices", &l)
		return err == nil && len(l.Items) >= services, err
	})
}

// timeObjects runs start and returns how long it took until n new Pods and
// Services existed in ns, as two watches saw them.
func timeObjects(cp *ControlPlane, ns string, n int, start func() error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var seen atomic.Int64
	done := make(chan time.Time, 1)
	ready := make(chan error, 2)
	for _, res := range []string{"pods", "services"} {
		go func() {
			events, err := cp.Watch(ctx, "/api/v1/namespaces/"+ns+"/"+res)
			ready <- err
			if err != nil {
				return
			}
			for ev := range events {
				if ev.Type == "ADDED" && seen.Add(1) == int64(n) {
					done <- time.Now()
				}
			}
		}()
	}
	for range 2 {
		if err := <-ready; err != nil {
			return 0, err
		}
	}
	t0 := time.Now()
	if err := start(); err != nil {
		return 0, err
	}
	select {
	case t1 := <-done:
		return t1.Sub(t0), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("only %d of %d objects appeared in %s", seen.Load(), n, ns)
	}
}

// parallel runs f(0..n-1) on p goroutines and returns the first error.
func parallel(p, n int, f func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range p {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
