// Tests of the control loop: which events become work. The loop is
// level-based, so an event that tells nothing new costs nothing: the replay
// of every cluster after a restart, the operator's own status writes coming
// back late, a Pod doing what its cluster's status says. A Pod that
// disagrees with the status, or a new spec, costs one pass.
package main

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The control loop looks at a cluster when a Pod disagrees with what its
// status says, and only then; the operator's own late status writes and a
// deleted cluster's leftovers cost nothing.
func TestControlLoop(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, f *fakeAPI, l *loop)
		want map[string]int // requests about each cluster
	}{
		{name: "Pods as the status says", want: map[string]int{"example": 0}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0", "-example-1"))
			close(l.synced)
			l.pod("ADDED", "example", "example-0", true)
			l.pod("ADDED", "example", "example-1", false)
		}},
		{name: "a Pod turns unready", want: map[string]int{"example": 1}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0"))
			close(l.synced)
			l.pod("MODIFIED", "example", "example-0", false)
		}},
		{name: "a Pod turns ready", want: map[string]int{"example": 1}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			l.cluster("ADDED", "example", 1, settledStatus(1, "-example-0"))
			close(l.synced)
			l.pod("MODIFIED", "example", "example-0", true)
		}},
		{name: "a listed Pod is deleted", want: map[string]int{"example": 1}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			l.cluster("ADDED", "example", 1, settledStatus(1, "-example-0"))
			close(l.synced)
			l.pod("DELETED", "example", "example-0", false)
		}},
		{name: "a status that crossed a Pod change", want: map[string]int{"example": 1}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			// The Pod turned unready while the status calling it ready
			// was on its way: the status needs no pass, the Pod does.
			close(l.synced)
			l.pod("ADDED", "example", "example-0", false)
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0"))
		}},
		{name: "a Pod the status does not list, not ready, or deleted", want: map[string]int{"example": 0}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			// A new member's Pod before the status that lists it; a
			// removed member's Pod after the status that dropped it.
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0"))
			close(l.synced)
			l.pod("ADDED", "example", "example-1", false)
			l.pod("DELETED", "example", "example-2", false)
		}},
		{name: "the operator's own status, back before its new Pods' events", want: map[string]int{"example": 0}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			// The bootstrap created example-0 and listed it in the status;
			// the Pod watch has not shown the Pod yet.
			l.ctl.cache.awaitWrite("default", "example", "pods", "example-0", pendingWrite{uid: "uid-example"})
			close(l.synced)
			l.listed()
			l.cluster("MODIFIED", "example", 1, settledStatus(1, "-example-0"))
		}},
		{name: "the operator's own Service and claim deletions, shown", want: map[string]int{"example": 0}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			// A scale-down deleted example-1's Service and PVC and awaits
			// their deletion: the watches showing it is no news.
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0"))
			cacheOwned(l.ctl.cache, "ADDED", "example-1")
			l.ctl.cache.awaitWrite("default", "example", "services", "example-1", pendingWrite{gone: true})
			l.ctl.cache.awaitWrite("default", "example", "persistentvolumeclaims", "example-1", pendingWrite{gone: true})
			close(l.synced)
			l.services <- ownedGone("example-1", nil)
			l.claims <- ownedGone("example-1", &cachedClaim{claimView: claimView{Name: "example-1"}, OwnerUID: "uid-example"})
		}},
		{name: "a Service someone else deleted", want: map[string]int{"example": 1}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0"))
			cacheOwned(l.ctl.cache, "ADDED", "example-0")
			close(l.synced)
			l.services <- ownedGone("example-0", nil)
		}},
		{name: "a claim someone else deleted", want: map[string]int{"example": 1}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0"))
			cacheOwned(l.ctl.cache, "ADDED", "example-0")
			close(l.synced)
			l.claims <- ownedGone("example-0", &cachedClaim{claimView: claimView{Name: "example-0"}, OwnerUID: "uid-example"})
		}},
		{name: "a Pod the status does not list, ready", want: map[string]int{"example": 1}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0"))
			close(l.synced)
			l.pod("MODIFIED", "example", "example-1", true)
		}},
		{name: "a Pod of no cluster", want: map[string]int{"": 0}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			close(l.synced)
			l.pod("MODIFIED", "", "stray", true)
		}},
		{name: "a deleted cluster's Pods are collected", want: map[string]int{"example": 0}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0", "+example-1"))
			close(l.synced)
			l.cluster("DELETED", "example", 1, settledStatus(1, "+example-0", "+example-1"))
			l.pod("DELETED", "example", "example-0", false)
			l.pod("DELETED", "example", "example-1", false)
		}},
		{name: "the operator's own earlier status write, late", want: map[string]int{"example": 0}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			l.cluster("ADDED", "example", 2, settledStatus(2, "+example-0"))
			creating := settledStatus(2, "-example-0")
			creating.Phase, creating.Conditions[0].Status = phaseCreating, "True"
			l.cluster("MODIFIED", "example", 2, creating)
		}},
		{name: "a listed Pod gone while the operator was down", want: map[string]int{"example": 1, "fine": 0}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			// example-1's Pod was deleted while the operator was down: no
			// event will ever say so; the Pod list, complete, does.
			l.cluster("ADDED", "example", 1, settledStatus(1, "+example-0", "+example-1"))
			l.cluster("ADDED", "fine", 1, settledStatus(1, "+fine-0", "-fine-1"))
			close(l.synced)
			l.pod("ADDED", "example", "example-0", true)
			l.pod("ADDED", "fine", "fine-0", true)
			l.pod("ADDED", "fine", "fine-1", false)
			l.listed()
			f.waitFor("the pass the Pod list calls for", func() bool { return len(about(withoutEvents(f.requests), "example")) == 1 })
		}},
		{name: "events queued behind a pass of a cluster then deleted", want: map[string]int{"example": 1}, run: func(t *testing.T, f *fakeAPI, l *loop) {
			release := make(chan struct{})
			f.setFault(func(r request) (int, string, string) {
				if r.Method == "GET" && strings.HasSuffix(r.Path, "/etcdclusters/example") {
					select {
					case <-release:
					case <-r.Ctx.Done():
					}
				}
				return 0, "", ""
			})
			close(l.synced)
			l.pod("MODIFIED", "example", "example-0", true) // a pass, which hangs
			f.waitFor("the pass", func() bool { return len(about(withoutEvents(f.requests), "example")) == 1 })
			l.cluster("MODIFIED", "example", 2, clusterStatus{}) // a new spec: queued behind it
			l.cluster("DELETED", "example", 2, clusterStatus{})
			close(release)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			l := startLoop(t, f)
			tc.run(t, f, l)
			l.finish()
			reqs := f.requestsSince(0)
			for name, want := range tc.want {
				got := about(withoutEvents(reqs), name) // "": every request
				if len(got) != want {
					t.Errorf("requests about %q: %v, want %d", name, got, want)
				}
			}
		})
	}
}

