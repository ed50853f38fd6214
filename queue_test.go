// Tests of the work queue between the control loop and the workers: one
// pass of a cluster at a time, events that arrive meanwhile folded into the
// newest, a pool of workers so that a slow cluster holds up no other, and a
// failed pass retried after a backoff of its own, reading the cluster again.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The queue never runs two passes of one cluster at once: events that
// arrive during a pass wait, folded into the newest, and are dropped when
// the pass handled their generation already (the operator's own status
// writes, coming back). A request to read the cluster again is never
// dropped.
func TestQueueFoldsAndDrops(t *testing.T) {
	ec := func(gen int64) *EtcdCluster {
		return &EtcdCluster{Metadata: objectMeta{Namespace: "default", Name: "a", UID: "uid-a", Generation: gen}}
	}
	for _, tc := range []struct {
		name   string
		during []item // added while the first pass (of generation 1) runs
		after  []item // added once it is done
		want   []string
	}{
		{name: "nothing else", want: []string{"1"}},
		{name: "its own generation, during the pass", during: []item{{cluster: ec(1)}}, want: []string{"1"}},
		{name: "its own generation, after the pass", after: []item{{cluster: ec(1)}}, want: []string{"1"}},
		{name: "a new generation", during: []item{{cluster: ec(2)}}, want: []string{"1", "2"}},
		{name: "folded into the newest", during: []item{{cluster: ec(2)}, {cluster: ec(3)}}, want: []string{"1", "3"}},
		{name: "a new generation after the pass", after: []item{{cluster: ec(2)}}, want: []string{"1", "2"}},
		{name: "read again, during the pass", during: []item{{cluster: ec(1), refresh: true}}, want: []string{"1", "1 refresh"}},
		{name: "read again, after the pass", after: []item{{cluster: ec(1), refresh: true}}, want: []string{"1", "1 refresh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var calls []string
			running, most := 0, 0
			started, release := make(chan struct{}, 10), make(chan struct{})
			handle := func(_ context.Context, it item) (*EtcdCluster, time.Duration, error) {
				mu.Lock()
				s := fmt.Sprint(it.cluster.Metadata.Generation)
				if it.refresh {
					s += " refresh"
				}
				calls = append(calls, s)
				running++
				most = max(most, running)
				first := len(calls) == 1
				mu.Unlock()
				started <- struct{}{}
				if first {
					<-release
				}
				mu.Lock()
				running--
				mu.Unlock()
				return it.cluster, 0, nil
			}
			q := newQueue(4, handle, slog.New(slog.DiscardHandler))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			q.add(ctx, item{cluster: ec(1)})
			<-started
			for _, it := range tc.during {
				q.add(ctx, it)
			}
			close(release)
			q.wait()
			for _, it := range tc.after {
				q.add(ctx, it)
			}
			q.wait()
			if !slices.Equal(calls, tc.want) || most > 1 {
				t.Errorf("passes (generation) = %v, %d at once at most; want %v, one at a time", calls, most, tc.want)
			}
		})
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

// A failed cluster is retried after a delay of its own that doubles from
// 1s up to 5 minutes; the retry reads the cluster again first. A success,
// or the cluster's deletion, starts the delay over; other clusters' delays
// are their own.
func TestRetryBackoff(t *testing.T) {
	var logs syncBuffer
	var mu sync.Mutex
	failing := map[string]bool{}
	handle := func(_ context.Context, it item) (*EtcdCluster, time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		if failing[it.cluster.Metadata.Name] {
			return it.cluster, 0, errors.New("refused")
		}
		return it.cluster, 0, nil
	}
	q := newQueue(2, handle, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cluster := func(name string) *EtcdCluster {
		return &EtcdCluster{Metadata: objectMeta{Namespace: "default", Name: name, UID: "uid-" + name, Generation: 1}}
	}
	delay := regexp.MustCompile(`msg="retrying later" cluster=default/(\w+) in=(\S+)`)
	// pass handles name once, as a retry would, and returns the delay
	// before the next try ("" if none).
	pass := func(name string, fails bool) string {
		t.Helper()
		mu.Lock()
		failing[name] = fails
		mu.Unlock()
		before := len(logs.String())
		q.add(ctx, item{cluster: cluster(name), refresh: true})
		q.wait()
		for _, m := range delay.FindAllStringSubmatch(logs.String()[before:], -1) {
			if m[1] == name {
				return m[2]
			}
		}
		return ""
	}
	start := time.Now()
	var got []string
	for range 11 {
		got = append(got, pass("a", true))
	}
	want := []string{"1s", "2s", "4s", "8s", "16s", "32s", "1m4s", "2m8s", "4m16s", "5m0s", "5m0s"}
	if !slices.Equal(got, want) {
		t.Errorf("delays after 1 to 11 failures = %v, want %v", got, want)
	}
	if d := pass("b", true); d != "1s" {
		t.Errorf("another cluster's first failure: retry in %s, want 1s", d)
	}
	if d := pass("a", false); d != "" {
		t.Errorf("a success is retried in %s", d)
	}
	if d := pass("a", true); d != "1s" {
		t.Errorf("a failure after a success: retry in %s, want 1s", d)
	}
	pass("a", true)
	q.forget(cluster("a"))
	q.mu.Lock()
	_, kept := q.handled[uidOf(cluster("a"))]
	q.mu.Unlock()
	if kept {
		t.Error("the queue keeps the generation of a deleted cluster")
	}
	if d := pass("a", true); d != "1s" {
		t.Errorf("a failure after the cluster was deleted and made again: retry in %s, want 1s", d)
	}

	// The first retries come back to the control loop after 1s, marked to
	// read the cluster again.
	select {
	case it := <-q.retries:
		if !it.refresh {
			t.Errorf("retry of %s does not read the cluster again", it.cluster.key())
		}
		if d := time.Since(start); d < time.Second {
			t.Errorf("retried after %v, before its 1s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no retry within 10s")
	}
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
