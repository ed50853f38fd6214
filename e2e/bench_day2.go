package e2e

// The benchmark's day-2 phase, on the real node: each operation is timed
// from the request that starts it to the status that says it is done
// (Running, every member ready, for the current generation), beside an
// anchor measured in the same run from etcd itself: the first moment the
// members answer as they should. The difference is what the operator
// adds. A client writing every 100 ms through the client Service records
// the longest time it could not write.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Day2Result is one day-2 operation.
type Day2Result struct {
	What             string
	Operator, Anchor time.Duration // from the request
	AnchorIs         string
	WriteGap         time.Duration // 0: no writer ran
}

// statusRecord is a status the operator wrote, as the watch delivered it.
type statusRecord struct {
	At                        time.Time
	Generation, Observed      int64
	Phase, Ready, Version     string
	Available                 bool
	MembersListed, ReadyCount int
}

// clusterWatch records every status of one EtcdCluster.
type clusterWatch struct {
	mu   sync.Mutex
	seen []statusRecord
}

func watchCluster(ctx context.Context, cp *ControlPlane, ns, name string) (*clusterWatch, error) {
	events, err := cp.Watch(ctx, "/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters?fieldSelector=metadata.name%3D"+name)
	if err != nil {
		return nil, err
	}
	w := &clusterWatch{}
	go func() {
		for ev := range events {
			var o struct {
				Metadata struct{ Generation int64 }
				Status   struct {
					Phase, Ready, CurrentVersion string
					ReadyMembers                 int
					Members                      []any
					ObservedGeneration           int64
					Conditions                   []struct{ Type, Status string }
				}
			}
			if json.Unmarshal(ev.Object, &o) != nil {
				continue
			}
			rec := statusRecord{At: time.Now(), Generation: o.Metadata.Generation, Observed: o.Status.ObservedGeneration,
				Phase: o.Status.Phase, Ready: o.Status.Ready, Version: o.Status.CurrentVersion,
				MembersListed: len(o.Status.Members), ReadyCount: o.Status.ReadyMembers}
			for _, c := range o.Status.Conditions {
				if c.Type == "Available" {
					rec.Available = c.Status == "True"
				}
			}
			w.mu.Lock()
			w.seen = append(w.seen, rec)
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// done waits for the first status after t0, and after one that matched
// first (when set), that says the cluster is Running with n of n members
// ready for its current generation; it returns when that status came.
func (w *clusterWatch) done(t0 time.Time, n int, first func(statusRecord) bool) (time.Time, error) {
	var at time.Time
	err := Eventually(5*time.Minute, fmt.Sprintf("Running %d/%d", n, n), func() (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		armed := first == nil
		for _, s := range w.seen {
			if s.At.Before(t0) {
				continue
			}
			if !armed {
				armed = first(s)
				continue
			}
			if s.Phase == "Running" && s.Available && s.Observed == s.Generation && s.Ready == fmt.Sprintf("%d/%d", n, n) && s.MembersListed == n {
				at = s.At
				return true, nil
			}
		}
		return false, nil
	})
	return at, err
}

// nodeCluster is the day-2 phase's view of one cluster's members.
type nodeCluster struct {
	cp       *ControlPlane
	ns, name string
}

// pods lists the cluster's Pods that are not being deleted: name -> uid.
func (c nodeCluster) pods() map[string]string {
	var l struct {
		Items []struct {
			Metadata struct {
				Name, UID         string
				DeletionTimestamp *string
			}
		}
	}
	_ = c.cp.Get("/api/v1/namespaces/"+c.ns+"/pods?labelSelector=etcd.coreos.com%2Fcluster%3D"+c.name, &l)
	out := map[string]string{}
	for _, p := range l.Items {
		if p.Metadata.DeletionTimestamp == nil {
			out[p.Metadata.Name] = p.Metadata.UID
		}
	}
	return out
}

func (c nodeCluster) member(pod, method, path string, v any) bool {
	var body []byte
	if method == "POST" {
		body = []byte("{}")
	}
	code, b, err := c.cp.Do(method, "/api/v1/namespaces/"+c.ns+"/pods/"+pod+":2379/proxy"+path, body, "application/json")
	return err == nil && code == 200 && json.Unmarshal(b, v) == nil
}

// healthy reports whether exactly n Pods exist and every one's etcd
// answers /health, and whether their version is version (when set).
func (c nodeCluster) healthy(n int, version string) bool {
	pods := c.pods()
	if len(pods) != n {
		return false
	}
	for p := range pods {
		var h struct{ Health string }
		if !c.member(p, "GET", "/health", &h) || h.Health != "true" {
			return false
		}
		if version != "" {
			var v struct{ Etcdserver string }
			if !c.member(p, "GET", "/version", &v) || "v"+v.Etcdserver != version {
				return false
			}
		}
	}
	return true
}

// etcdMembers is the length of the member list as pod's etcd says it.
func (c nodeCluster) etcdMembers(pod string) int {
	var l struct{ Members []any }
	if !c.member(pod, "POST", "/v3/cluster/member/list", &l) {
		return -1
	}
	return len(l.Members)
}

// anchor polls cond from t0 on and returns when it first held.
func anchor(what string, cond func() bool) (time.Time, error) {
	var at time.Time
	err := Eventually(5*time.Minute, what, func() (bool, error) {
		if cond() {
			at = time.Now()
			return true, nil
		}
		return false, nil
	})
	return at, err
}

// gapWriter writes a key every 100 ms through the client Service and
// keeps the longest time between two successful writes.
type gapWriter struct {
	stop    chan struct{}
	done    chan time.Duration
	longest time.Duration
}

func (c nodeCluster) startWriter() *gapWriter {
	w := &gapWriter{stop: make(chan struct{}), done: make(chan time.Duration, 1)}
	go func() {
		last, longest := time.Now(), time.Duration(0)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				w.done <- max(longest, time.Since(last))
				return
			case <-tick.C:
			}
			b, _ := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte("/bench")), "value": base64.StdEncoding.EncodeToString([]byte(strconv.Itoa(i)))})
			code, _, err := c.cp.Do("POST", "/api/v1/namespaces/"+c.ns+"/services/"+c.name+"-client:2379/proxy/v3/kv/put", b, "application/json")
			if err == nil && code == 200 {
				longest, last = max(longest, time.Since(last)), time.Now()
			}
		}
	}()
	return w
}

