package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// BenchOptions sizes a benchmark run.
type BenchOptions struct {
	Rounds        int // operator and loader alternate; medians are reported
	Clusters      int // applied at once, size 3 each
	Singles       int // one-cluster runs; the median is reported
	RSSClusters   int // watched clusters for the memory comparison (against 10)
	OperatorBin   string
	OperatorFlags []string  // extra flags for the operator
	Out           io.Writer // progress lines
}

// BenchReport is what a run measured.
type BenchReport struct {
	Objects                       int
	Rounds                        int
	Operator, Loader8, Loader1    time.Duration // medians
	Ratio                         float64       // median of the rounds' operator/loader8
	Ratios                        []float64     // each round's, in order
	Single, SingleLoader          time.Duration
	RestartRequests, RestartWrite int
	RestartLists                  int
	RestartIdle                   time.Duration
	RSSIdle, RSS10, RSSMany       int64 // bytes
	RSSManyClusters               int
	RestartClusters               int
	BinarySize                    int64
}

// counter is a reverse proxy between the operator and kubectl proxy that
// counts the requests going through it.
type counter struct {
	srv      *http.Server
	url      string
	mu       sync.Mutex
	requests []string // "METHOD path"
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

// RunBenchmark measures the operator against a loader that POSTs the same
// objects, on one control plane, in one run.
func RunBenchmark(cp *ControlPlane, o BenchOptions) (*BenchReport, error) {
	r := &BenchReport{Objects: o.Clusters * 7, RSSManyClusters: o.RSSClusters}
	say := func(format string, args ...any) { fmt.Fprintf(o.Out, "bench: "+format+"\n", args...) }
	if st, err := os.Stat(o.OperatorBin); err == nil {
		r.BinarySize = st.Size()
	}
	proxy, err := newCounter(cp.ProxyURL)
	if err != nil {
		return nil, err
	}
	defer proxy.srv.Close()
	for _, ns := range []string{"serial", "rss-few", "rss-many"} {
		if err := cp.CreateNamespace(ns); err != nil {
			return nil, err
		}
	}
	startOp := func(ns string) (*Process, error) {
		return cp.StartProcess("etcd-operator-bench", nil, o.OperatorBin, append([]string{"-master=" + proxy.url, "-namespace=" + ns}, o.OperatorFlags...)...)
	}
	stopOp := func() { cp.StopProcess("etcd-operator-bench", 10*time.Second) }
	defer stopOp()
	names := make([]string, o.Clusters)
	for i := range names {
		names[i] = fmt.Sprintf("c%04d", i)
	}

	// 1 and 2, in rounds: the operator makes N clusters at once, then a
	// loader POSTs the very same objects, 8 at a time, in another namespace.
	r.Rounds = max(o.Rounds, 1)
	var ops, loads []time.Duration
	var ratios []float64
	var op *Process
	var objects []map[string]any
	ns := ""
	for round := range r.Rounds {
		ns = fmt.Sprintf("bench%d", round)
		load := fmt.Sprintf("load%d", round)
		for _, n := range []string{ns, load} {
			if err := cp.CreateNamespace(n); err != nil {
				return nil, err
			}
		}
		stopOp()
		if _, err = startOp(ns); err != nil {
			return nil, err
		}
		if err := waitIdle(proxy, 30*time.Second); err != nil {
			return nil, err
		}
		say("round %d/%d: operator, %d clusters of 3 (%d objects) at once", round+1, r.Rounds, o.Clusters, r.Objects)
		took, err := timeObjects(cp, ns, r.Objects, func() error {
			return parallel(8, len(names), func(i int) error { return createCluster(cp, ns, names[i], 3) })
		})
		if err != nil {
			return nil, err
		}
		if objects, err = objectsOf(cp, ns); err != nil {
			return nil, err
		}
		owners, err := ownersIn(cp, load, names)
		if err != nil {
			return nil, err
		}
		reqs := retarget(objects, load, owners)
		say("round %d/%d: loader, the same %d objects, 8 at a time", round+1, r.Rounds, len(reqs))
		loaded, err := timeObjects(cp, load, len(reqs), func() error {
			return parallel(8, len(reqs), func(i int) error { return post(proxy.url, reqs[i]) })
		})
		if err != nil {
			return nil, err
		}
		ops, loads = append(ops, took), append(loads, loaded)
		ratios = append(ratios, float64(took)/float64(loaded))
	}
	r.Operator, r.Loader8 = median(ops), median(loads)
	r.Ratios = slices.Clone(ratios)
	slices.Sort(ratios)
	r.Ratio = ratios[len(ratios)/2]

	owners, err := ownersIn(cp, "serial", names)
	if err != nil {
		return nil, err
	}
	reqs := retarget(objects, "serial", owners)
	say("loader: the same %d objects, 1 at a time", len(reqs))
	if r.Loader1, err = timeObjects(cp, "serial", len(reqs), func() error {
		return parallel(1, len(reqs), func(i int) error { return post(proxy.url, reqs[i]) })
	}); err != nil {
		return nil, err
	}

	// 3. One cluster: the operator against its objects POSTed back to back.
	say("one cluster, %d times each", o.Singles)
	ops, loads = nil, nil
	for i := range o.Singles {
		name := fmt.Sprintf("single%02d", i)
		d, err := timeObjects(cp, ns, 7, func() error { return createCluster(cp, ns, name, 3) })
		if err != nil {
			return nil, err
		}
		ops = append(ops, d)
		objs, err := objectsOfCluster(cp, ns, name)
		if err != nil {
			return nil, err
		}
		owners, err := ownersIn(cp, "serial", []string{name})
		if err != nil {
			return nil, err
		}
		reqs := retarget(objs, "serial", owners)
		d, err = timeObjects(cp, "serial", len(reqs), func() error {
			for _, req := range reqs {
				if err := post(proxy.url, req); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		loads = append(loads, d)
	}
	r.Single, r.SingleLoader = median(ops), median(loads)

	// 4. Restart with every cluster created: count what the operator asks.
	if err := waitAllCreated(cp, ns, o.Clusters+o.Singles); err != nil {
		return nil, err
	}
	stopOp()
	proxy.reset()
	r.RestartClusters = o.Clusters + o.Singles
	say("restart with %d clusters", r.RestartClusters)
	start := time.Now()
	if op, err = startOp(ns); err != nil {
		return nil, err
	}
	if err := waitIdle(proxy, 60*time.Second); err != nil {
		return nil, err
	}
	seen, last := proxy.snapshot()
	r.RestartIdle = last.Sub(start)
	r.RestartRequests = len(seen)
	for _, q := range seen {
		if !strings.HasPrefix(q, "GET ") {
			r.RestartWrite++
		}
		if strings.HasPrefix(q, "GET ") && !strings.Contains(q, "watch=") {
			r.RestartLists++
		}
	}
	if r.RSSIdle, err = rss(op.Pid()); err != nil {
		return nil, err
	}

	// 5. Memory: 10 watched clusters against many, all already Created.
	for _, m := range []struct {
		ns  string
		n   int
		rss *int64
	}{{"rss-few", 10, &r.RSS10}, {"rss-many", o.RSSClusters, &r.RSSMany}} {
		say("memory: %d watched clusters", m.n)
		if err := parallel(8, m.n, func(i int) error { return createCreatedCluster(cp, m.ns, fmt.Sprintf("m%05d", i)) }); err != nil {
			return nil, err
		}
		stopOp()
		proxy.reset()
		if op, err = startOp(m.ns); err != nil {
			return nil, err
		}
		if err := waitIdle(proxy, 60*time.Second); err != nil {
			return nil, err
		}
		if *m.rss, err = rss(op.Pid()); err != nil {
			return nil, err
		}
		if reqs, _ := proxy.snapshot(); hasWrite(reqs) {
			return nil, fmt.Errorf("the operator wrote while watching %d created clusters: %v", m.n, reqs)
		}
	}
	return r, nil
}

// Table prints the report as the README shows it.
func (r *BenchReport) Table(w io.Writer) {
	ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2f×", float64(a)/float64(b)) }
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	fmt.Fprintf(w, "| scenario | operator | loader | ratio | target |\n|---|---|---|---|---|\n")
	var each []string
	for _, x := range r.Ratios {
		each = append(each, fmt.Sprintf("%.2f×", x))
	}
	fmt.Fprintf(w, "| %d clusters at once (%d objects), median of %d rounds | %s | %s (8 parallel) | %.2f× (rounds: %s) | ≤ 1.25× |\n", r.Objects/7, r.Objects, r.Rounds, r.Operator.Round(time.Millisecond), r.Loader8.Round(time.Millisecond), r.Ratio, strings.Join(each, ", "))
	fmt.Fprintf(w, "| same, loader 1 at a time | | %s | %s | |\n", r.Loader1.Round(time.Millisecond), ratio(r.Operator, r.Loader1))
	fmt.Fprintf(w, "| one cluster (7 objects), median | %s | %s (back to back) | %s | ≤ 1.5× |\n", r.Single.Round(time.Millisecond), r.SingleLoader.Round(time.Millisecond), ratio(r.Single, r.SingleLoader))
	fmt.Fprintf(w, "| restart with %d clusters | %d requests (%d list pages, %d writes), idle after %s | | | no writes, ≤ 1 request per cluster |\n", r.RestartClusters, r.RestartRequests, r.RestartLists, r.RestartWrite, r.RestartIdle.Round(time.Millisecond))
	fmt.Fprintf(w, "| idle RSS (after the restart) | %s | | | ≤ 10 MiB |\n", mib(r.RSSIdle))
	fmt.Fprintf(w, "| RSS, %d vs 10 watched clusters | %s vs %s | | %s | ≤ 1.20× |\n", r.RSSManyClusters, mib(r.RSSMany), mib(r.RSS10), fmt.Sprintf("%.2f×", float64(r.RSSMany)/float64(r.RSS10)))
	fmt.Fprintf(w, "| static binary (CGO_ENABLED=0, -s -w) | %s | | | ≤ 8 MiB |\n", mib(r.BinarySize))
}

func createCluster(cp *ControlPlane, ns, name string, size int) error {
	body := fmt.Sprintf(`{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","metadata":{"name":%q},"spec":{"size":%d}}`, name, size)
	code, b, err := cp.Do("POST", "/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters", []byte(body), "application/json")
	if err != nil || code != 201 {
		return fmt.Errorf("create etcdcluster %s/%s: %d %s %v", ns, name, code, b, err)
	}
	return nil
}

// createCreatedCluster makes a cluster whose status says it is done, as
// after a restart; the operator must leave it alone.
func createCreatedCluster(cp *ControlPlane, ns, name string) error {
	if err := createCluster(cp, ns, name, 3); err != nil {
		return err
	}
	// What the operator writes for a cluster whose objects all exist and
	// whose Pods no node runs yet (the benchmark's namespaces have none).
	st := fmt.Sprintf(`{"status":{"phase":"Creating","message":"benchmark","ready":"0/3","readyMembers":0,`+
		`"members":[{"name":%q,"ready":false},{"name":%q,"ready":false},{"name":%q,"ready":false}],`+
		`"conditions":[{"type":"Progressing","status":"True","reason":"WaitingForMembers","message":"benchmark","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1}],`+
		`"observedGeneration":1}}`, name+"-0", name+"-1", name+"-2")
	code, b, err := cp.Do("PATCH", "/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/"+name+"/status", []byte(st), "application/merge-patch+json")
	if err != nil || code != 200 {
		return fmt.Errorf("status of %s/%s: %d %s %v", ns, name, code, b, err)
	}
	return nil
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

// objectsOf returns the Pods and Services of ns, as the server stores them.
func objectsOf(cp *ControlPlane, ns string) ([]map[string]any, error) {
	return objectsOfCluster(cp, ns, "")
}

func objectsOfCluster(cp *ControlPlane, ns, cluster string) ([]map[string]any, error) {
	sel := ""
	if cluster != "" {
		sel = "?labelSelector=etcd.coreos.com/cluster%3D" + cluster
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

// ownersIn creates EtcdClusters of the same names in ns (which no operator
// watches) and returns their uids, so that the loader's objects carry the
// same kind of ownerReferences as the operator's.
func ownersIn(cp *ControlPlane, ns string, names []string) (map[string]string, error) {
	uids := map[string]string{}
	var mu sync.Mutex
	err := parallel(8, len(names), func(i int) error {
		if err := createCluster(cp, ns, names[i], 3); err != nil {
			return err
		}
		var o struct{ Metadata struct{ UID string } }
		if err := cp.Get("/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/"+names[i], &o); err != nil {
			return err
		}
		mu.Lock()
		uids[names[i]] = o.Metadata.UID
		mu.Unlock()
		return nil
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
		refs, _ := meta["ownerReferences"].([]any)
		for _, ref := range refs {
			ref := ref.(map[string]any)
			ref["uid"] = owners[ref["name"].(string)]
		}
		spec := o["spec"].(map[string]any)
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

func hasWrite(reqs []string) bool {
	return slices.ContainsFunc(reqs, func(q string) bool { return !strings.HasPrefix(q, "GET ") })
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
