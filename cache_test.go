// Tests of the cache the Pod and Service watches keep: what a pass reads
// instead of a LIST, and the rule that it never decides from a cache older
// than the operator's own last write.
package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// What a pass reads from the cache after a sequence of watch events and
// the operator's own writes: ok is false while the cache lags behind a
// write (the pass waits, then lists).
func TestCacheObjects(t *testing.T) {
	pod := func(typ, name, uid string, deleting bool) func(c *cache) {
		return func(c *cache) {
			c.apply("pods", event[ownedEvent]{Type: typ, Object: ownedEvent{Namespace: "ns", Name: name, Cluster: "example", OwnerUID: uid,
				Pod: &cachedPod{podView: podView{Name: name, Deleting: deleting}, OwnerUID: uid}}})
		}
	}
	svc := func(typ, name, uid string) func(c *cache) {
		return func(c *cache) {
			c.apply("services", event[ownedEvent]{Type: typ, Object: ownedEvent{Namespace: "ns", Name: name, Cluster: "example", OwnerUID: uid}})
		}
	}
	claim := func(typ, name, uid, size string, deleting bool) func(c *cache) {
		return func(c *cache) {
			c.apply("persistentvolumeclaims", event[ownedEvent]{Type: typ, Object: ownedEvent{Namespace: "ns", Name: name, Cluster: "example", OwnerUID: uid,
				Claim: &cachedClaim{claimView: claimView{Name: name, Size: size, Deleting: deleting}, OwnerUID: uid}}})
		}
	}
	mark := func(typ string, resources ...string) func(c *cache) {
		return func(c *cache) {
			for _, r := range resources {
				c.apply(r, event[ownedEvent]{Type: typ})
			}
		}
	}
	listed := mark("LISTED", "pods", "services", "persistentvolumeclaims")
	expect := func(resource, name string, x pendingWrite) func(c *cache) {
		return func(c *cache) { c.awaitWrite("ns", "example", resource, name, x) }
	}
	for _, tc := range []struct {
		name     string
		events   []func(c *cache)
		ok       bool
		pods     []string
		services []string
		claims   []string
	}{
		{name: "not listed yet", events: []func(c *cache){pod("ADDED", "example-0", "u", false)}},
		{name: "only Pods listed", events: []func(c *cache){pod("ADDED", "example-0", "u", false), mark("LISTED", "pods")}},
		{name: "listed", ok: true, pods: []string{"example-0"}, services: []string{"example-0"},
			events: []func(c *cache){pod("ADDED", "example-0", "u", false), svc("ADDED", "example-0", "u"), listed}},
		{name: "a Pod's deletion leaves the Service of the same name", ok: true, services: []string{"example-0"},
			events: []func(c *cache){listed, pod("ADDED", "example-0", "u", false), svc("ADDED", "example-0", "u"), pod("DELETED", "example-0", "u", false)}},
		{name: "a deleted cluster's leftovers are not this one's", ok: true, pods: []string{"example-1"},
			events: []func(c *cache){listed, pod("ADDED", "example-0", "old", false), pod("ADDED", "example-1", "u", false), svc("ADDED", "example-0", "old")}},
		{name: "a create not shown yet", events: []func(c *cache){listed, expect("pods", "example-0", pendingWrite{uid: "u"})}},
		{name: "a create shown", ok: true, pods: []string{"example-0"},
			events: []func(c *cache){listed, expect("pods", "example-0", pendingWrite{uid: "u"}), pod("ADDED", "example-0", "u", false)}},
		{name: "a create of a name a deleted cluster's Pod still holds in the cache",
			events: []func(c *cache){listed, pod("ADDED", "example-0", "old", false), expect("pods", "example-0", pendingWrite{uid: "u"})}},
		{name: "a create shown before it was recorded", ok: true, services: []string{"example-0"},
			events: []func(c *cache){listed, svc("ADDED", "example-0", "u"), expect("services", "example-0", pendingWrite{uid: "u"})}},
		{name: "a delete not shown yet", pods: nil,
			events: []func(c *cache){listed, pod("ADDED", "example-0", "u", false), expect("pods", "example-0", pendingWrite{gone: true})}},
		{name: "a graceful delete shown: the Pod is terminating", ok: true, pods: []string{"example-0"},
			events: []func(c *cache){listed, pod("ADDED", "example-0", "u", false), expect("pods", "example-0", pendingWrite{gone: true}), pod("MODIFIED", "example-0", "u", true)}},
		{name: "a Service delete shown", ok: true,
			events: []func(c *cache){listed, svc("ADDED", "example-0", "u"), expect("services", "example-0", pendingWrite{gone: true}), svc("DELETED", "example-0", "u")}},
		{name: "an image change not shown yet",
			events: []func(c *cache){listed, pod("ADDED", "example-0", "u", false), expect("pods", "example-0", pendingWrite{uid: "u", image: "etcd:v3.7.3"})}},
		{name: "a relist drops what was deleted while no watch ran", ok: true, pods: []string{"example-1"}, services: []string{"example-1"},
			events: []func(c *cache){
				pod("ADDED", "example-0", "u", false), svc("ADDED", "example-0", "u"), listed,
				pod("ADDED", "example-1", "u", false), svc("ADDED", "example-1", "u"),
				mark("LISTING", "pods", "services"), pod("ADDED", "example-1", "u", false), svc("ADDED", "example-1", "u"), listed}},
		{name: "a relist shows a delete the watch missed", ok: true,
			events: []func(c *cache){listed, pod("ADDED", "example-0", "u", false), expect("pods", "example-0", pendingWrite{gone: true}),
				mark("LISTING", "pods"), mark("LISTED", "pods")}},
		{name: "a deleted cluster's claims are not this one's", ok: true, claims: []string{"example-1"},
			events: []func(c *cache){listed, claim("ADDED", "example-0", "old", "8Gi", false), claim("ADDED", "example-1", "u", "8Gi", false)}},
		{name: "a create of a Service name a deleted cluster's Service still holds in the cache",
			events: []func(c *cache){listed, svc("ADDED", "example-0", "old"), expect("services", "example-0", pendingWrite{uid: "u"})}},
		{name: "a create of a claim name a deleted cluster's claim still holds in the cache",
			events: []func(c *cache){listed, claim("ADDED", "example-0", "old", "8Gi", false), expect("persistentvolumeclaims", "example-0", pendingWrite{uid: "u"})}},
		{name: "a claim's growth not shown yet",
			events: []func(c *cache){listed, claim("ADDED", "example-0", "u", "8Gi", false), expect("persistentvolumeclaims", "example-0", pendingWrite{uid: "u", size: "10Gi"})}},
		{name: "a claim's growth shown", ok: true, claims: []string{"example-0"},
			events: []func(c *cache){listed, claim("ADDED", "example-0", "u", "8Gi", false), expect("persistentvolumeclaims", "example-0", pendingWrite{uid: "u", size: "10Gi"}),
				claim("MODIFIED", "example-0", "u", "10Gi", false)}},
		// The API server answers with a quantity in its canonical form.
		{name: "a claim's growth shown in the API server's form", ok: true, claims: []string{"example-0"},
			events: []func(c *cache){listed, claim("ADDED", "example-0", "u", "8Gi", false), expect("persistentvolumeclaims", "example-0", pendingWrite{uid: "u", size: "10240Mi"}),
				claim("MODIFIED", "example-0", "u", "10Gi", false)}},
		{name: "a claim's growth to another size is not shown",
			events: []func(c *cache){listed, claim("ADDED", "example-0", "u", "8Gi", false), expect("persistentvolumeclaims", "example-0", pendingWrite{uid: "u", size: "10241Mi"}),
				claim("MODIFIED", "example-0", "u", "10Gi", false)}},
		{name: "a claim's delete shown: a Pod still uses it, and it is terminating", ok: true, claims: []string{"example-0"},
			events: []func(c *cache){listed, claim("ADDED", "example-0", "u", "8Gi", false), expect("persistentvolumeclaims", "example-0", pendingWrite{gone: true}),
				claim("MODIFIED", "example-0", "u", "8Gi", true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache()
			for _, e := range tc.events {
				e(c)
			}
			ctx, cancel := context.WithCancel(context.Background())
			// A cache that is not ready makes objects wait: cancelled at
			// once, the wait returns what a lagging cache gives.
			pods, svcs, claims, ok := c.objects(ctx, "ns", "example", "u", cancel)
			cancel()
			var names, claimNames []string
			for _, p := range pods {
				names = append(names, p.Name)
			}
			for _, cl := range claims {
				claimNames = append(claimNames, cl.Name)
			}
			slices.Sort(names)
			slices.Sort(svcs)
			slices.Sort(claimNames)
			if ok != tc.ok || ok && (!slices.Equal(names, tc.pods) || !slices.Equal(svcs, tc.services) || !slices.Equal(claimNames, tc.claims)) {
				t.Errorf("objects = %v, %v, %v, ok %v; want %v, %v, %v, ok %v", names, svcs, claimNames, ok, tc.pods, tc.services, tc.claims, tc.ok)
			}
		})
	}
}

// The watches lag behind the operator's own writes, as they do on a busy
// API server: a pass waits until they show what the last one wrote, and so
// decides neither from a cluster without its new Pods nor from a Pod it
// has deleted. Without that rule the size change below bootstraps two more
// members as new (a second cluster), and the scale-down deletes its Pod
// twice.
func TestCacheLagsBehindOwnWrites(t *testing.T) {
	t.Run("create", func(t *testing.T) {
		f := newFakeAPI(t)
		op := startOperator(t, f)
		f.waitFor("the watches", func() bool {
			return len(f.streams) == 1 && len(f.podStreams) == 1 && len(f.svcStreams) == 1 && len(f.pvcStreams) == 1
		})
		f.lagOwned()
		f.putCluster("default", "example", size(3))
		f.waitFor("three Pods created", func() bool { return f.countExactLocked("POST", "/api/v1/namespaces/default/pods") == 3 })
		waits := op.logged(waitingForWatches)
		f.putCluster("default", "example", size(5))
		op.waitLogs(waitingForWatches, waits+1)
		f.catchUpOwned()
		waitStatus(f, "example", statusCheck{"Running at 5", func(st clusterStatus) bool { return running(5).ok(st) && len(st.Members) == 5 }})
		if n := f.countExact("POST", "/api/v1/namespaces/default/pods"); n != 5 {
			t.Errorf("%d Pods created, want 5", n)
		}
		for _, m := range []string{"example-3", "example-4"} {
			if cmd := strings.Join(podCommand(f.object("pods", "default", m)), " "); !strings.Contains(cmd, "--initial-cluster-state=existing") {
				t.Errorf("Pod %s: %s; want it to join the cluster (state existing)", m, cmd)
			}
		}
		if want := []string{"add example-3", "promote example-3", "add example-4", "promote example-4"}; !slices.Equal(f.membershipLog(), want) {
			t.Errorf("membership changes = %v, want %v", f.membershipLog(), want)
		}
	})
	t.Run("delete", func(t *testing.T) {
		f, op := startExample(t)
		waitStatus(f, "example", running(3))
		f.lagOwned()
		waits := op.logged(waitingForWatches)
		f.putCluster("default", "example", size(2))
		op.waitLogs(waitingForWatches, waits+1)
		f.catchUpOwned()
		waitStatus(f, "example", statusCheck{"Running at 2", func(st clusterStatus) bool { return running(2).ok(st) && len(st.Members) == 2 }})
		for _, path := range []string{"/api/v1/namespaces/default/pods/example-2", "/api/v1/namespaces/default/services/example-2"} {
			if n := f.countExact("DELETE", path); n != 1 {
				t.Errorf("DELETE %s sent %d times, want once", path, n)
			}
		}
		if got, want := f.objectNames("services"), []string{"example-0", "example-1", "example-client"}; !slices.Equal(got, want) {
			t.Errorf("services = %v, want %v", got, want)
		}
	})
}

// waitingForWatches is logged when a pass waits for the cache.
const waitingForWatches = "waiting for the watches to show the operator's last writes"

// podCommand is the etcd container's command of a Pod object.
func podCommand(pod map[string]any) []string {
	var cmd []string
	for _, c := range pod["spec"].(map[string]any)["containers"].([]any) {
		for _, a := range c.(map[string]any)["command"].([]any) {
			cmd = append(cmd, a.(string))
		}
	}
	return cmd
}

// BenchmarkCacheMemory reports what the cache holds per cluster of three
// members (3 Pods, 4 Services), decoded from real Pod and Service JSON as
// the watches deliver it: the cost of observing from the watches.
func BenchmarkCacheMemory(b *testing.B) {
	const clusters = 2000
	ec := &EtcdCluster{Metadata: objectMeta{Namespace: "default", UID: "6f1c0f3e-6e0a-4f8f-9a55-0e3b7c1d2a10"}, Spec: []byte(`{"size":3}`)}
	var raw [][2][]byte // Pod or Service JSON, as the API server stores them
	for i := range clusters {
		ec.Metadata.Name = fmt.Sprintf("cluster-%04d", i)
		in := newInput(ec, repo)
		_, s := decide(in, observed{})
		for _, o := range s.Create {
			raw = append(raw, [2][]byte{[]byte(o.Resource), o.Body})
		}
	}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newCache()
		for _, r := range raw {
			decode := decodeServiceEvent
			if string(r[0]) == "pods" {
				decode = decodePodEvent
			}
			ev, _, err := decode(r[1])
			if err != nil {
				b.Fatal(err)
			}
			c.apply(string(r[0]), event[ownedEvent]{Type: "ADDED", Object: ev})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/clusters, "B/cluster")
		runtime.KeepAlive(c)
	}
}

