// Tests of list-then-watch: a list read page by page, in one namespace or
// all, with a hint when the first list fails; a watch resumed from the last
// resourceVersion after the server ends it, a list again after 410 Expired,
// and a watch that went silent replaced.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

// Listing reads page by page and watches from the list's resourceVersion.
func TestListPages(t *testing.T) {
	f := newFakeAPI(t)
	for i := range 5 {
		f.putCluster("default", fmt.Sprintf("c%d", i), size(1))
	}
	listRV := fmt.Sprint(f.rv)
	startOperator(t, f, "-page-size", "2", "-workers", "4")
	for i := range 5 {
		waitStatus(f, fmt.Sprintf("c%d", i), inPhase(phaseRunning))
	}
	var pages, watchRV []string
	for _, r := range f.requestsSince(0) {
		if r.Method == "GET" && strings.HasSuffix(r.Path, "/etcdclusters") {
			if r.Query.Get("watch") != "" {
				watchRV = append(watchRV, r.Query.Get("resourceVersion"))
			} else {
				pages = append(pages, r.Query.Get("limit")+":"+r.Query.Get("continue"))
			}
		}
	}
	if want := []string{"2:", "2:2:" + listRV, "2:4:" + listRV}; !slices.Equal(pages, want) {
		t.Errorf("list pages (limit:continue) = %v, want %v", pages, want)
	}
	if len(watchRV) == 0 || watchRV[0] != listRV {
		t.Errorf("first watch from %v, want the list's resourceVersion %s", watchRV, listRV)
	}
}

// With -namespace empty, the operator watches every namespace and creates
// each cluster's objects in the cluster's own namespace.
func TestAllNamespaces(t *testing.T) {
	f := newFakeAPI(t)
	f.putCluster("team-a", "db", size(1))
	f.putCluster("team-b", "db", size(1))
	startOperator(t, f, "-namespace", "")
	for _, ns := range []string{"team-a", "team-b"} {
		f.waitFor(ns+"/db Created", func() bool { return statusOf(f.clusters[ns+"/db"]).Phase == phaseRunning })
		if f.object("pods", ns, "db-0") == nil || f.object("services", ns, "db-client") == nil {
			t.Errorf("no objects for %s/db in %s", ns, ns)
		}
	}
	// Both clusters may be handled before the watch request arrives: wait
	// for it rather than count at once.
	f.waitFor("a list and a watch of the all-namespaces collection", func() bool {
		lists, watches := 0, 0
		for _, r := range f.requests {
			if r.Method == "GET" && r.Path == "/apis/coreos.com/v1/etcdclusters" {
				if r.Query.Get("watch") != "" {
					watches++
				} else {
					lists++
				}
			}
		}
		return lists == 1 && watches >= 1
	})
}

// A failed list tells a newcomer what to do about it.
func TestListHints(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // nothing listens on its port any more
	for _, tc := range []struct {
		name string
		base func(f *fakeAPI) string
		code int
		want string
	}{
		{name: "nothing listens", base: func(*fakeAPI) string { return closed.URL }, want: "start kubectl proxy"},
		{name: "no CRD", code: 404, want: "kubectl apply -f examples/crd.yaml"},
		{name: "no permission", code: 403, want: "the Role in examples/deploy.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			f.fault = func(request) (int, string, string) { return tc.code, "", "refused" }
			base := f.srv.URL
			if tc.base != nil {
				base = tc.base(f)
			}
			c := kube.New(base, nil)
			c.Attempts = 1
			w := &watcher[*EtcdCluster]{client: c, path: clustersPath("default"), decode: clusterRV, pageSize: 10, log: slog.New(slog.DiscardHandler)}
			_, err := w.list(context.Background(), make(chan event[*EtcdCluster]))
			if hint := listHint("etcdclusters", err); err == nil || !strings.Contains(hint, tc.want) {
				t.Errorf("list error %v: hint %q, want one with %q", err, hint, tc.want)
			}
		})
	}
}

