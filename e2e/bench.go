package e2e

// The benchmark measures the operator on a real control plane against
// loaders that send the same objects, and, on the real node, the day-2
// operations against what etcd itself needs (bench_node.go). RunBenchmark
// runs the phases in order; each phase is one function below:
//
//	burst    many clusters at once: operator and loaders in alternating order
//	single   one cluster at a time
//	restart  a restart over every cluster created so far, then steady state
//	memory   RSS idle, and with 10 against many watched clusters
//	day2     apply, failover, resize, upgrade, steady state (needs the node)
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
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
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
	OperatorBin   string
	OperatorFlags []string  // extra flags for the operator
	Out           io.Writer // progress lines
}

// workers is the operator's default concurrency, and the loaders'.
const workers = 16

// BenchReport is what a run measured.
type BenchReport struct {
	Window time.Duration
	// The burst: Objects Pods and Services of Objects/7 clusters.
	Objects, Rounds int
	First           []string // which side went first, per round: operator, objects or requests (the loaders)
	// Medians over the rounds. Loader16 POSTs the operator's objects, 16
	// at a time; LoaderSame sends, per cluster and 16 clusters at a time,
	// what the operator sends: the EtcdCluster, two lists, the 7 objects
	// and a status write. Loader8 and Loader1 run once, after the rounds.
	Operator, Loader16, LoaderSame, Loader8, Loader1 time.Duration
	Ratios, SameRatios                               []float64 // per round, operator/loader
	BurstRequests                                    requestCount
	// One cluster: the operator against its 7 objects POSTed back to
	// back (SingleLoad) and against the same requests (SingleReads).
	Singles                         int
	Single, SingleLoad, SingleReads time.Duration
	// A restart over RestartClusters clusters that all exist, then a
	// window of steady state.
	RestartClusters int
	Restart         requestCount // in the first Window after the start
	RestartIdle     time.Duration
	Steady          requestCount // in the Window after that
	// Memory, after the restart and with 10 against RSSManyClusters.
	RSSIdle, RSS10, RSSMany int64 // bytes
	RSSManyClusters         int
	BinarySize              int64
	// Day-2, on the real node (nil without it).
	Day2         []Day2Result
	SteadyHealth *requestCount // a healthy 3-member cluster, one Window
}

// requestCount sorts what the operator sent through the counting proxy.
type requestCount struct {
	All, Lists, Watches, Reads, Writes, Events int
}

// collections are the resources the operator lists.
var collections = map[string]bool{"pods": true, "services": true, "etcdclusters": true}

func countRequests(reqs []string) requestCount {
	var c requestCount
	for _, q := range reqs {
		c.All++
		switch {
		case strings.HasPrefix(q, "GET ") && strings.Contains(q, "watch="):
			c.Watches++
		case strings.HasPrefix(q, "GET ") && collections[path.Base(strings.SplitN(q, "?", 2)[0])]:
			c.Lists++
			c.Reads++
		case strings.HasPrefix(q, "GET "):
			c.Reads++
		case strings.HasPrefix(q, "POST ") && strings.Contains(q, "/proxy/"):
			c.Reads++ // a question to an etcd member
		default:
			c.Writes++
			if strings.Contains(q, "/events?") {
				c.Events++
			}
		}
	}
	return c
}

func (c requestCount) String() string {
	return fmt.Sprintf("%d requests (%d reads, %d list pages, %d watches, %d writes, %d of them Events)", c.All, c.Reads, c.Lists, c.Watches, c.Writes, c.Events)
}

// counter is a reverse proxy between the operator and kubectl proxy that
// counts the requests going through it.
type counter struct {
	srv      *http.Server
	url      string
	mu       sync.Mutex
	requests []string // "METHOD path?query"
	last     time.Time
}