// Nothing is decided before the Pod, Service and PVC watches have each
// listed once. The operator restarts on a busy API server over a healthy
// cluster on volumes, and one watch's first list is slow while the other
// two list at once; meanwhile the spec is edited (the default version
// written out: a pass is due, with nothing to do). A pass that decided
// then would see members without their claims (whose data it would call
// lost), without their Services, or without their Pods: it must wait, and
// once the list is in find the cluster just Running.
func TestNothingDecidedBeforeEveryWatchListed(t *testing.T) {
	for _, slow := range []string{"persistentvolumeclaims", "services", "pods"} {
		t.Run(slow+" listed late", func(t *testing.T) {
			f, op := startExample(t)
			waitStatus(f, "example", running(3))
			f.waitFor("the event of the creation", func() bool { return len(f.events) == 1 })
			op.stop()
			ids := f.memberIDs("default", "example")
			before := ownedUIDs(f)
			release := make(chan struct{})
			f.setFault(holdList(slow, release))
			mark := f.requestCount()

			op = startOperator(t, f)
			f.waitFor("the other two watches to have listed, and the slow list asked for", func() bool {
				return len(f.streams) == 1 && len(f.podStreams)+len(f.svcStreams)+len(f.pvcStreams) == 2 &&
					slices.ContainsFunc(f.requests[mark:], func(r request) bool { return r.Method == "GET" && r.Path == "/api/v1/namespaces/default/"+slow })
			})
			waits := op.logged(waitingForWatches)
			f.putCluster("default", "example", map[string]any{"size": 3, "version": defaultVersion})
			gen := int64(toInt(f.cluster("default", "example")["metadata"].(map[string]any)["generation"]))
			atGen := statusCheck{fmt.Sprint("observed generation ", gen), func(st clusterStatus) bool { return st.ObservedGeneration == gen }}
			waitUntil(f, op, "the pass to wait for the slow list, or to decide without it", func() bool {
				f.mu.Lock()
				decided := len(writesTo(f.requests[mark:])) > 0 || atGen.ok(statusOf(f.clusters["default/example"]))
				f.mu.Unlock()
				return decided || op.logged(waitingForWatches) > waits
			})
			close(release)
			waitStatus(f, "example", atGen)
			if w := writesTo(f.requestsSince(mark)); len(w) > 0 {
				t.Errorf("with the %s list late, the pass wrote %v; want nothing but the status", slow, w)
			}
			if log := f.membershipLog(); len(log) != 0 {
				t.Errorf("membership changes %v, want none", log)
			}
			if got := f.memberIDs("default", "example"); !slices.Equal(got, ids) {
				t.Errorf("member IDs %v, want those of before the restart, %v", got, ids)
			}
			if after := ownedUIDs(f); !jsonEqual(after, before) {
				t.Errorf("objects changed across the restart:\nbefore %v\nafter  %v", before, after)
			}
			if st := statusOf(f.cluster("default", "example")); !running(3).ok(st) {
				t.Errorf("status %s %s: %s; want Running 3/3", st.Phase, st.Ready, st.Message)
			}
		})
	}
}

