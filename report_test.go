// Tests of reporting through Events: best-effort, at a rate of their own,
// and dropped quietly rather than slowing the real work down.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

// A full Event queue drops Events without blocking and without a log line
// for each: the first drop and every hundredth are logged.
func TestEventQueueFullDropsQuietly(t *testing.T) {
	var logs syncBuffer
	r := newRecorder(kube.New("http://127.0.0.1:1", nil), slog.New(slog.NewTextHandler(&logs, nil)))
	ec := &EtcdCluster{Metadata: objectMeta{Name: "example", Namespace: "default", UID: "u"}}
	for range cap(r.queue) + 250 { // nobody runs r.run: the queue fills up
		r.record(ec, eventNormal, reasonMemberCreated, "m")
	}
	if got := strings.Count(logs.String(), "event queue full"); got != 3 {
		t.Errorf("%d log lines for 250 dropped events, want 3 (the 1st, 100th and 200th):\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "droppedSoFar=200") {
		t.Errorf("the log does not count the drops:\n%s", logs.String())
	}
}

// Events have a rate limit of their own, 10 a second after a burst of 25,
// whatever the client's -qps allows: the first 25 go at once, the next
// ones a tenth of a second apart.
func TestEventRateLimit(t *testing.T) {
	f := newFakeAPI(t)
	r := newRecorder(kube.New(f.srv.URL, nil), slog.New(slog.DiscardHandler)) // a client with no limit
	ec := &EtcdCluster{Metadata: objectMeta{Name: "example", Namespace: "default", UID: "u"}}
	const n = 30
	for i := range n {
		r.record(ec, eventNormal, reasonMemberCreated, fmt.Sprint(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); r.run(ctx, nil) }()
	defer func() { cancel(); <-stopped }()
	f.waitFor(fmt.Sprint(n, " events"), func() bool { return len(f.events) == n })
	var at []time.Time
	for _, req := range f.requestsSince(0) {
		if req.Method == "POST" && strings.HasSuffix(req.Path, "/events") {
			at = append(at, req.At)
		}
	}
	burst, paced := at[24].Sub(at[0]), at[n-1].Sub(at[24])
	// 5 after the burst at 10/s: 500ms, less a little for the clock.
	if paced < 450*time.Millisecond {
		t.Errorf("events 26 to %d took %v; at 10/s they take 500ms", n, paced)
	}
	if burst >= paced {
		t.Errorf("the first 25 events took %v, the next 5 %v; want the 25 at once", burst, paced)
	}
}

// Events wait while the work queue is busy, so that a burst of clusters
// gets its objects first, and go once it is idle, or after the recorder's
// patience if it never is.
func TestEventsWaitForTheWork(t *testing.T) {
	for _, tc := range []struct {
		name     string
		patience time.Duration
		idleSoon bool
	}{
		{"the queue turns idle", time.Hour, true},
		{"the queue stays busy", 50 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			r := newRecorder(kube.New(f.srv.URL, nil), slog.New(slog.DiscardHandler))
			r.patience = tc.patience
			q := newQueue()
			q.add(queued("busy", 1, false))
			it, _ := q.get()
			asked := make(chan struct{}, 1)
			idle := func() <-chan struct{} {
				ch := q.idle()
				asked <- struct{}{}
				return ch
			}
			ec := &EtcdCluster{Metadata: objectMeta{Name: "example", Namespace: "default", UID: "u"}}
			r.record(ec, eventNormal, reasonMemberCreated, "m")
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan struct{})
			go func() { defer close(stopped); r.run(ctx, idle) }()
			defer func() { cancel(); <-stopped }()
			select {
			case <-asked:
			case <-time.After(10 * time.Second):
				t.Fatal("the recorder did not ask whether the work queue is idle")
			}
			if tc.idleSoon {
				f.mu.Lock()
				n := len(f.events)
				f.mu.Unlock()
				if n != 0 {
					t.Fatalf("%d Events posted while the queue was busy", n)
				}
				q.done(it, it.cluster, nil)
			}
			f.waitFor("the Event", func() bool { return len(f.events) == 1 })
		})
	}
}