// The watch resumes where it left off: after a clean end of stream and after
// a stream cut in the middle of an event, from the last complete event; after
// 410 Expired (as an ERROR event or as the answer to the watch request) it
// lists again. Nothing is created twice.
func TestWatchResumes(t *testing.T) {
	const expired = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (200)","reason":"Expired","code":410}}` + "\n"
	for _, tc := range []struct {
		name      string
		interrupt func(f *fakeAPI) (rv string) // rv: where the watch must resume, if not after the last event
		wantLists int
	}{
		{name: "end of stream", interrupt: func(f *fakeAPI) string { f.closeStreams(); return "" }, wantLists: 1},
		{name: "bookmark, then end of stream", wantLists: 1, interrupt: func(f *fakeAPI) string {
			// Other objects changed; the server says where the watch is now.
			rv := f.bookmark()
			f.closeStreams()
			return rv
		}},
		{name: "event cut in the middle", wantLists: 1, interrupt: func(f *fakeAPI) string {
			f.sendRaw(`{"type":"ADDED","object":{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","metadata":{"name":"half","namespace":"default","resourceVersion":"999"},"spec":{"si`)
			f.closeStreams()
			return ""
		}},
		{name: "410 ERROR event", interrupt: func(f *fakeAPI) string { f.sendRaw(expired); return "" }, wantLists: 2},
		{name: "history compacted while disconnected", wantLists: 2, interrupt: func(f *fakeAPI) string {
			f.compact()
			f.closeStreams()
			return ""
		}},
		{name: "410 answer to the watch", wantLists: 2, interrupt: func(f *fakeAPI) string {
			var once sync.Once
			f.setFault(func(r request) (int, string, string) {
				code := 0
				// The clusters' watch: the Pod watcher's first watch may
				// come only now.
				if r.Query.Get("watch") != "" && strings.HasSuffix(r.Path, "/etcdclusters") {
					once.Do(func() { code = http.StatusGone })
				}
				return code, "", "too old resource version"
			})
			f.closeStreams()
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := startExample(t)
			waitStatus(f, "example", inPhase(phaseRunning))
			f.waitFor("the watch", func() bool { return len(f.streams) == 1 })
			f.mu.Lock()
			lastRV := f.history[len(f.history)-1].Object
			watches := f.countLocked("GET", "/apis/coreos.com/v1/namespaces/default/etcdclusters")
			f.mu.Unlock()
			var last EtcdCluster
			_ = json.Unmarshal(lastRV, &last)

			resumeRV := tc.interrupt(f)
			f.waitFor("a new watch", func() bool {
				return f.countLocked("GET", "/apis/coreos.com/v1/namespaces/default/etcdclusters") > watches && len(f.streams) == 1
			})
			f.putCluster("default", "after", size(1))
			waitStatus(f, "after", inPhase(phaseRunning))

			var lists, rewatch []string
			for _, r := range f.requestsSince(0) {
				if r.Method == "GET" && r.Query.Get("watch") == "" && strings.HasSuffix(r.Path, "/etcdclusters") {
					lists = append(lists, r.Path)
				}
				if r.Query.Get("watch") != "" && strings.HasSuffix(r.Path, "/etcdclusters") {
					rewatch = append(rewatch, r.Query.Get("resourceVersion"))
				}
			}
			if len(lists) != tc.wantLists {
				t.Errorf("%d lists, want %d", len(lists), tc.wantLists)
			}
			if want := cmp.Or(resumeRV, last.Metadata.ResourceVersion); tc.wantLists == 1 && rewatch[1] != want {
				t.Errorf("re-watched from resourceVersion %s, want %s (the last complete event or bookmark)", rewatch[1], want)
			}
			if got := f.objectNames("pods"); !slices.Equal(got, []string{"after-0", "example-0", "example-1", "example-2"}) {
				t.Errorf("pods = %v", got)
			}
			if n := f.countExact("POST", "/api/v1/namespaces/default/pods"); n != 4 {
				t.Errorf("%d pod POSTs, want 4: nothing may be created twice", n)
			}
		})
	}
}