// holdList is a fault that holds every LIST of resource in namespace
// default back until release is closed, then answers it as usual: a list
// the API server is slow to send. Watches and other requests go at once.
func holdList(resource string, release <-chan struct{}) func(r request) (int, string, string) {
	return func(r request) (int, string, string) {
		if r.Method == "GET" && r.Path == "/api/v1/namespaces/default/"+resource && r.Query.Get("watch") == "" {
			select {
			case <-release:
			case <-r.Ctx.Done():
			}
		}
		return 0, "", ""
	}
}

// writesTo is, as "METHOD path", the requests among reqs that create,
// delete or change a Pod, Service or PVC, or change etcd's membership.
func writesTo(reqs []request) []string {
	var out []string
	for _, r := range reqs {
		owned := strings.Contains(r.Path, "/pods") || strings.Contains(r.Path, "/services") || strings.Contains(r.Path, "/persistentvolumeclaims")
		switch {
		case strings.Contains(r.Path, "/proxy/"):
			if strings.Contains(r.Path, "/v3/cluster/member/") && !strings.HasSuffix(r.Path, "/member/list") {
				out = append(out, r.Method+" "+r.Path)
			}
		case owned && r.Method != "GET":
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// ownedUIDs is the uid of every Pod, Service and PVC the fake holds.
func ownedUIDs(f *fakeAPI) map[string]any {
	uids := map[string]any{}
	for _, r := range []string{"pods", "services", "persistentvolumeclaims"} {
		for _, n := range f.objectNames(r) {
			uids[r+"/"+n] = f.object(r, "default", n)["metadata"].(map[string]any)["uid"]
		}
	}
	return uids
}

// waitUntil waits until cond holds, looking again on every request or
// change the fake sees and every line the operator logs; it fails the test
// after a generous bound. cond must not hold f.mu when it returns.
func waitUntil(f *fakeAPI, op *operator, what string, cond func() bool) {
	f.t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		changed := f.changed
		f.mu.Unlock()
		op.logs.mu.Lock()
		if op.logs.changed == nil {
			op.logs.changed = make(chan struct{})
		}
		logged := op.logs.changed
		op.logs.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-logged:
		case <-deadline.C:
			f.t.Fatalf("timed out waiting for %s; requests seen:\n%s", what, f.requestLog())
		}
	}
}

// Each of the operator's own writes is awaited on its own watch, while the
// other watches are current: after a step that creates or deletes a
// Service, deletes a PVC or asks one to grow, nothing is decided until
// that watch shows it. Otherwise the next step would see the Service still
// missing (and create it again), the deleted Service or claim still there
// (and delete it again), or the claim at its old size (and ask again).
func TestOwnWriteAwaitedOnItsWatch(t *testing.T) {
	claims := func(f *fakeAPI) { f.claimLag = true }
	services := func(f *fakeAPI) { f.svcLag = true }
	runningAt := func(n int) statusCheck {
		return statusCheck{fmt.Sprintf("Running at %d", n), func(st clusterStatus) bool { return running(n).ok(st) && len(st.Members) == n }}
	}
	for _, tc := range []struct {
		name         string
		lag          func(f *fakeAPI) // holds one watch back; called with f.mu held
		method, path string           // the write, to be sent once
		do           func(f *fakeAPI) // what calls for it
		done         statusCheck
	}{
		{name: "the client Service made again", lag: services, method: "POST", path: "/api/v1/namespaces/default/services",
			do: func(f *fakeAPI) { f.deleteService("default", "example-client") }, done: running(3)},
		{name: "a removed member's Service deleted", lag: services, method: "DELETE", path: "/api/v1/namespaces/default/services/example-2",
			do: func(f *fakeAPI) { f.putCluster("default", "example", size(2)) }, done: runningAt(2)},
		{name: "a removed member's claim deleted", lag: claims, method: "DELETE", path: "/api/v1/namespaces/default/persistentvolumeclaims/example-2",
			do: func(f *fakeAPI) { f.putCluster("default", "example", size(2)) }, done: runningAt(2)},
		{name: "a claim asked to grow", lag: claims, method: "PATCH", path: "/api/v1/namespaces/default/persistentvolumeclaims/example-0",
			do: func(f *fakeAPI) {
				f.putCluster("default", "example", map[string]any{"size": 3, "storage": map[string]any{"size": "10Gi"}})
			}, done: statusCheck{"Running 3/3 at generation 2", func(st clusterStatus) bool { return running(3).ok(st) && st.ObservedGeneration == 2 }}},
		// The API server stores 10240Mi as 10Gi, and the watch shows that.
		{name: "a claim asked to grow, in other units than the API server's", lag: claims, method: "PATCH", path: "/api/v1/namespaces/default/persistentvolumeclaims/example-0",
			do: func(f *fakeAPI) {
				f.putCluster("default", "example", map[string]any{"size": 3, "storage": map[string]any{"size": "10240Mi"}})
			}, done: statusCheck{"Running 3/3 at generation 2", func(st clusterStatus) bool { return running(3).ok(st) && st.ObservedGeneration == 2 }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, op := idleExample(t)
			mark := f.requestCount()
			writes := func() int { // with f.mu held
				n := 0
				for _, r := range f.requests[mark:] {
					if r.Method == tc.method && r.Path == tc.path {
						n++
					}
				}
				return n
			}
			waitsAtWrite := -1
			f.setFault(func(r request) (int, string, string) {
				if r.Method == tc.method && r.Path == tc.path {
					waits := op.logged(waitingForWatches)
					f.mu.Lock()
					if waitsAtWrite < 0 {
						waitsAtWrite = waits
						tc.lag(f)
					}
					f.mu.Unlock()
				}
				return 0, "", ""
			})
			tc.do(f)
			waitUntil(f, op, "the step after the write to wait for its watch, or to decide without it", func() bool {
				f.mu.Lock()
				at, n := waitsAtWrite, writes()
				f.mu.Unlock()
				return n > 1 || at >= 0 && op.logged(waitingForWatches) > at
			})
			f.catchUpOwned()
			waitStatus(f, "example", tc.done)
			f.mu.Lock()
			n := writes()
			f.mu.Unlock()
			if n != 1 {
				t.Errorf("%s %s sent %d times, want once", tc.method, tc.path, n)
			}
			// Once the watch caught up, it showed the write: no pass had to
			// give up on it and list.
			if n := op.logged("listing instead"); n != 0 {
				t.Errorf("%d passes listed instead of waiting for the watch to show the write", n)
			}
		})
	}
}