func newCounter(target string) (*counter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &counter{url: "http://" + l.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // watches stream
	// A watch cut when an operator stops is no news.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.requests = append(c.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		c.last = time.Now()
		c.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go c.srv.Serve(l)
	return c, nil
}

func (c *counter) reset() {
	c.mu.Lock()
	c.requests = nil
	c.mu.Unlock()
}

func (c *counter) snapshot() ([]string, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.requests), c.last
}

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
	if st, err := os.Stat(o.OperatorBin); err == nil {
		b.r.BinarySize = st.Size()
	}
	var err error
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
	return b.cp.StartProcess("etcd-operator-bench", nil, b.o.OperatorBin, append([]string{"-master=" + b.proxy.url, "-namespace=" + ns}, b.o.OperatorFlags...)...)
}

func (b *bench) stopOperator() { b.cp.StopProcess("etcd-operator-bench", 10*time.Second) }

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

// burst: Clusters clusters at once, in rounds. Each round runs the
// operator and the two 16-at-a-time loaders, each in a namespace of its
// own, each side first in turn. The loaders at 8 and 1 run once, after.
func (b *bench) burst() error {
	r := b.r
	var ops, l16s, sames []time.Duration
	for round := range r.Rounds {
		// Each side goes first in turn: the control plane holds more
		// objects for whoever comes later in a round.
		sides := []string{"operator", "objects", "requests"}
		for range round % len(sides) {
			sides = append(sides[1:], sides[0])
		}
		r.First = append(r.First, sides[0])
		for _, side := range sides {
			ns := fmt.Sprintf("%s%d", side, round)
			if err := b.cp.CreateNamespace(ns); err != nil {
				return err
			}
			var d time.Duration
			var err error
			switch side {
			case "operator":
				d, err = b.burstOperator(ns, round)
				ops = append(ops, d)
			case "objects":
				b.say("round %d/%d: loader, the operator's %d objects, %d at a time", round+1, r.Rounds, r.Objects, workers)
				d, err = b.loadBare(ns, workers)
				l16s = append(l16s, d)
			case "requests":
				b.say("round %d/%d: loader, the operator's requests for %d clusters, %d clusters at a time", round+1, r.Rounds, len(b.names), workers)
				d, err = b.loadSame(ns, workers)
				sames = append(sames, d)
			}
			if err != nil {
				return err
			}
			if side != "operator" {
				if err := b.settle(ns, len(b.names)*4); err != nil {
					return err
				}
			}
		}
		r.Ratios = append(r.Ratios, float64(ops[round])/float64(l16s[round]))
		r.SameRatios = append(r.SameRatios, float64(ops[round])/float64(sames[round]))
	}
	r.Operator, r.Loader16, r.LoaderSame = median(ops), median(l16s), median(sames)
	for _, p := range []struct {
		n int
		d *time.Duration
	}{{8, &r.Loader8}, {1, &r.Loader1}} {
		ns := fmt.Sprintf("loader-by-%d", p.n)
		if err := b.cp.CreateNamespace(ns); err != nil {
			return err
		}
		b.say("loader: the operator's %d objects, %d at a time", r.Objects, p.n)
		var err error
		if *p.d, err = b.loadBare(ns, p.n); err != nil {
			return err
		}
		if err := b.settle(ns, len(b.names)*4); err != nil {
			return err
		}
	}
	return nil
}

// burstOperator applies every cluster at once (16 POSTs at a time) to a
// freshly started operator, times its objects, then lets it settle and
// stops it.
func (b *bench) burstOperator(ns string, round int) (time.Duration, error) {
	if _, err := b.startOperator(ns); err != nil {
		return 0, err
	}
	if err := waitIdle(b.proxy, 30*time.Second); err != nil {
		return 0, err
	}
	b.proxy.reset()
	start := time.Now()
	b.say("round %d/%d: operator, %d clusters of 3 (%d objects) at once", round+1, b.r.Rounds, len(b.names), b.r.Objects)
	d, err := timeObjects(b.cp, ns, b.r.Objects, func() error {
		return parallel(workers, len(b.names), func(i int) error { return createCluster(b.cp, ns, b.names[i], 3) })
	})
	if err != nil {
		return 0, err
	}
	if err := b.settle(ns, len(b.names)*4); err != nil {
		return 0, err
	}
	reqs, last := b.proxy.snapshot()
	b.r.BurstRequests = countRequests(reqs)
	b.say("round %d/%d: operator: %s, idle %s after the first POST", round+1, b.r.Rounds, b.r.BurstRequests, last.Sub(start).Round(time.Millisecond))
	if b.objects == nil {
		if b.objects, err = objectsOf(b.cp, ns, ""); err != nil {
			return 0, err
		}
	}
	b.stopOperator()
	return d, nil
}

