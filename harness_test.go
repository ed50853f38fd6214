// The test harness: the operator against the fake API server
// (fakeapi_test.go), at three depths, each built on the one below:
//
//   - newController: the controller alone; the test calls its passes and
//     steps itself.
//   - startLoop: the control loop and its workers, fed the watch events
//     the test hands it.
//   - startOperator: the whole operator as main runs it, flags, watchers
//     and all.
//
// and one set of helpers: clusters to start from (startExample and the
// states built on it), waitStatus to wait for what a cluster's status says,
// and requestCount, requestsSince and about to look at the requests the
// operator sent.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// newController is the operator's controller on the fake, without its
// loop and without a cache (so a pass lists): a test calls its passes and
// steps itself. Its Events stay queued.
func newController(f *fakeAPI) *controller {
	c := kube.New(f.srv.URL, nil)
	log := slog.New(slog.DiscardHandler)
	return &controller{client: c, log: log, image: repo, events: newRecorder(c, log)}
}

// loop runs the control loop alone on events a test hands it, one at a
// time and in order, against a fake API server. A pass for a cluster the
// fake does not hold costs one GET (404) when it reads the cluster first,
// more when it acts on the event's object.
type loop struct {
	ctl                    *controller
	clusters               chan event[*EtcdCluster]
	pods, services, claims chan event[ownedEvent]
	synced                 chan struct{}
	done                   chan struct{}
	finishOnce             sync.Once
}

// startLoop runs newController's loop with one worker.
func startLoop(t *testing.T, f *fakeAPI) *loop {
	t.Helper()
	ctl := newController(f)
	ctl.cache = newCache()
	l := &loop{ctl: ctl, clusters: make(chan event[*EtcdCluster]), pods: make(chan event[ownedEvent]),
		services: make(chan event[ownedEvent]), claims: make(chan event[ownedEvent]), synced: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(l.done)
		ctl.run(ctx, newQueue(), l.clusters, l.pods, l.services, l.claims, l.synced, 1)
	}()
	t.Cleanup(func() { l.finish(); cancel() })
	return l
}

// finish ends the watches' channels and waits until the loop and its
// workers are done: every pass the events started has been made.
func (l *loop) finish() {
	l.finishOnce.Do(func() {
		close(l.clusters)
		close(l.pods)
		close(l.services)
		close(l.claims)
	})
	<-l.done
}

// cluster hands the loop a watch event of cluster default/name (spec size
// 3) at generation gen with status st.
func (l *loop) cluster(typ, name string, gen int64, st clusterStatus) {
	raw := mustJSON(st)
	l.clusters <- event[*EtcdCluster]{Type: typ, Object: &EtcdCluster{
		Metadata: objectMeta{Namespace: "default", Name: name, UID: "uid-" + name, Generation: gen},
		Spec:     json.RawMessage(`{"size":3}`), Status: raw}}
}

// pod hands the loop a watch event of a member Pod of cluster.
func (l *loop) pod(typ, cluster, name string, ready bool) {
	l.pods <- event[ownedEvent]{Type: typ, Object: ownedEvent{Namespace: "default", Name: name, Cluster: cluster,
		OwnerUID: "uid-" + cluster, Pod: &cachedPod{podView: podView{Name: name, Ready: ready}, OwnerUID: "uid-" + cluster}}}
}

// listed ends the first list of Pods, Services and PVCs.
func (l *loop) listed() {
	l.pods <- event[ownedEvent]{Type: "LISTED"}
	l.services <- event[ownedEvent]{Type: "LISTED"}
	l.claims <- event[ownedEvent]{Type: "LISTED"}
}

// operator is one run of the operator against a fake API server.
type operator struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
	// endpoint is this operator's own address of the fake API server:
	// closing it when the operator stops cuts off whatever the operator
	// sent and the fake has not read yet.
	endpoint  *httptest.Server
	closeOnce sync.Once
}