// cacheOwned puts Service and PVC name of cluster example in the cache,
// as the watches' first lists do, before the loop reads them.
func cacheOwned(c *cache, typ, name string) {
	c.apply("services", event[ownedEvent]{Type: typ, Object: ownedEvent{Namespace: "default", Name: name, Cluster: "example", OwnerUID: "uid-example"}})
	c.apply("persistentvolumeclaims", event[ownedEvent]{Type: typ, Object: ownedEvent{Namespace: "default", Name: name, Cluster: "example", OwnerUID: "uid-example",
		Claim: &cachedClaim{claimView: claimView{Name: name}, OwnerUID: "uid-example"}}})
	for _, r := range []string{"pods", "services", "persistentvolumeclaims"} {
		c.apply(r, event[ownedEvent]{Type: "LISTED"})
	}
}

// ownedGone is the DELETED event of cluster example's Service (claim nil)
// or PVC name.
func ownedGone(name string, claim *cachedClaim) event[ownedEvent] {
	return event[ownedEvent]{Type: "DELETED", Object: ownedEvent{Namespace: "default", Name: name, Cluster: "example", OwnerUID: "uid-example", Claim: claim}}
}

// A new cluster costs one pass: two lists to see what exists, its seven
// objects and one status write; the Pods' events, not a second look, start
// what comes next.
func TestNewClusterIsLookedAtOnce(t *testing.T) {
	f := newFakeAPI(t)
	f.disableNode()
	startOperator(t, f)
	f.waitFor("the watch", func() bool { return len(f.streams) == 1 })
	f.putCluster("default", "example", size(3))
	f.putCluster("default", "marker", size(1)) // one worker: done after example
	waitStatus(f, "marker", progressing("WaitingForMembers"))
	got := map[string]int{}
	for _, r := range about(withoutEvents(f.requestsSince(0)), "example") {
		method, _, _ := strings.Cut(r, " ")
		got[method]++
	}
	want := map[string]int{"POST": 10, "PATCH": 1}
	if !maps.Equal(got, want) {
		t.Errorf("requests about a new cluster of 3 = %v, want %v (4 Services, 3 PVCs and 3 Pods, one status write, no list: the pass reads the watches' cache); requests:\n%s", got, want, f.requestLog())
	}
}