// end stops the writer and returns the longest gap it saw.
func (w *gapWriter) end() time.Duration {
	close(w.stop)
	return <-w.done
}

func (c nodeCluster) patchSpec(spec string) (time.Time, error) {
	t0 := time.Now()
	code, b, err := c.cp.Do("PATCH", "/apis/coreos.com/v1/namespaces/"+c.ns+"/etcdclusters/"+c.name, []byte(`{"spec":`+spec+`}`), "application/merge-patch+json")
	if err == nil && code != 200 {
		err = fmt.Errorf("patch %s/%s: %d %s", c.ns, c.name, code, b)
	}
	return t0, err
}

// day2: apply clusters of 1, 3 and 5, then on one of 3: a member Pod
// deleted, 3 -> 5, 5 -> 3, an upgrade, and a window of steady state.
func (b *bench) day2() error {
	if !b.o.Day2 {
		return nil
	}
	if b.cp.Node() == nil {
		return errors.New("day 2 needs the node")
	}
	ns := "day2"
	if err := b.cp.CreateNodeNamespace(ns); err != nil {
		return err
	}
	if _, err := b.startOperator(ns); err != nil {
		return err
	}
	defer b.stopOperator()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	add := func(what string, t0, op, anc time.Time, anchorIs string, gap time.Duration) {
		d := Day2Result{What: what, Operator: op.Sub(t0), Anchor: anc.Sub(t0), AnchorIs: anchorIs, WriteGap: gap}
		b.r.Day2 = append(b.r.Day2, d)
		b.say("day 2: %s: operator %s, anchor %s (%s), longest write gap %s", what, d.Operator.Round(time.Millisecond), d.Anchor.Round(time.Millisecond), anchorIs, gap.Round(time.Millisecond))
	}

	for _, n := range []int{1, 3, 5} {
		c := nodeCluster{b.cp, ns, fmt.Sprintf("apply%d", n)}
		w, err := watchCluster(ctx, b.cp, ns, c.name)
		if err != nil {
			return err
		}
		b.say("day 2: apply a cluster of %d", n)
		t0 := time.Now()
		if _, err := b.cp.ApplyCluster(Cluster{Namespace: ns, Name: c.name, Size: n, Via: b.cp.ProxyURL}); err != nil {
			return err
		}
		anc, err := anchor(fmt.Sprintf("%d members answering /health", n), func() bool { return c.healthy(n, "") })
		if err != nil {
			return err
		}
		op, err := w.done(t0, n, nil)
		if err != nil {
			return err
		}
		add(fmt.Sprintf("apply → Available, %d member(s)", n), t0, op, anc, "all answer /health", 0)
		if n != 3 {
			if err := b.deleteCluster(c); err != nil {
				return err
			}
		}
	}

	c := nodeCluster{b.cp, ns, "apply3"}
	w, err := watchCluster(ctx, b.cp, ns, c.name)
	if err != nil {
		return err
	}
	notAll := func(n int) func(statusRecord) bool {
		return func(s statusRecord) bool { return s.Ready != fmt.Sprintf("%d/%d", n, n) || s.Phase != "Running" }
	}

	// Failover: a member's Pod deleted; done when a new member of that
	// name answers and the status says all are ready again.
	old := c.pods()[c.name+"-1"]
	wr := c.startWriter()
	b.say("day 2: delete Pod %s-1", c.name)
	t0 := time.Now()
	if code, body, err := b.cp.Do("DELETE", "/api/v1/namespaces/"+ns+"/pods/"+c.name+"-1", nil, ""); err != nil || code != 200 {
		return fmt.Errorf("delete pod %s-1: %d %s %v", c.name, code, body, err)
	}
	anc, err := anchor("the replaced member answering", func() bool {
		uid, ok := c.pods()[c.name+"-1"]
		return ok && uid != old && c.healthy(3, "")
	})
	if err != nil {
		return err
	}
	op, err := w.done(t0, 3, notAll(3))
	if err != nil {
		return err
	}
	add("member Pod deleted → Available, 3/3 ready (back on its volume)", t0, op, anc, "the member answers /health again", wr.end())

	// Every member Pod deleted at once: each comes back on its volume as
	// itself, and the cluster has its quorum again.
	olds := c.pods()
	wr = c.startWriter()
	b.say("day 2: delete every Pod of %s", c.name)
	t0 = time.Now()
	for i := range 3 {
		if code, body, err := b.cp.Do("DELETE", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s-%d", ns, c.name, i), nil, ""); err != nil || code != 200 {
			return fmt.Errorf("delete pod %s-%d: %d %s %v", c.name, i, code, body, err)
		}
	}
	anc, err = anchor("every member back and answering", func() bool {
		now := c.pods()
		for name, uid := range olds {
			if now[name] == "" || now[name] == uid {
				return false
			}
		}
		return c.healthy(3, "")
	})
	if err != nil {
		return err
	}
	op, err = w.done(t0, 3, notAll(3))
	if err != nil {
		return err
	}
	add("every member Pod deleted → Available, 3/3 ready", t0, op, anc, "all answer /health again", wr.end())

	for _, step := range []struct {
		what, spec string
		n          int
		anchorIs   string
		anchor     func() bool
	}{
		{"scale 3 → 5", `{"size":5}`, 5, "5 members answer /health", func() bool { return c.healthy(5, "") }},
		{"scale 5 → 3", `{"size":3}`, 3, "etcd lists 3 members", func() bool { return c.etcdMembers(c.name+"-0") == 3 }},
		{"upgrade 3 members " + EtcdVersion + " → " + Etcd37Version, `{"version":"` + Etcd37Version + `"}`, 3, "all answer /version " + Etcd37Version, func() bool { return c.healthy(3, Etcd37Version) }},
	} {
		wr := c.startWriter()
		b.say("day 2: %s", step.what)
		t0, err := c.patchSpec(step.spec)
		if err != nil {
			return err
		}
		anc, err := anchor(step.anchorIs, step.anchor)
		if err != nil {
			return err
		}
		// The spec's new generation tells a done status from an old one.
		op, err := w.done(t0, step.n, nil)
		if err != nil {
			return err
		}
		add(step.what, t0, op, anc, step.anchorIs, wr.end())
	}

	// Steady state: once the operator has gone quiet after the upgrade (it
	// looks again until etcd's cluster version follows its members), a
	// healthy cluster should cost nothing. If it never goes quiet, the
	// window shows what it keeps sending.
	b.say("day 2: steady state, %s", b.r.Window)
	if err := waitIdle(b.proxy, 2*time.Minute); err != nil {
		b.say("day 2: %v; measuring all the same", err)
	}
	b.proxy.reset()
	<-time.After(b.r.Window)
	reqs, _ := b.proxy.snapshot()
	st := countRequests(reqs)
	b.r.SteadyHealth = &st
	return b.deleteCluster(c)
}

// deleteCluster deletes an EtcdCluster and waits until the garbage
// collector has taken its Pods, so that the next measurement starts quiet.
func (b *bench) deleteCluster(c nodeCluster) error {
	if code, body, err := b.cp.Do("DELETE", "/apis/coreos.com/v1/namespaces/"+c.ns+"/etcdclusters/"+c.name, nil, ""); err != nil || code != 200 {
		return fmt.Errorf("delete etcdcluster %s/%s: %d %s %v", c.ns, c.name, code, body, err)
	}
	return Eventually(3*time.Minute, "the Pods of "+c.name+" gone", func() (bool, error) {
		var l struct{ Items []any }
		err := b.cp.Get("/api/v1/namespaces/"+c.ns+"/pods?labelSelector=etcd.coreos.com%2Fcluster%3D"+c.name, &l)
		return err == nil && len(l.Items) == 0, err
	})
}