// startOperator runs the operator as main would, with flags. One worker
// unless the test says otherwise, so that events are handled in order and a
// test can use a later cluster as a marker that earlier ones are done.
func startOperator(t *testing.T, f *fakeAPI, flags ...string) *operator {
	t.Helper()
	endpoint := httptest.NewServer(http.HandlerFunc(f.serve))
	args := append([]string{"-master", endpoint.URL, "-workers", "1"}, flags...)
	cfg, err := parseFlags(args, io.Discard)
	if err != nil {
		endpoint.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{t: t, cancel: cancel, done: make(chan error, 1), logs: &syncBuffer{}, endpoint: endpoint}
	log := slog.New(slog.NewTextHandler(op.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() { op.done <- run(ctx, cfg, log) }()
	t.Cleanup(func() {
		op.stop()
		if t.Failed() {
			t.Logf("operator log:\n%s", op.logs.String())
		}
	})
	return op
}

// stop cancels the operator and waits for run to return. Then nothing it
// sent can still reach the fake: a request cancelled on the operator's side
// may yet be on its way (an Event, a read), so the operator's endpoint is
// closed, which drops what the fake has not read and waits for what it is
// serving.
func (op *operator) stop() {
	op.t.Helper()
	op.cancel()
	select {
	case err := <-op.done:
		if err != nil {
			op.t.Errorf("run: %v", err)
		}
		op.done <- nil // a second stop returns at once
	case <-time.After(10 * time.Second):
		op.t.Fatal("operator did not stop within 10s of cancellation")
	}
	op.closeOnce.Do(op.endpoint.Close)
}

// waitLog waits until the operator has logged a line containing text.
func (op *operator) waitLog(text string) {
	op.t.Helper()
	op.waitLogs(text, 1)
}

// logged counts the operator's log lines containing text.
func (op *operator) logged(text string) int {
	return strings.Count(op.logs.String(), text)
}

// waitLogs waits until the operator has logged n lines containing text.
func (op *operator) waitLogs(text string, n int) {
	op.t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		op.logs.mu.Lock()
		found := strings.Count(op.logs.b.String(), text) >= n
		if op.logs.changed == nil {
			op.logs.changed = make(chan struct{})
		}
		ch := op.logs.changed
		op.logs.mu.Unlock()
		if found {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			op.t.Fatalf("timed out waiting for a log line with %q", text)
		}
	}
}

// syncBuffer is a log that the operator writes while a test reads it.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// size is a spec of n members and the default version.
func size(n int) map[string]any { return map[string]any{"size": n} }

// startExample starts an operator on a fake API server that holds a
// 3-member cluster named example.
func startExample(t *testing.T) (*fakeAPI, *operator) {
	t.Helper()
	return startExampleWith(t, size(3))
}

// startExampleWith is startExample with the given spec.
func startExampleWith(t *testing.T, spec any) (*fakeAPI, *operator) {
	t.Helper()
	f := newFakeAPI(t)
	f.putCluster("default", "example", spec)
	return f, startOperator(t, f)
}

// onEmptyDir is a spec of n members whose data is on emptyDir.
func onEmptyDir(n int) map[string]any {
	return map[string]any{"size": n, "storage": map[string]any{"emptyDir": true}}
}

// idleExample is startExample with an operator that has nothing left to
// do: whatever it sends next is caused by what the test does. The operator
// that created the cluster may still be in a pass when the status says
// Running (for Pod events that crossed its own status writes), so it is
// stopped once its Events are in, and a new one started over the settled
// cluster, which sends nothing about it (TestRestartCreatesNothing).
func idleExample(t *testing.T) (*fakeAPI, *operator) {
	t.Helper()
	f, op := startExample(t)
	waitStatus(f, "example", inPhase(phaseRunning))
	f.waitFor("the event of the creation", func() bool { return len(f.events) == 1 })
	op.stop()
	op = startOperator(t, f)
	f.waitFor("the new operator to watch clusters, Pods, Services and PVCs", func() bool {
		return len(f.streams) == 1 && len(f.podStreams) == 1 && len(f.svcStreams) == 1 && len(f.pvcStreams) == 1
	})
	return f, op
}

// settledExample is startExample with the given spec changes applied in
// turn, once the status reports the last one and with the operator
// stopped: the cluster is as a pass finds it.
func settledExample(t *testing.T, specs []any, reported statusCheck) *fakeAPI {
	t.Helper()
	f, op := startExample(t)
	waitStatus(f, "example", running(3))
	for _, s := range specs {
		f.putCluster("default", "example", s)
	}
	waitStatus(f, "example", reported)
	op.stop()
	return f
}

// statusOf is the status of a cluster object as the fake holds it.
func statusOf(obj map[string]any) clusterStatus {
	var st clusterStatus
	_ = json.Unmarshal(mustJSON(obj["status"]), &st)
	return st
}

// A statusCheck is what a test waits for in a cluster's status, and the
// words for it should the wait time out.
type statusCheck struct {
	what string
	ok   func(st clusterStatus) bool
}

// inPhase is a status in the given phase.
func inPhase(phase string) statusCheck {
	return statusCheck{"phase " + phase, func(st clusterStatus) bool { return st.Phase == phase }}
}

// running is a status that says Running with all size members ready.
func running(size int) statusCheck {
	return statusCheck{fmt.Sprintf("Running %d/%d", size, size), func(st clusterStatus) bool {
		return st.Phase == phaseRunning && st.Ready == fmt.Sprintf("%d/%d", size, size) && st.ObservedGeneration > 0
	}}
}

// progressing is a status whose Progressing condition has the reason.
func progressing(reason string) statusCheck {
	return statusCheck{"Progressing " + reason, func(st clusterStatus) bool {
		p, _ := st.condition(condProgressing)
		return p.Reason == reason
	}}
}

// waitStatus waits until the status of cluster default/name passes c, and
// returns the status that did.
func waitStatus(f *fakeAPI, name string, c statusCheck) clusterStatus {
	f.t.Helper()
	var st clusterStatus
	f.waitFor(name+": "+c.what, func() bool {
		st = statusOf(f.clusters["default/"+name])
		return c.ok(st)
	})
	return st
}

// settledStatus is a status with nothing to do for generation gen, whose
// members are "+name" (ready) or "-name".
func settledStatus(gen int64, members ...string) clusterStatus {
	st := clusterStatus{ObservedGeneration: gen, Phase: phaseRunning,
		Conditions: []condition{{Type: condProgressing, Status: "False", Reason: "Idle"}}}
	for _, m := range members {
		st.Members = append(st.Members, memberStatus{Name: m[1:], Ready: m[0] == '+'})
	}
	return st
}

// membersOf is the names of the members of example at size n.
func membersOf(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("example-%d", i))
	}
	return out
}