// loadBare POSTs the operator's objects into ns, p at a time, owned by
// EtcdClusters of the same names made beforehand (no operator watches ns).
func (b *bench) loadBare(ns string, p int) (time.Duration, error) {
	owners, err := ownersIn(b.cp, ns, b.names)
	if err != nil {
		return 0, err
	}
	reqs := retarget(b.objects, ns, owners)
	return timeObjects(b.cp, ns, len(reqs), func() error {
		return parallel(p, len(reqs), func(i int) error { return post(b.proxy.url, reqs[i]) })
	})
}

// loadSame sends, for each cluster, p clusters at a time, what the
// operator sends for a new one: the EtcdCluster (the harness's POST in
// the operator's case), a list of its Pods and of its Services, its 7
// objects, then a status write.
func (b *bench) loadSame(ns string, p int) (time.Duration, error) {
	byCluster := map[string][]map[string]any{}
	for _, o := range b.objects {
		c := o["metadata"].(map[string]any)["labels"].(map[string]any)["etcd.coreos.com/cluster"].(string)
		byCluster[c] = append(byCluster[c], o)
	}
	return timeObjects(b.cp, ns, b.r.Objects, func() error {
		return parallel(p, len(b.names), func(i int) error {
			return sameRequests(b.cp, b.proxy.url, ns, b.names[i], byCluster[b.names[i]], true)
		})
	})
}

// sameRequests sends what the operator sends for a new cluster named
// name; status adds its status write.
func sameRequests(cp *ControlPlane, base, ns, name string, objects []map[string]any, status bool) error {
	uid, err := createClusterUID(cp, ns, name, 3)
	if err != nil {
		return err
	}
	sel := "?labelSelector=etcd.coreos.com%2Fcluster%3D" + name
	for _, res := range []string{"pods", "services"} {
		if err := DoJSON(loaderClient, "GET", base+"/api/v1/namespaces/"+ns+"/"+res+sel, nil, 200, nil); err != nil {
			return err
		}
	}
	for _, req := range retarget(objects, ns, map[string]string{name: uid}) {
		if err := post(base, req); err != nil {
			return err
		}
	}
	if !status {
		return nil
	}
	return DoJSON(loaderClient, "PATCH", base+"/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/"+name+"/status", []byte(createdStatus(name)), 200, nil)
}

// single: one cluster at a time, Singles times, against its objects POSTed
// back to back and against the same requests as the operator's; which
// goes first alternates.
func (b *bench) single() error {
	r := b.r
	for _, ns := range []string{"single", "single-load", "single-reads"} {
		if err := b.cp.CreateNamespace(ns); err != nil {
			return err
		}
	}
	if _, err := b.startOperator("single"); err != nil {
		return err
	}
	if err := waitIdle(b.proxy, 30*time.Second); err != nil {
		return err
	}
	b.say("one cluster, %d times each", b.o.Singles)
	var ops, loads, reads []time.Duration
	for i := range b.o.Singles {
		name := fmt.Sprintf("single%02d", i)
		objs := objectsOfCluster(b.objects, b.names[0], name)
		runs := []func() error{
			func() error {
				d, err := timeObjects(b.cp, "single", 7, func() error { return createCluster(b.cp, "single", name, 3) })
				ops = append(ops, d)
				if err == nil {
					err = waitIdle(b.proxy, time.Minute)
				}
				return err
			},
			func() error {
				owners, err := ownersIn(b.cp, "single-load", []string{name})
				if err != nil {
					return err
				}
				reqs := retarget(objs, "single-load", owners)
				d, err := timeObjects(b.cp, "single-load", 7, func() error {
					for _, req := range reqs {
						if err := post(b.proxy.url, req); err != nil {
							return err
						}
					}
					return nil
				})
				loads = append(loads, d)
				return err
			},
			func() error {
				d, err := timeObjects(b.cp, "single-reads", 7, func() error {
					return sameRequests(b.cp, b.proxy.url, "single-reads", name, objs, false)
				})
				reads = append(reads, d)
				return err
			},
		}
		if i%2 == 1 {
			slices.Reverse(runs)
		}
		for _, run := range runs {
			if err := run(); err != nil {
				return err
			}
		}
	}
	r.Single, r.SingleLoad, r.SingleReads = median(ops), median(loads), median(reads)
	b.stopOperator()
	return nil
}