func TestModifiedAndDeleted(t *testing.T) {
	for _, tc := range []struct {
		name       string
		change     func(f *fakeAPI, op *operator)
		wantReason string // "" means: no request about the cluster at all
		wantMsg    string
	}{
		{name: "same spec (a label change)", change: func(f *fakeAPI, _ *operator) { f.putCluster("default", "example", size(3)) }},
		{name: "deleted", change: func(f *fakeAPI, _ *operator) { f.deleteCluster("default", "example") }},
		{name: "deleted, then its objects garbage-collected", change: func(f *fakeAPI, op *operator) {
			uid := f.clusterUID("default", "example")
			f.deleteCluster("default", "example")
			// The collector acts on the deletion, as the operator does:
			// its Pods go once the operator has seen the cluster go.
			op.waitLog("cluster deleted")
			f.collectGarbage("default", uid)
		}},
		{
			name: "version downgraded",
			change: func(f *fakeAPI, _ *operator) {
				f.putCluster("default", "example", map[string]any{"size": 3, "version": "v3.5.21"})
			},
			wantReason: "VersionRefused",
			wantMsg:    "spec.version v3.5.21 refused: the cluster runs 3.6.16, and downgrades are not supported",
		},
		{
			name: "version skips a minor",
			change: func(f *fakeAPI, _ *operator) {
				f.putCluster("default", "example", map[string]any{"size": 3, "version": "v3.8.0"})
			},
			wantReason: "VersionRefused",
			wantMsg:    "spec.version v3.8.0 refused: etcd upgrades one minor version at a time, and the cluster runs 3.6.16; go to v3.7.x first",
		},
		{
			name: "version not a version",
			change: func(f *fakeAPI, _ *operator) {
				f.putCluster("default", "example", map[string]any{"size": 3, "version": "latest"})
			},
			wantReason: "VersionRefused",
			wantMsg:    "spec.version latest refused: not a version",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, op := idleExample(t)
			mark := f.requestCount()

			tc.change(f, op)
			f.putCluster("default", "marker", size(1))
			waitStatus(f, "marker", inPhase(phaseRunning))

			want := []string{"example-0", "example-1", "example-2", "marker-0"}
			if strings.Contains(tc.name, "garbage") {
				want = want[3:]
			}
			if got := f.objectNames("pods"); !slices.Equal(got, want) {
				t.Errorf("pods = %v, want %v", got, want)
			}
			var posts []string
			for _, r := range f.requestsSince(mark) {
				if r.Method == "POST" && !strings.HasSuffix(r.Path, "/events") && strings.Contains(r.Body, `"example`) {
					posts = append(posts, r.Path)
				}
			}
			if len(posts) > 0 {
				t.Errorf("POSTed objects for example after the change: %v", posts)
			}
			if tc.wantReason == "" {
				if reqs := about(f.requestsSince(mark), "example"); len(reqs) > 0 {
					t.Errorf("requests about example after the change: %v", reqs)
				}
				return
			}
			st := statusOf(f.cluster("default", "example"))
			if st.Phase != phaseRunning || st.ObservedGeneration != 2 || !strings.Contains(st.Message, tc.wantMsg) {
				t.Errorf("status = %+v, want Running, observedGeneration 2 and a message with %q", st, tc.wantMsg)
			}
			if p, _ := st.condition(condProgressing); p.Status != "False" || p.Reason != tc.wantReason {
				t.Errorf("Progressing = %+v, want False with reason %s", p, tc.wantReason)
			}
			for _, r := range f.requestsSince(mark) {
				if r.Method == "PATCH" && strings.Contains(r.Path, "/pods/") || r.Method == "DELETE" || regexp.MustCompile(`/member/(add|remove|promote)`).MatchString(r.Path) {
					t.Errorf("a refused version touched the cluster: %s %s", r.Method, r.Path)
				}
			}
			f.waitFor("a "+tc.wantReason+" event", func() bool {
				return slices.ContainsFunc(f.events, func(ev map[string]any) bool { return ev["reason"] == tc.wantReason })
			})
		})
	}
}

