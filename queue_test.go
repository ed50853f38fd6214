package main

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func queued(name string, gen int64, refresh bool) item {
	return item{cluster: &EtcdCluster{Metadata: objectMeta{Namespace: "default", Name: name, UID: "uid-" + name, Generation: gen}}, refresh: refresh}
}

// drain takes every item that is ready, handling each at once, and says
// what it took: "name/generation", with " refresh" when asked to read
// again. It fails the test if busy, held by another worker, is handed out.
func drain(t *testing.T, q *queue, busy string) []string {
	var got []string
	for {
		q.mu.Lock()
		n := len(q.order)
		q.mu.Unlock()
		if n == 0 {
			return got
		}
		it, _ := q.get()
		if it.cluster.Metadata.Name == busy {
			t.Fatalf("%s handed to a second worker while the first holds it", busy)
		}
		s := fmt.Sprintf("%s/%d", it.cluster.Metadata.Name, it.cluster.Metadata.Generation)
		if it.refresh {
			s += " refresh"
		}
		got = append(got, s)
		q.done(it, it.cluster, nil)
	}
}

// A cluster is handed to one worker at a time; what arrives meanwhile is
// folded into its newest item, and a generation already handled is dropped.
func TestQueueFoldsAndDrops(t *testing.T) {
	for _, tc := range []struct {
		name   string
		during []item // added while the first item (a/1) is being worked on
		after  []item // added once it is done
		want   []string
	}{
		{name: "nothing else", want: []string{"a/1"}},
		{name: "its own generation, during the work", during: []item{queued("a", 1, false)}, want: []string{"a/1"}},
		{name: "its own generation, after the work", after: []item{queued("a", 1, false)}, want: []string{"a/1"}},
		{name: "a new generation", during: []item{queued("a", 2, false)}, want: []string{"a/1", "a/2"}},
		{name: "folded into the newest", during: []item{queued("a", 2, false), queued("a", 3, false)}, want: []string{"a/1", "a/3"}},
		{name: "a new generation after the work", after: []item{queued("a", 2, false)}, want: []string{"a/1", "a/2"}},
		{name: "read again, during the work", during: []item{queued("a", 1, true)}, want: []string{"a/1", "a/1 refresh"}},
		{name: "read again, after the work", after: []item{queued("a", 1, true)}, want: []string{"a/1", "a/1 refresh"}},
		// A Pod's event (no generation: the Pod does not know it) asks
		// for a fresh read; the cluster's own status write, back after it,
		// must not replace that with an item to drop.
		{name: "read again, then an event of a handled generation", during: []item{queued("a", 0, true), queued("a", 1, false)}, want: []string{"a/1", "a/1 refresh"}},
		{name: "another cluster is not held up", during: []item{queued("b", 1, false), queued("a", 2, false)}, want: []string{"a/1", "b/1", "a/2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue()
			q.add(queued("a", 1, false))
			first, _ := q.get()
			got := []string{"a/1"}
			for _, it := range tc.during {
				q.add(it)
			}
			// While a/1 is worked on, a second worker gets only other clusters.
			got = append(got, drain(t, q, "a")...)
			q.done(first, first.cluster, nil)
			got = append(got, drain(t, q, "")...)
			for _, it := range tc.after {
				q.add(it)
			}
			got = append(got, drain(t, q, "")...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("handled %v, want %v", got, tc.want)
			}
		})
	}
}

// Failures in a row double the delay up to 5 minutes; a success, or the
// cluster's deletion, starts again from 1 s; clusters count apart.
func TestRetryBackoff(t *testing.T) {
	q := newQueue()
	fail := func(name string, err error) string {
		q.add(queued(name, 1, true))
		it, _ := q.get()
		failures, _ := q.done(it, it.cluster, err)
		if err == nil {
			return ""
		}
		return retryDelay(failures).String()
	}
	refused := errors.New("refused")
	var got []string
	for range 11 {
		got = append(got, fail("a", refused))
	}
	want := []string{"1s", "2s", "4s", "8s", "16s", "32s", "1m4s", "2m8s", "4m16s", "5m0s", "5m0s"}
	if !slices.Equal(got, want) {
		t.Errorf("delays after 1 to 11 failures = %v, want %v", got, want)
	}
	if d := fail("b", refused); d != "1s" {
		t.Errorf("another cluster's first failure: retry in %s, want 1s", d)
	}
	fail("a", nil)
	if d := fail("a", refused); d != "1s" {
		t.Errorf("a failure after a success: retry in %s, want 1s", d)
	}
	fail("a", refused)
	q.forget(queued("a", 1, false).cluster)
	if _, kept := q.handled[uidOf(queued("a", 1, false).cluster)]; kept {
		t.Error("the queue keeps the generation of a deleted cluster")
	}
	if d := fail("a", refused); d != "1s" {
		t.Errorf("a failure after the cluster was deleted and made again: retry in %s, want 1s", d)
	}
}

// addAfter hands the item out once its delay has passed, not before.
func TestAddAfter(t *testing.T) {
	q := newQueue()
	start := time.Now()
	q.addAfter(queued("a", 1, true), 50*time.Millisecond)
	it, ok := q.get()
	if !ok || !it.refresh || it.cluster.Metadata.Name != "a" {
		t.Fatalf("get = %+v, %v", it, ok)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("handed out after %v, before its 50ms", d)
	}
}