// restart starts the operator over every cluster of the burst's first
// round (all created, their Pods unscheduled), counts what it sends in one window, then
// what it sends in the next (steady state: nothing to do).
func (b *bench) restart() error {
	r := b.r
	ns := "operator0"
	if err := waitAllCreated(b.cp, ns, len(b.names)); err != nil {
		return err
	}
	r.RestartClusters = len(b.names)
	b.say("restart with %d clusters, then steady state: %s each", r.RestartClusters, r.Window)
	start := time.Now()
	op, err := b.startOperator(ns)
	if err != nil {
		return err
	}
	if err := waitIdle(b.proxy, r.Window); err != nil {
		return err
	}
	<-time.After(time.Until(start.Add(r.Window))) // the window is the measurement

	reqs, last := b.proxy.snapshot()
	r.Restart, r.RestartIdle = countRequests(reqs), last.Sub(start)
	if r.RSSIdle, err = rss(op.Pid()); err != nil {
		return err
	}
	b.proxy.reset()
	<-time.After(r.Window)
	reqs, _ = b.proxy.snapshot()
	r.Steady = countRequests(reqs)
	b.stopOperator()
	return nil
}

// memory: the operator's RSS once idle, watching 10 clusters and watching
// RSSClusters, all already created (their Pods, which no node runs, too).
func (b *bench) memory() error {
	r := b.r
	for _, m := range []struct {
		ns  string
		n   int
		rss *int64
	}{{"rss-few", 10, &r.RSS10}, {"rss-many", r.RSSManyClusters, &r.RSSMany}} {
		b.say("memory: %d watched clusters", m.n)
		if err := b.cp.CreateNamespace(m.ns); err != nil {
			return err
		}
		if err := parallel(workers, m.n, func(i int) error { return createCreatedCluster(b.cp, m.ns, fmt.Sprintf("m%05d", i)) }); err != nil {
			return err
		}
		op, err := b.startOperator(m.ns)
		if err != nil {
			return err
		}
		if err := waitIdle(b.proxy, 2*time.Minute); err != nil {
			return err
		}
		if *m.rss, err = rss(op.Pid()); err != nil {
			return err
		}
		if reqs, _ := b.proxy.snapshot(); countRequests(reqs).Writes > 0 {
			return fmt.Errorf("the operator wrote while watching %d created clusters: %v", m.n, reqs)
		}
	}
	b.stopOperator()
	return nil
}

// Target is one checked line of the report.
type Target struct {
	What, Got, Want string
	Met             bool
}

// Targets are the report's promises, checked.
func (r *BenchReport) Targets() []Target {
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	perMin := func(c requestCount) float64 { return float64(c.All) / r.Window.Minutes() }
	t := []Target{
		{"burst against the same requests at 16", fmt.Sprintf("%.2f×", float64(r.Operator)/float64(r.LoaderSame)), "≤ 1.25×", float64(r.Operator) <= 1.25*float64(r.LoaderSame)},
		{"one cluster against the same requests", fmt.Sprintf("%.2f×", float64(r.Single)/float64(r.SingleReads)), "≤ 1.5×", float64(r.Single) <= 1.5*float64(r.SingleReads)},
		{"restart: writes", fmt.Sprint(r.Restart.Writes), "0", r.Restart.Writes == 0},
		{"restart: requests", fmt.Sprint(r.Restart.All), fmt.Sprintf("≤ %d (1 per cluster)", r.RestartClusters), r.Restart.All <= r.RestartClusters},
		{"steady state, unscheduled clusters", fmt.Sprintf("%.0f/min", perMin(r.Steady)), "0/min", r.Steady.All == 0},
		{"idle RSS", fmt.Sprintf("%.1f MiB", mib(r.RSSIdle)), "≤ 10 MiB", mib(r.RSSIdle) <= 10},
		{"RSS many against 10 clusters", fmt.Sprintf("%.2f×", float64(r.RSSMany)/float64(r.RSS10)), "≤ 1.20×", float64(r.RSSMany) <= 1.2*float64(r.RSS10)},
		{"static binary", fmt.Sprintf("%.1f MiB", mib(r.BinarySize)), "≤ 8 MiB", mib(r.BinarySize) <= 8},
	}
	if r.SteadyHealth != nil {
		t = append(t, Target{"steady state, healthy 3 members", fmt.Sprintf("%.0f/min", perMin(*r.SteadyHealth)), "0/min", r.SteadyHealth.All == 0})
	}
	return t
}