// A watch that lags delivers the operator's own status writes after it has
// finished: "Creating" arrives when the cluster is already Created. Such
// stale events of a generation already handled must cost nothing; acting on
// them would write "Creating" and "Created" again, and loop.
func TestLaggingWatchCausesNoRework(t *testing.T) {
	f := newFakeAPI(t)
	// Pods that never run: only the cluster events (the lagging ones)
	// could cause work.
	f.disableNode()
	var once sync.Once
	f.fault = func(r request) (int, string, string) {
		if r.Method == "PATCH" {
			once.Do(f.lag) // from the first status write on
		}
		return 0, "", ""
	}
	startOperator(t, f)
	f.waitFor("the watch", func() bool { return len(f.streams) == 1 })
	f.putCluster("default", "example", size(3))
	waitStatus(f, "example", progressing("WaitingForMembers"))
	f.waitFor("the event of the creation", func() bool { return len(f.events) == 1 })
	mark := f.requestCount()
	f.catchUp()
	f.putCluster("default", "marker", size(1))
	waitStatus(f, "marker", progressing("WaitingForMembers"))
	// A cluster waiting for its members is looked at again every 2s; such
	// a pass reads the cluster first and writes nothing. A pass for a
	// stale event would start without reading it, and write its status.
	reads, passes := 0, 0
	for _, r := range f.requestsSince(mark) {
		switch {
		case r.Method == "GET" && r.Path == "/apis/coreos.com/v1/namespaces/default/etcdclusters/example":
			reads++
		case r.Method == "GET" && r.Path == "/api/v1/namespaces/default/pods" && strings.HasSuffix(r.Query.Get("labelSelector"), "=example"):
			passes++
		case r.Method != "GET" && !strings.HasSuffix(r.Path, "/events") && (strings.Contains(r.Path, "example") || strings.Contains(r.Body, `"example`)):
			t.Errorf("stale events of a handled generation caused a write: %s %s", r.Method, r.Path)
		}
	}
	if passes > reads {
		t.Errorf("stale events of a handled generation caused %d passes (%d after reading the cluster)", passes, reads)
	}
}