// requestCount is the number of requests the fake has seen: a mark for
// requestsSince.
func (f *fakeAPI) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// requestsSince returns the requests made after the first n.
func (f *fakeAPI) requestsSince(n int) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests[n:])
}

// about returns, as "METHOD path?query", the requests whose path, query or
// body contain name ("": every request). An Event names its cluster in its
// body; withoutEvents leaves Events out.
func about(reqs []request, name string) []string {
	var out []string
	for _, r := range reqs {
		q := r.Query.Encode()
		if strings.Contains(r.Path, name) || strings.Contains(q, name) || strings.Contains(r.Body, name) {
			out = append(out, strings.TrimSuffix(r.Method+" "+r.Path+"?"+q, "?"))
		}
	}
	return out
}

// withoutEvents returns the requests other than Events posted.
func withoutEvents(reqs []request) []request {
	var out []request
	for _, r := range reqs {
		if !strings.HasSuffix(r.Path, "/events") {
			out = append(out, r)
		}
	}
	return out
}

// membershipLog lists the membership changes (adds, promotions, removals)
// etcd saw, in order; leadership moves are not membership changes.
func (f *fakeAPI) membershipLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.etcdLog {
		if !strings.HasPrefix(l, "lead ") {
			out = append(out, l)
		}
	}
	return out
}