// Missed lists the targets not met.
func (r *BenchReport) Missed() []string {
	var out []string
	for _, t := range r.Targets() {
		if !t.Met {
			out = append(out, fmt.Sprintf("%s: %s, want %s", t.What, t.Got, t.Want))
		}
	}
	return out
}

// Table prints the report as the README shows it.
func (r *BenchReport) Table(w io.Writer) {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	x := func(a, b time.Duration) string { return fmt.Sprintf("%.2f×", float64(a)/float64(b)) }
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	each := func(rs []float64) string {
		var s []string
		for _, v := range rs {
			s = append(s, fmt.Sprintf("%.2f×", v))
		}
		return strings.Join(s, ", ")
	}
	met := map[string]string{}
	for _, t := range r.Targets() {
		met[t.What] = t.Want
		if !t.Met {
			met[t.What] += " **missed**"
		}
	}
	n := r.Objects / 7
	fmt.Fprintf(w, "| scenario | operator | anchor | ratio | target |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| %d clusters at once (%d objects), median of %d rounds, first: %s | %s | %s: the same requests, %d clusters at a time | %s (rounds: %s) | %s |\n",
		n, r.Objects, r.Rounds, strings.Join(r.First, ", "), ms(r.Operator), ms(r.LoaderSame), workers, x(r.Operator, r.LoaderSame), each(r.SameRatios), met["burst against the same requests at 16"])
	fmt.Fprintf(w, "| same | | %s: the objects only, %d at a time | %s (rounds: %s) | |\n", ms(r.Loader16), workers, x(r.Operator, r.Loader16), each(r.Ratios))
	fmt.Fprintf(w, "| same | | %s: the objects only, 8 at a time | %s | |\n", ms(r.Loader8), x(r.Operator, r.Loader8))
	fmt.Fprintf(w, "| same | | %s: the objects only, 1 at a time | %s | |\n", ms(r.Loader1), x(r.Operator, r.Loader1))
	fmt.Fprintf(w, "| the operator's requests for the burst (last round, until idle) | %s | %d POSTs | | |\n", r.BurstRequests, r.Objects)
	fmt.Fprintf(w, "| one cluster (7 objects), median of %d | %s | %s: the same requests | %s | %s |\n", r.Singles, ms(r.Single), ms(r.SingleReads), x(r.Single, r.SingleReads), met["one cluster against the same requests"])
	fmt.Fprintf(w, "| same | | %s: the objects only, back to back | %s | |\n", ms(r.SingleLoad), x(r.Single, r.SingleLoad))
	fmt.Fprintf(w, "| restart over %d created clusters, %s window | %s, idle after %s | | | %s writes, %s requests |\n", r.RestartClusters, r.Window, r.Restart, ms(r.RestartIdle), met["restart: writes"], met["restart: requests"])
	fmt.Fprintf(w, "| steady state, %d clusters whose Pods stay unscheduled, next %s | %s | | | %s |\n", r.RestartClusters, r.Window, r.Steady, met["steady state, unscheduled clusters"])
	if r.SteadyHealth != nil {
		fmt.Fprintf(w, "| steady state, a healthy 3-member cluster on the node, %s | %s | | | %s |\n", r.Window, *r.SteadyHealth, met["steady state, healthy 3 members"])
	}
	fmt.Fprintf(w, "| idle RSS (after the restart) | %s | | | %s |\n", mib(r.RSSIdle), met["idle RSS"])
	fmt.Fprintf(w, "| RSS, %d against 10 watched clusters | %s | %s | %.2f× | %s |\n", r.RSSManyClusters, mib(r.RSSMany), mib(r.RSS10), float64(r.RSSMany)/float64(r.RSS10), met["RSS many against 10 clusters"])
	fmt.Fprintf(w, "| static binary (CGO_ENABLED=0, -s -w) | %s | | | %s |\n", mib(r.BinarySize), met["static binary"])
	if len(r.Day2) > 0 {
		fmt.Fprintf(w, "\n| day 2, on the real node | operator | anchor | gap | longest write gap |\n|---|---|---|---|---|\n")
		for _, d := range r.Day2 {
			gap := "—"
			if d.WriteGap > 0 {
				gap = ms(d.WriteGap)
			}
			fmt.Fprintf(w, "| %s | %s | %s (%s) | %s | %s |\n", d.What, ms(d.Operator), ms(d.Anchor), d.AnchorIs, ms(d.Operator-d.Anchor), gap)
		}
	}
}