// After a restart, the list replays every cluster as ADDED. That must not
// create anything: with the status written it costs no request at all; with
// the status lost, the POSTs are answered 409 and nothing new exists.
func TestRestartCreatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name         string
		loseStatus   bool
		wantRequests bool
	}{
		{name: "status says Created", loseStatus: false, wantRequests: false},
		{name: "status lost", loseStatus: true, wantRequests: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, op := startExample(t)
			waitStatus(f, "example", inPhase(phaseRunning))
			op.stop()
			before := map[string]any{}
			for _, r := range []string{"services", "pods"} {
				for _, n := range f.objectNames(r) {
					before[r+"/"+n] = f.object(r, "default", n)["metadata"].(map[string]any)["uid"]
				}
			}
			if tc.loseStatus {
				f.mu.Lock()
				delete(f.clusters["default/example"], "status")
				f.mu.Unlock()
			}
			mark := f.requestCount()

			startOperator(t, f)
			f.waitFor("the restarted operator to watch", func() bool { return len(f.streams) == 1 })
			f.putCluster("default", "marker", size(1))
			waitStatus(f, "marker", inPhase(phaseRunning))
			if tc.loseStatus {
				waitStatus(f, "example", inPhase(phaseRunning))
			}

			reqs := about(f.requestsSince(mark), "example")
			if !tc.wantRequests && len(reqs) > 0 {
				t.Errorf("replay of a created cluster sent requests: %v", reqs)
			}
			after := map[string]any{}
			for _, r := range []string{"services", "pods"} {
				for _, n := range f.objectNames(r) {
					if !strings.HasPrefix(n, "marker") {
						after[r+"/"+n] = f.object(r, "default", n)["metadata"].(map[string]any)["uid"]
					}
				}
			}
			if !jsonEqual(before, after) {
				t.Errorf("objects changed across restart:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// A restart over clusters whose Pods never run (no node, or unschedulable)
// costs the list pages and nothing else: their status says they wait for
// their members, and only the Pod watch can change that.
func TestRestartOverWaitingClustersIsFree(t *testing.T) {
	f := newFakeAPI(t)
	f.disableNode()
	f.putCluster("default", "example", size(3))
	op := startOperator(t, f)
	waitStatus(f, "example", progressing("WaitingForMembers"))
	op.stop()
	mark := f.requestCount()
	startOperator(t, f)
	f.putCluster("default", "marker", size(1))
	waitStatus(f, "marker", progressing("WaitingForMembers"))
	if reqs := about(withoutEvents(f.requestsSince(mark)), "example"); len(reqs) > 0 {
		t.Errorf("the restart sent requests about a cluster that waits for its Pods: %v", reqs)
	}
}

// The Pod filter, as a rulebook: which member Pod events lead to a pass.
func TestPodNews(t *testing.T) {
	for _, tc := range []struct {
		name, readiness, typ, pod string
		ready, want               bool
	}{
		{"ready, as the status says", " +a-0 -a-1", "MODIFIED", "a-0", true, false},
		{"unready, as the status says", " +a-0 -a-1", "MODIFIED", "a-1", false, false},
		{"turns unready", " +a-0 -a-1", "MODIFIED", "a-0", false, true},
		{"turns ready", " +a-0 -a-1", "MODIFIED", "a-1", true, true},
		{"a listed Pod deleted", " +a-0 -a-1", "DELETED", "a-1", false, true},
		{"an unlisted Pod deleted (a removed member's)", " +a-0", "DELETED", "a-3", false, false},
		{"an unlisted Pod, not ready yet (just created)", " +a-0", "ADDED", "a-3", false, false},
		{"an unlisted Pod, ready", " +a-0", "MODIFIED", "a-3", true, true},
		{"a name that is a prefix of a listed one", " +a-10", "MODIFIED", "a-1", false, false},
		{"no status yet", "", "ADDED", "a-0", false, false},
	} {
		if got := podNews(tc.readiness, tc.typ, tc.pod, tc.ready); got != tc.want {
			t.Errorf("%s: podNews(%q, %s, %s, ready=%v) = %v, want %v", tc.name, tc.readiness, tc.typ, tc.pod, tc.ready, got, tc.want)
		}
	}
}

// A Pod in trouble is news whatever its readiness; one starting up is not.
func TestInTrouble(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  podView
		want bool
	}{
		{"running", podView{Phase: "Running"}, false},
		{"pending, not scheduled yet", podView{Phase: "Pending"}, false},
		{"creating its container", podView{Phase: "Pending", Waiting: "ContainerCreating"}, false},
		{"initializing", podView{Phase: "Pending", Waiting: "PodInitializing"}, false},
		{"in a crash loop", podView{Phase: "Running", Waiting: "CrashLoopBackOff"}, true},
		{"its image does not pull", podView{Phase: "Pending", Waiting: "ErrImagePull"}, true},
		{"evicted", podView{Phase: "Failed"}, true},
		{"an init container that cannot run", podView{Phase: "Pending", Init: "init container fetch-backup: CrashLoopBackOff"}, true},
	} {
		if got := inTrouble(&cachedPod{podView: tc.pod}); got != tc.want {
			t.Errorf("%s: inTrouble(%+v) = %v, want %v", tc.name, tc.pod, got, tc.want)
		}
	}
}

// A status disagrees with the Pods when it calls one ready that is not, or
// the other way, or lists one that has no Pod; before every Pod is listed,
// only Pods seen count.
func TestDisagrees(t *testing.T) {
	seen := map[string]bool{"a-0": true, "a-1": false}
	ready := func(name string) (bool, bool) { r, ok := seen[name]; return r, ok }
	for _, tc := range []struct {
		readiness string
		allSeen   bool
		want      bool
	}{
		{" +a-0 -a-1", false, false},
		{" +a-0 +a-1", false, true},
		{" -a-0 -a-1", false, true},
		{" +a-0 +a-2", false, false}, // a-2 not seen yet
		{" +a-0 +a-2", true, true},   // a-2 is gone: every Pod was listed
		{" +a-0 -a-2", false, false},
		{" +a-0 -a-2", true, true}, // an unready member whose Pod went while the operator was down
	} {
		if got := disagrees(tc.readiness, ready, tc.allSeen); got != tc.want {
			t.Errorf("disagrees(%q, allSeen=%v) = %v, want %v", tc.readiness, tc.allSeen, got, tc.want)
		}
	}
}