// A server that answers every watch with 410 gets a list now and then, not a
// list-watch loop: the delays between lists grow.
func TestExpiredAgainAndAgainBacksOff(t *testing.T) {
	f := newFakeAPI(t)
	f.fault = func(r request) (int, string, string) {
		if r.Query.Get("watch") != "" {
			return http.StatusGone, "", "too old resource version"
		}
		return 0, "", ""
	}
	startOperator(t, f)
	var lists []time.Time
	f.waitFor("four lists", func() bool {
		lists = nil
		for _, r := range f.requests {
			if r.Query.Get("watch") == "" && strings.HasSuffix(r.Path, "/etcdclusters") {
				lists = append(lists, r.At)
			}
		}
		return len(lists) >= 4
	})
	// The backoff starts at 500ms and doubles, each delay drawn from its
	// upper half: the third delay is at least 1s, the first at most 0.5s.
	if first, third := lists[1].Sub(lists[0]), lists[3].Sub(lists[2]); third < time.Second || third < first {
		t.Errorf("delays between lists: first %v, third %v; want a growing backoff", first, third)
	}
}

// A watch that goes silent is dropped and re-established: one whose stream
// stops sending, and one whose request is never answered at all.
func TestStalledWatchIsReplaced(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noAnswer bool
	}{
		{name: "silent stream"},
		{name: "no answer", noAnswer: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			if tc.noAnswer {
				var once sync.Once
				f.fault = func(r request) (int, string, string) {
					if r.Query.Get("watch") != "" && strings.HasSuffix(r.Path, "/etcdclusters") {
						once.Do(func() { <-r.Ctx.Done() }) // the first watch hangs
					}
					return 0, "", ""
				}
			}
			op := startOperator(t, f, "-watch-stall", "2s")
			f.waitFor("a second watch after the first stalled", func() bool {
				n := 0
				for _, r := range f.requests {
					if r.Query.Get("watch") != "" && strings.HasSuffix(r.Path, "/etcdclusters") {
						n++
					}
				}
				return n >= 2 && len(f.streams) == 1
			})
			if !strings.Contains(op.logs.String(), "watch stalled") {
				t.Error("no log line says the watch stalled")
			}
			f.putCluster("default", "example", size(1))
			waitStatus(f, "example", inPhase(phaseRunning))
		})
	}
}

// The stall bound is for silence, not for the length of a watch: every
// byte that arrives pushes it back, so a stream that sends something more
// often than the bound, for longer than the bound, is kept.
func TestSlowWatchIsNotStalled(t *testing.T) {
	f := newFakeAPI(t)
	const stall = time.Second
	c := kube.New(f.srv.URL, nil)
	w := &watcher[*EtcdCluster]{client: c, path: clustersPath("default"), decode: clusterRV, stall: stall, pageSize: 10, log: slog.New(slog.DiscardHandler)}
	type result struct {
		rv  string
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		rv, n, err := w.watch(context.Background(), "100", make(chan event[*EtcdCluster]))
		done <- result{rv, n, err}
	}()
	f.waitFor("the watch", func() bool { return len(f.streams) == 1 })
	// A bookmark every tenth of the bound, for more than twice the bound.
	tick := time.NewTicker(stall / 10)
	defer tick.Stop()
	start, sent, last := time.Now(), 0, ""
	for time.Since(start) < 2*stall+stall/5 {
		select {
		case <-tick.C:
			last = f.bookmark()
			sent++
		case r := <-done:
			t.Fatalf("the watch ended after %v while data kept coming: %v", time.Since(start).Round(time.Millisecond), r.err)
		}
	}
	f.closeStreams()
	r := <-done
	if r.err != nil || r.n != sent || r.rv != last {
		t.Errorf("watch = rv %s, %d events, %v; want rv %s, %d events, no error", r.rv, r.n, r.err, last, sent)
	}
}