func createCluster(cp *ControlPlane, ns, name string, size int) error {
	_, err := createClusterUID(cp, ns, name, size)
	return err
}

// createClusterUID creates an EtcdCluster and returns its uid.
func createClusterUID(cp *ControlPlane, ns, name string, size int) (string, error) {
	body := fmt.Sprintf(`{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","metadata":{"name":%q},"spec":{"size":%d}}`, name, size)
	var o struct{ Metadata struct{ UID string } }
	if err := DoJSON(loaderClient, "POST", cp.ProxyURL+"/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters", []byte(body), 201, &o); err != nil {
		return "", fmt.Errorf("create etcdcluster %s/%s: %w", ns, name, err)
	}
	return o.Metadata.UID, nil
}

// createdStatus is what the operator writes for a cluster whose objects
// all exist and whose Pods no node runs yet.
func createdStatus(name string) string {
	return fmt.Sprintf(`{"status":{"phase":"Creating","message":"benchmark","ready":"0/3","readyMembers":0,`+
		`"members":[{"name":%q,"ready":false},{"name":%q,"ready":false},{"name":%q,"ready":false}],`+
		`"conditions":[{"type":"Available","status":"False","reason":"NotStarted","message":"benchmark","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1},`+
		`{"type":"Progressing","status":"True","reason":"WaitingForMembers","message":"benchmark","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1}],`+
		`"observedGeneration":1}}`, name+"-0", name+"-1", name+"-2")
}

// createCreatedCluster makes a cluster whose status says it is done, as
// after a restart; the operator must leave it alone.
func createCreatedCluster(cp *ControlPlane, ns, name string) error {
	if err := createCluster(cp, ns, name, 3); err != nil {
		return err
	}
	return DoJSON(loaderClient, "PATCH", cp.ProxyURL+"/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/"+name+"/status", []byte(createdStatus(name)), 200, nil)
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

// objectsOf returns the Pods and Services of ns (of one cluster when
// cluster is set), as the server stores them.
func objectsOf(cp *ControlPlane, ns, cluster string) ([]map[string]any, error) {
	sel := ""
	if cluster != "" {
		sel = "?labelSelector=etcd.coreos.com%2Fcluster%3D" + cluster
	}
	var all []map[string]any
	for _, res := range []string{"services", "pods"} {
		var l struct{ Items []map[string]any }
		if err := cp.Get("/api/v1/namespaces/"+ns+"/"+res+sel, &l); err != nil {
			return nil, err
		}
		for _, item := range l.Items {
			item["kind"] = map[string]string{"services": "Service", "pods": "Pod"}[res]
			item["apiVersion"] = "v1"
		}
		all = append(all, l.Items...)
	}
	return all, nil
}

// objectsOfCluster takes the objects of cluster from objs and renames them
// (names, labels, owners, --initial-cluster) for a cluster named name.
func objectsOfCluster(objs []map[string]any, cluster, name string) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o["metadata"].(map[string]any)["labels"].(map[string]any)["etcd.coreos.com/cluster"] != cluster {
			continue
		}
		b, _ := json.Marshal(o)
		s := strings.ReplaceAll(string(b), `"`+cluster, `"`+name)
		s = strings.ReplaceAll(s, "="+cluster, "="+name)
		s = strings.ReplaceAll(s, ","+cluster, ","+name)
		s = strings.ReplaceAll(s, "//"+cluster, "//"+name)
		s = strings.ReplaceAll(s, "."+cluster, "."+name)
		var c map[string]any
		_ = json.Unmarshal([]byte(s), &c)
		out = append(out, c)
	}
	return out
}