// After shutdown, the workers get what was queued before, then nothing:
// adds (a retry's timer firing late) are ignored.
func TestQueueShutdown(t *testing.T) {
	q := newQueue()
	q.add(queued("a", 1, false))
	q.shutdown()
	q.add(queued("b", 1, false))
	if it, ok := q.get(); !ok || it.cluster.Metadata.Name != "a" {
		t.Errorf("get after shutdown = %+v, %v; want the item queued before", it, ok)
	}
	got := make(chan bool)
	go func() { _, ok := q.get(); got <- ok }()
	if <-got {
		t.Error("get returned an item added after shutdown")
	}
}

// A cluster whose requests hang does not hold up the others: the workers
// are a pool, not a line.
func TestSlowClusterDoesNotBlockOthers(t *testing.T) {
	f := newFakeAPI(t)
	release := make(chan struct{})
	f.fault = func(r request) (int, string, string) {
		if r.Method == "POST" && strings.Contains(r.Body, `"name":"slow-0"`) {
			select {
			case <-release:
			case <-r.Ctx.Done():
			}
		}
		return 0, "", ""
	}
	f.putCluster("default", "slow", size(1))
	startOperator(t, f, "-workers", "4")
	f.waitFor("slow's first POST", func() bool { return f.countLocked("POST", "/api/v1/namespaces/default/services") == 1 })
	for i := range 5 {
		f.putCluster("default", fmt.Sprintf("fast%d", i), size(1))
	}
	for i := range 5 {
		waitStatus(f, fmt.Sprintf("fast%d", i), inPhase(phaseRunning))
	}
	if statusOf(f.cluster("default", "slow")).Phase != "" {
		t.Error("slow finished while its requests hung")
	}
	close(release)
	waitStatus(f, "slow", inPhase(phaseRunning))
}

// A retry acts on the cluster as it is, not as it was when it failed: one
// deleted while its retry waits is read again, found gone, and left alone.
func TestRetryReadsTheClusterAgain(t *testing.T) {
	f := newFakeAPI(t)
	f.setFault(func(r request) (int, string, string) {
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/pods") {
			return http.StatusForbidden, "", "pods is forbidden"
		}
		return 0, "", ""
	})
	f.putCluster("default", "example", size(1))
	startOperator(t, f)
	waitStatus(f, "example", inPhase(phaseFailed))
	mark := f.requestCount()
	f.deleteCluster("default", "example")
	f.waitFor("the retry", func() bool { return len(about(withoutEvents(f.requests[mark:]), "example")) > 0 })
	want := []string{"GET /apis/coreos.com/v1/namespaces/default/etcdclusters/example"}
	if got := about(withoutEvents(f.requestsSince(mark)), "example"); !slices.Equal(got, want) {
		t.Errorf("the retry after the cluster was deleted sent %v, want only %v", got, want)
	}
}

// idle's channel closes once nothing waits for a worker and nothing is in
// hand: at once on an empty queue, not while an item waits or is worked
// on, and on shutdown.
func TestQueueIdle(t *testing.T) {
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	q := newQueue()
	if !isClosed(q.idle()) {
		t.Error("an empty queue is not idle")
	}
	q.add(queued("a", 1, false))
	q.add(queued("b", 1, false))
	waiting := q.idle()
	if isClosed(waiting) {
		t.Fatal("idle while two clusters wait")
	}
	a, _ := q.get()
	q.done(a, a.cluster, nil)
	if isClosed(waiting) {
		t.Fatal("idle while b waits")
	}
	b, _ := q.get()
	if isClosed(waiting) || isClosed(q.idle()) {
		t.Fatal("idle while b is worked on")
	}
	q.done(b, b.cluster, nil)
	if !isClosed(waiting) {
		t.Error("not idle once a and b are done")
	}
	q.add(queued("c", 1, false))
	stopping := q.idle()
	q.shutdown()
	if !isClosed(stopping) {
		t.Error("a queue shut down is still not idle")
	}
}

// A cluster whose pass keeps failing is retried after a delay that
// doubles, 1 s then 2 s (retryDelay), through the real path: the pass
// fails on the fake (403 on every create), queue.done counts the failure
// and the worker schedules the retry. Each attempt comes no sooner than
// the delay after the one before it: a broken cluster cannot flood the API
// server. A timer never fires early, so these lower bounds cannot flake.
func TestFailingPassBacksOff(t *testing.T) {
	f := newFakeAPI(t)
	const create = "/api/v1/namespaces/default/services"
	f.setFault(func(r request) (int, string, string) {
		if r.Method == "POST" && r.Path == create {
			return http.StatusForbidden, "", `services is forbidden: User "system:serviceaccount:ops:etcd-operator" cannot create resource "services"`
		}
		return 0, "", ""
	})
	f.putCluster("default", "example", size(1))
	op := startOperator(t, f)
	// The first pass and two retries: the delays are 1 s and 2 s.
	want := []time.Duration{time.Second, 2 * time.Second}
	f.waitFor("three attempts", func() bool { return f.countExactLocked("POST", create) == len(want)+1 })
	op.stop()
	var at []time.Time
	for _, r := range f.requestsSince(0) {
		if r.Method == "POST" && r.Path == create {
			at = append(at, r.At)
		}
	}
	if len(at) != len(want)+1 {
		t.Fatalf("%d attempts, want %d", len(at), len(want)+1)
	}
	for i, d := range want {
		if gap := at[i+1].Sub(at[i]); gap < d {
			t.Errorf("attempt %d came %v after attempt %d, want at least %v", i+2, gap.Round(time.Millisecond), i+1, d)
		}
	}
}