// ownersIn creates EtcdClusters of the same names in ns (which no operator
// watches) and returns their uids, so that the loader's objects carry the
// same kind of ownerReferences as the operator's.
func ownersIn(cp *ControlPlane, ns string, names []string) (map[string]string, error) {
	uids := map[string]string{}
	var mu sync.Mutex
	err := parallel(workers, len(names), func(i int) error {
		uid, err := createClusterUID(cp, ns, names[i], 3)
		mu.Lock()
		uids[names[i]] = uid
		mu.Unlock()
		return err
	})
	return uids, err
}

type postReq struct {
	path string
	body []byte
}

// retarget turns stored objects back into create requests for ns: only what
// the operator sent (name, labels, ownerReferences, spec), owners remapped.
func retarget(objs []map[string]any, ns string, owners map[string]string) []postReq {
	var reqs []postReq
	for _, o := range objs {
		meta := o["metadata"].(map[string]any)
		var refs []any
		for _, ref := range meta["ownerReferences"].([]any) {
			ref := shallow(ref)
			ref["uid"] = owners[ref["name"].(string)]
			refs = append(refs, ref)
		}
		spec := shallow(o["spec"])
		delete(spec, "clusterIP")
		delete(spec, "clusterIPs")
		delete(spec, "nodeName")
		body, _ := json.Marshal(map[string]any{
			"apiVersion": "v1", "kind": o["kind"],
			"metadata": map[string]any{"name": meta["name"], "labels": meta["labels"], "ownerReferences": refs},
			"spec":     spec,
		})
		res := map[any]string{"Service": "services", "Pod": "pods"}[o["kind"]]
		reqs = append(reqs, postReq{path: "/api/v1/namespaces/" + ns + "/" + res, body: body})
	}
	// Services first, as the operator does.
	slices.SortStableFunc(reqs, func(a, b postReq) int {
		return strings.Compare(b.path[strings.LastIndex(b.path, "/"):], a.path[strings.LastIndex(a.path, "/"):])
	})
	return reqs
}

// shallow copies a decoded JSON object one level deep, so that retarget
// never changes the objects it is given.
func shallow(v any) map[string]any {
	m := map[string]any{}
	for k, x := range v.(map[string]any) {
		m[k] = x
	}
	return m
}

var loaderClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}

func post(base string, r postReq) error {
	return DoJSON(loaderClient, "POST", base+r.path, r.body, 201, nil)
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

// waitIdle waits until the operator has sent nothing new for two seconds.
func waitIdle(c *counter, timeout time.Duration) error {
	return Eventually(timeout, "the operator to go idle", func() (bool, error) {
		reqs, last := c.snapshot()
		return len(reqs) > 0 && time.Since(last) > 2*time.Second, nil
	})
}

func waitAllCreated(cp *ControlPlane, ns string, n int) error {
	return Eventually(5*time.Minute, fmt.Sprintf("%d clusters Created in %s", n, ns), func() (bool, error) {
		var l struct {
			Items []struct {
				Status struct {
					Phase      string
					Conditions []struct{ Type, Reason string }
				}
			}
		}
		if err := cp.Get("/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters", &l); err != nil {
			return false, err
		}
		created := 0
		for _, c := range l.Items {
			for _, cond := range c.Status.Conditions {
				if cond.Type == "Progressing" && cond.Reason == "WaitingForMembers" || c.Status.Phase == "Running" {
					created++
					break
				}
			}
		}
		return created == n, nil
	})
}

// rss reads a process's resident set size from /proc.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			var kb int64
			fmt.Sscan(f[1], &kb)
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
