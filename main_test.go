package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

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

// waitLog waits until the operator has logged a line containing text.
func (op *operator) waitLog(text string) {
	op.t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		op.logs.mu.Lock()
		found := strings.Contains(op.logs.b.String(), text)
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

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func size(n int) map[string]any { return map[string]any{"size": n} }

func phaseOf(obj map[string]any) string {
	st, _ := obj["status"].(map[string]any)
	p, _ := st["phase"].(string)
	return p
}

func statusOf(obj map[string]any) clusterStatus {
	var st clusterStatus
	_ = json.Unmarshal(mustJSON(obj["status"]), &st)
	return st
}

// waitPhase waits until the fake holds the cluster in the given phase.
func waitPhase(f *fakeAPI, name, phase string) map[string]any {
	f.t.Helper()
	f.waitFor(name+" in phase "+phase, func() bool { return phaseOf(f.clusters["default/"+name]) == phase })
	return f.cluster("default", name)
}

// waitWaiting waits until a cluster whose Pods do not run has all its
// objects and waits for its members.
func waitWaiting(f *fakeAPI, name string) {
	f.t.Helper()
	f.waitFor(name+" waiting for its members", func() bool {
		st := statusOf(f.clusters["default/"+name])
		p, _ := st.condition(condProgressing)
		return p.Reason == "WaitingForMembers"
	})
}

// requestsSince returns the requests made after the first n.
func (f *fakeAPI) requestsSince(n int) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests[n:])
}

func (f *fakeAPI) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// mentioning returns the requests whose path or body contain s.
func mentioning(reqs []request, s string) []string {
	var out []string
	for _, r := range reqs {
		if strings.Contains(r.Path, s) || strings.Contains(r.Body, s) {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// createdExample starts an operator on a fake API server and waits until
// it has created a 3-member cluster named example.
func createdExample(t *testing.T) *fakeAPI {
	t.Helper()
	f := newFakeAPI(t)
	f.putCluster("default", "example", size(3))
	startOperator(t, f)
	waitPhase(f, "example", phaseRunning)
	return f
}

// idleExample is createdExample with an operator that has nothing left to
// do: whatever it sends next is caused by what the test does. The operator
// that created the cluster may still be in a pass when the status says
// Running (for Pod events that crossed its own status writes), so it is
// stopped once its Events are in, and a new one started over the settled
// cluster, which sends nothing about it (TestRestartCreatesNothing).
func idleExample(t *testing.T) (*fakeAPI, *operator) {
	t.Helper()
	f := newFakeAPI(t)
	f.putCluster("default", "example", size(3))
	op := startOperator(t, f)
	waitPhase(f, "example", phaseRunning)
	f.waitFor("the events of the creation", func() bool { return len(f.events) == 4 })
	op.stop()
	op = startOperator(t, f)
	f.waitFor("the new operator to watch clusters and Pods", func() bool { return len(f.streams) == 1 && len(f.podStreams) == 1 })
	return f, op
}

func TestCreatesCluster(t *testing.T) {
	f := newFakeAPI(t)
	ec := f.putCluster("default", "example", map[string]any{"size": 3, "version": "v3.6.16"})
	uid := ec["metadata"].(map[string]any)["uid"].(string)
	startOperator(t, f)
	cluster := waitPhase(f, "example", phaseRunning)

	if got, want := f.objectNames("services"), []string{"example-0", "example-1", "example-2", "example-client"}; !slices.Equal(got, want) {
		t.Errorf("services = %v, want %v", got, want)
	}
	if got, want := f.objectNames("pods"), []string{"example-0", "example-1", "example-2"}; !slices.Equal(got, want) {
		t.Errorf("pods = %v, want %v", got, want)
	}

	// Every Service is created before any Pod.
	var kinds []string
	for _, r := range f.requestsSince(0) {
		if r.Method == "POST" && (strings.HasSuffix(r.Path, "/services") || strings.HasSuffix(r.Path, "/pods")) {
			kinds = append(kinds, r.Path[strings.LastIndex(r.Path, "/")+1:])
		}
	}
	if want := []string{"services", "services", "services", "services", "pods", "pods", "pods"}; !slices.Equal(kinds, want) {
		t.Errorf("POST order = %v, want %v", kinds, want)
	}

	wantOwner := map[string]any{"apiVersion": "coreos.com/v1", "kind": "EtcdCluster", "name": "example", "uid": uid, "controller": true, "blockOwnerDeletion": true}
	checkMeta := func(obj map[string]any, wantLabels map[string]any) {
		t.Helper()
		meta := obj["metadata"].(map[string]any)
		if !jsonEqual(meta["labels"], wantLabels) {
			t.Errorf("%s labels = %v, want %v", meta["name"], meta["labels"], wantLabels)
		}
		if owners := meta["ownerReferences"].([]any); len(owners) != 1 || !jsonEqual(owners[0], wantOwner) {
			t.Errorf("%s ownerReferences = %v, want [%v]", meta["name"], owners, wantOwner)
		}
	}

	const initialCluster = "example-0=http://example-0:2380,example-1=http://example-1:2380,example-2=http://example-2:2380"
	tokens := map[string]bool{}
	for _, m := range []string{"example-0", "example-1", "example-2"} {
		labels := map[string]any{"app": "etcd", "etcd.coreos.com/cluster": "example", "etcd.coreos.com/member": m}
		svc := f.object("services", "default", m)
		checkMeta(svc, labels)
		spec := svc["spec"].(map[string]any)
		if !jsonEqual(spec["selector"], labels) {
			t.Errorf("service %s selector = %v, want %v", m, spec["selector"], labels)
		}
		wantPorts := []any{
			map[string]any{"name": "client", "port": 2379, "targetPort": 2379, "protocol": "TCP"},
			map[string]any{"name": "peer", "port": 2380, "targetPort": 2380, "protocol": "TCP"},
		}
		if !jsonEqual(spec["ports"], wantPorts) {
			t.Errorf("service %s ports = %v, want %v", m, spec["ports"], wantPorts)
		}
		// Peers must find each other before any member is ready.
		if spec["publishNotReadyAddresses"] != true {
			t.Errorf("service %s does not publish not-ready addresses", m)
		}

		pod := f.object("pods", "default", m)
		checkMeta(pod, labels)
		podSpec := pod["spec"].(map[string]any)
		if podSpec["automountServiceAccountToken"] != false || podSpec["enableServiceLinks"] != false {
			t.Errorf("pod %s mounts a token or gets service links: %v", m, podSpec)
		}
		if podSpec["restartPolicy"] != "Always" {
			t.Errorf("pod %s restartPolicy = %v, want Always", m, podSpec["restartPolicy"])
		}
		c := podSpec["containers"].([]any)[0].(map[string]any)
		if c["image"] != "gcr.io/etcd-development/etcd:v3.6.16" {
			t.Errorf("pod %s image = %v", m, c["image"])
		}
		for probe, path := range map[string]string{"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/readyz"} {
			p, _ := c[probe].(map[string]any)
			if get, _ := p["httpGet"].(map[string]any); get["path"] != path || toInt(get["port"]) != 2379 {
				t.Errorf("pod %s %s = %v, want GET %s on 2379", m, probe, p, path)
			}
		}
		var cmd []string
		for _, a := range c["command"].([]any) {
			cmd = append(cmd, a.(string))
		}
		token := strings.TrimPrefix(cmd[len(cmd)-1], "--initial-cluster-token=")
		tokens[token] = true
		want := []string{
			"/usr/local/bin/etcd",
			"--name=" + m,
			"--data-dir=/var/lib/etcd",
			"--initial-advertise-peer-urls=http://" + m + ":2380",
			"--listen-peer-urls=http://0.0.0.0:2380",
			"--listen-client-urls=http://0.0.0.0:2379",
			"--advertise-client-urls=http://" + m + ":2379",
			"--initial-cluster=" + initialCluster,
			"--initial-cluster-state=new",
			"--initial-cluster-token=" + token,
		}
		if !slices.Equal(cmd, want) {
			t.Errorf("pod %s command =\n%q\nwant\n%q", m, cmd, want)
		}
		if _, err := uuid.Parse(token); err != nil {
			t.Errorf("pod %s: --initial-cluster-token %q is not a UUID: %v", m, token, err)
		}
		if mounts := c["volumeMounts"].([]any); len(mounts) != 1 || mounts[0].(map[string]any)["mountPath"] != "/var/lib/etcd" {
			t.Errorf("pod %s volumeMounts = %v, want the data dir on a volume", m, mounts)
		}
		if vols := podSpec["volumes"].([]any); len(vols) != 1 || vols[0].(map[string]any)["emptyDir"] == nil {
			t.Errorf("pod %s volumes = %v, want one emptyDir", m, vols)
		}
	}
	if len(tokens) != 1 {
		t.Errorf("members disagree on --initial-cluster-token: %v", tokens)
	}

	client := f.object("services", "default", "example-client")
	checkMeta(client, map[string]any{"app": "etcd", "etcd.coreos.com/cluster": "example"})
	// Clients go to members that can serve: only ready ones.
	if p, ok := client["spec"].(map[string]any)["publishNotReadyAddresses"]; ok && p != false {
		t.Errorf("client service publishes not-ready addresses")
	}
	if sel := client["spec"].(map[string]any)["selector"]; !jsonEqual(sel, map[string]any{"app": "etcd", "etcd.coreos.com/cluster": "example"}) {
		t.Errorf("client service selector = %v", sel)
	}

	st := statusOf(cluster)
	var members []string
	for _, m := range st.Members {
		if m.Ready {
			members = append(members, m.Name)
		}
	}
	if want := []string{"example-0", "example-1", "example-2"}; !slices.Equal(members, want) || st.ObservedGeneration != 1 || st.Ready != "3/3" || st.ClusterID == "" {
		t.Errorf("status = %+v, want ready members %v, READY 3/3, a cluster ID and observedGeneration 1", st, want)
	}
	var patches []string
	for _, r := range f.requestsSince(0) {
		if r.Method == "PATCH" {
			if r.Path != "/apis/coreos.com/v1/namespaces/default/etcdclusters/example/status" || r.ContentType != "application/merge-patch+json" {
				t.Errorf("status written as %s %s (%s)", r.Method, r.Path, r.ContentType)
			}
			var p struct{ Status clusterStatus }
			_ = json.Unmarshal([]byte(r.Body), &p)
			patches = append(patches, p.Status.Phase)
		}
	}
	if want := []string{phaseCreating, phaseRunning}; !slices.Equal(patches, want) {
		t.Errorf("status phases written = %v, want %v", patches, want)
	}

	f.waitFor("four events", func() bool { return len(f.events) >= 4 })
	reasons := map[string]int{}
	for _, ev := range f.postedEvents() {
		reasons[ev["reason"].(string)]++
		inv := ev["involvedObject"].(map[string]any)
		if inv["uid"] != uid || inv["kind"] != "EtcdCluster" || inv["name"] != "example" {
			t.Errorf("event involvedObject = %v", inv)
		}
	}
	if reasons[reasonMemberCreated] != 3 || reasons[reasonClusterCreated] != 1 {
		t.Errorf("event reasons = %v, want 3 %s and 1 %s", reasons, reasonMemberCreated, reasonClusterCreated)
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
			f := newFakeAPI(t)
			f.putCluster("default", "example", size(3))
			op := startOperator(t, f)
			waitPhase(f, "example", phaseRunning)
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
			waitPhase(f, "marker", phaseRunning)
			if tc.loseStatus {
				waitPhase(f, "example", phaseRunning)
			}

			reqs := mentioning(f.requestsSince(mark), "example")
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
			waitPhase(f, "marker", phaseRunning)

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
				if reqs := mentioning(f.requestsSince(mark), "example"); len(reqs) > 0 {
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
// TestNewClusterIsLookedAtOnce: a new cluster costs one pass, two lists
// to see what exists, its seven objects and one status write; the Pods'
// events, not a second look, start what comes next.
func TestNewClusterIsLookedAtOnce(t *testing.T) {
	f := newFakeAPI(t)
	f.disableNode()
	startOperator(t, f)
	f.waitFor("the watch", func() bool { return len(f.streams) == 1 })
	f.putCluster("default", "example", size(3))
	f.putCluster("default", "marker", size(1)) // one worker: done after example
	waitWaiting(f, "marker")
	got := map[string]int{}
	for _, r := range f.requestsSince(0) {
		about := strings.Contains(r.Path, "/example") || strings.HasSuffix(r.Query.Get("labelSelector"), "=example") || strings.Contains(r.Body, `"example-`)
		if about && !strings.HasSuffix(r.Path, "/events") && r.Query.Get("watch") == "" {
			got[r.Method]++
		}
	}
	want := map[string]int{"GET": 2, "POST": 7, "PATCH": 1}
	if !maps.Equal(got, want) {
		t.Errorf("requests about a new cluster of 3 = %v, want %v (two lists, 4 Services and 3 Pods, one status write); requests:\n%s", got, want, f.requestLog())
	}
}

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
	waitWaiting(f, "example")
	f.waitFor("the events of the creation", func() bool { return len(f.events) == 4 })
	mark := f.requestCount()
	f.catchUp()
	f.putCluster("default", "marker", size(1))
	waitWaiting(f, "marker")
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

func TestInvalidSpecs(t *testing.T) {
	cases := []struct {
		name string
		spec any
		want string
	}{
		{"no-spec", nil, "spec is missing"},
		{"spec-not-object", 5, "spec must be an object, not 5"},
		{"size-missing", map[string]any{"version": "v3.6.16"}, "spec.size is missing"},
		{"size-string", map[string]any{"size": "three"}, `spec.size must be a whole number from 1 to 7, not "three"`},
		{"size-fraction", map[string]any{"size": 2.5}, "spec.size must be a whole number from 1 to 7, not 2.5"},
		{"size-zero", size(0), "spec.size must be a whole number from 1 to 7, not 0"},
		{"size-too-big", size(9), "spec.size must be a whole number from 1 to 7, not 9"},
		{"size-eight", size(8), "spec.size must be a whole number from 1 to 7, not 8"},
		{"size-negative", size(-1), "spec.size must be a whole number from 1 to 7, not -1"},
		{"version-number", map[string]any{"size": 1, "version": 3.6}, "spec.version must be a string, not 3.6"},
		{"version-not-a-tag", map[string]any{"size": 1, "version": "3.6 latest"}, `spec.version "3.6 latest" is not a valid image tag`},
	}
	f := newFakeAPI(t)
	for _, tc := range cases {
		f.putCluster("default", tc.name, tc.spec)
	}
	f.putCluster("default", "valid", size(1))
	op := startOperator(t, f)
	waitPhase(f, "valid", phaseRunning)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := statusOf(waitPhase(f, tc.name, phaseFailed))
			if !strings.Contains(st.Message, tc.want) {
				t.Errorf("status.message = %q, want it to contain %q", st.Message, tc.want)
			}
			if !strings.Contains(op.logs.String(), "cluster=default/"+tc.name) {
				t.Errorf("no log line names cluster default/%s", tc.name)
			}
			for _, r := range []string{"services", "pods"} {
				for _, n := range f.objectNames(r) {
					if strings.HasPrefix(n, tc.name) {
						t.Errorf("created %s %s for an invalid cluster", r, n)
					}
				}
			}
			f.waitFor("an InvalidSpec event", func() bool {
				return slices.ContainsFunc(f.events, func(ev map[string]any) bool {
					return ev["reason"] == reasonInvalidSpec && ev["involvedObject"].(map[string]any)["name"] == tc.name
				})
			})
		})
	}

	// Fixing the spec is a new generation: the cluster is created then.
	f.putCluster("default", "size-zero", size(1))
	waitPhase(f, "size-zero", phaseRunning)
}

// A failed POST is reported with the API server's own message, the operator
// keeps going, and it retries until the cause is fixed. A refusal (4xx) puts
// the cluster in phase Failed; a passing error (5xx, after the client's own
// retries) leaves it Creating.
func TestCreateErrorIsReportedAndRetried(t *testing.T) {
	for _, tc := range []struct {
		name      string
		code      int
		message   string
		wantPhase string
		wantLog   string
	}{
		{
			name: "forbidden", code: http.StatusForbidden, wantPhase: phaseFailed,
			message: `pods is forbidden: User "system:serviceaccount:ops:etcd-operator" cannot create resource "pods" in API group "" in the namespace "default"`,
			wantLog: `cannot create resource \"pods\" in API group`,
		},
		{
			name: "unavailable", code: http.StatusServiceUnavailable, wantPhase: phaseCreating,
			message: "etcdserver: leader changed", wantLog: "etcdserver: leader changed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			var mu sync.Mutex
			refuse := true
			f.fault = func(r request) (int, string, string) {
				mu.Lock()
				defer mu.Unlock()
				if refuse && r.Method == "POST" && strings.HasSuffix(r.Path, "/pods") {
					return tc.code, "", tc.message
				}
				return 0, "", ""
			}
			f.putCluster("default", "example", size(1))
			op := startOperator(t, f)

			st := statusOf(waitPhase(f, "example", tc.wantPhase))
			if want := fmt.Sprintf("%d %s: %s", tc.code, strings.ReplaceAll(http.StatusText(tc.code), " ", ""), tc.message); !strings.Contains(st.Message, want) {
				t.Errorf("status.message = %q, want it to contain %q", st.Message, want)
			}
			f.waitFor("a StepFailed event", func() bool {
				return slices.ContainsFunc(f.events, func(ev map[string]any) bool { return ev["reason"] == reasonStepFailed })
			})
			if !strings.Contains(op.logs.String(), tc.wantLog) {
				t.Error("the log does not carry the API server's message")
			}

			// Still running: another cluster is handled while the first waits.
			f.putCluster("default", "other", size(1))
			f.waitFor("other's service", func() bool { return f.objects["services/default/other-0"] != nil })

			mu.Lock()
			refuse = false
			mu.Unlock()
			waitPhase(f, "example", phaseRunning)
			waitPhase(f, "other", phaseRunning)
			if got := f.objectNames("pods"); !slices.Equal(got, []string{"example-0", "other-0"}) {
				t.Errorf("pods = %v", got)
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
		waitPhase(f, fmt.Sprintf("fast%d", i), phaseRunning)
	}
	if phaseOf(f.cluster("default", "slow")) != "" {
		t.Error("slow finished while its requests hung")
	}
	close(release)
	waitPhase(f, "slow", phaseRunning)
}

// A name already taken by an object the cluster does not own is not "done":
// the cluster is Failed with a message naming the object.
func TestNameTakenByAnotherObject(t *testing.T) {
	f := newFakeAPI(t)
	f.mu.Lock()
	f.objects["services/default/example-0"] = map[string]any{"metadata": map[string]any{"name": "example-0", "namespace": "default"}}
	f.mu.Unlock()
	f.putCluster("default", "example", size(1))
	startOperator(t, f)
	st := statusOf(waitPhase(f, "example", phaseFailed))
	if want := "create service/example-0: the name is taken by an object this EtcdCluster does not own"; !strings.Contains(st.Message, want) {
		t.Errorf("status.message = %q, want %q", st.Message, want)
	}
	if pods := f.objectNames("pods"); len(pods) > 0 {
		t.Errorf("created pods %v next to a Service that is not the cluster's", pods)
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
			f := createdExample(t)
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
			waitPhase(f, "after", phaseRunning)

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
			waitPhase(f, "example", phaseRunning)
		})
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
		f.waitFor(ns+"/db Created", func() bool { return phaseOf(f.clusters[ns+"/db"]) == phaseRunning })
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

// Listing reads page by page and watches from the list's resourceVersion.
func TestListPages(t *testing.T) {
	f := newFakeAPI(t)
	for i := range 5 {
		f.putCluster("default", fmt.Sprintf("c%d", i), size(1))
	}
	listRV := fmt.Sprint(f.rv)
	startOperator(t, f, "-page-size", "2", "-workers", "4")
	for i := range 5 {
		waitPhase(f, fmt.Sprintf("c%d", i), phaseRunning)
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

// Cancelling the context stops the operator promptly, wherever it is.
func TestShutdown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block string // a request path suffix the fake never answers
		wait  func(f *fakeAPI) bool
	}{
		{name: "watching", wait: func(f *fakeAPI) bool { return len(f.streams) == 1 }},
		{name: "creating", block: "/pods", wait: func(f *fakeAPI) bool { return f.countExactLocked("POST", "/api/v1/namespaces/default/pods") == 1 }},
		// The Pod watcher lists too: wait for the (blocked) list of clusters.
		{name: "listing", block: "/etcdclusters", wait: func(f *fakeAPI) bool {
			return f.countExactLocked("GET", "/apis/coreos.com/v1/namespaces/default/etcdclusters") == 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			if tc.block != "" {
				f.fault = func(r request) (int, string, string) {
					if strings.HasSuffix(r.Path, tc.block) && (r.Method == "POST" || tc.name == "listing") {
						<-r.Ctx.Done()
					}
					return 0, "", ""
				}
			}
			f.putCluster("default", "example", size(1))
			op := startOperator(t, f)
			f.waitFor(tc.name, func() bool { return tc.wait(f) })
			op.stop() // fails the test if run does not return within 10s
			if !strings.Contains(op.logs.String(), "etcd-operator stopped") {
				t.Error("no log line says the operator stopped")
			}
		})
	}
}

// The client retries what may succeed later, and nothing else.
func TestClientRetries(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answers    []int // HTTP codes, in order; then 200
		retryAfter string
		wantTries  int
		wantErr    string
	}{
		{name: "429 with Retry-After", answers: []int{429}, retryAfter: "1", wantTries: 2},
		{name: "503 then success", answers: []int{503, 503}, wantTries: 3},
		{name: "500 for good", answers: []int{500, 500, 500, 500}, wantTries: 4, wantErr: "500 InternalServerError: boom"},
		{name: "404 is final", answers: []int{404}, wantTries: 1, wantErr: "404 NotFound: boom"},
		{name: "403 is final", answers: []int{403}, wantTries: 1, wantErr: "403 Forbidden: boom"},
		{name: "409 is final", answers: []int{409}, wantTries: 1, wantErr: "409 Conflict: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var times []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n := len(times)
				times = append(times, time.Now())
				mu.Unlock()
				if n < len(tc.answers) {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					writeStatus(w, tc.answers[n], strings.ReplaceAll(http.StatusText(tc.answers[n]), " ", ""), "boom")
					return
				}
				w.Write([]byte(`{}`))
			}))
			defer srv.Close()
			c := newClient(srv.URL, nil)
			c.retryBase, c.attempts = time.Millisecond, 4
			_, err := c.do(context.Background(), "GET", "/x", nil, "")
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			if len(times) != tc.wantTries {
				t.Errorf("%d tries, want %d", len(times), tc.wantTries)
			}
			if tc.retryAfter != "" && len(times) > 1 {
				if gap := times[1].Sub(times[0]); gap < time.Second {
					t.Errorf("retried after %v, before the 1s Retry-After", gap)
				}
			}
		})
	}
}

// Each request has a timeout; a hung request is retried, not waited on
// forever.
func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var mu sync.Mutex
	tries := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tries++
		first := tries == 1
		mu.Unlock()
		if first {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	c := newClient(srv.URL, nil)
	c.timeout, c.retryBase = 100*time.Millisecond, time.Millisecond
	b, err := c.do(context.Background(), "GET", "/x", nil, "")
	if err != nil || string(b) != `{"ok":true}` {
		t.Fatalf("do = %s, %v; want the answer of a later try", b, err)
	}
	// Under load a later try may time out too; the first one must have.
	mu.Lock()
	defer mu.Unlock()
	if tries < 2 {
		t.Errorf("%d tries, want the hung one and another", tries)
	}
}

// In a Pod the client speaks HTTPS verified against the cluster CA, and
// reads the (rotating) token for every request.
func TestInClusterClient(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()

	writeSA := func(t *testing.T, cert []byte, token string) string {
		dir := t.TempDir()
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert})
		if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	u, _ := url.Parse(srv.URL)
	t.Setenv("KUBERNETES_SERVICE_HOST", u.Hostname())
	t.Setenv("KUBERNETES_SERVICE_PORT", u.Port())

	t.Run("token is read for every request", func(t *testing.T) {
		dir := writeSA(t, srv.Certificate().Raw, "token-one")
		c, err := inClusterClient(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.do(context.Background(), "GET", "/api", nil, ""); err != nil {
			t.Fatal(err)
		}
		// The kubelet replaces the file when it rotates the token.
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte("token-two"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.do(context.Background(), "GET", "/api", nil, ""); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"Bearer token-one", "Bearer token-two"}; !slices.Equal(auth, want) {
			t.Errorf("Authorization headers = %q, want %q", auth, want)
		}
	})
	t.Run("server not signed by the cluster CA", func(t *testing.T) {
		c, err := inClusterClient(writeSA(t, selfSignedCA(t), "secret-token"))
		if err != nil {
			t.Fatal(err)
		}
		c.attempts = 1
		_, err = c.do(context.Background(), "GET", "/api", nil, "")
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("err = %v, want a certificate verification error", err)
		}
		if err != nil && strings.Contains(err.Error(), "secret-token") {
			t.Errorf("the error shows the token: %v", err)
		}
	})
	t.Run("no token", func(t *testing.T) {
		dir := writeSA(t, srv.Certificate().Raw, "x")
		os.Remove(filepath.Join(dir, "token"))
		if _, err := inClusterClient(dir); err == nil || !strings.Contains(err.Error(), "service account token") {
			t.Errorf("err = %v, want a service account token error", err)
		}
	})
}

func TestRateLimiter(t *testing.T) {
	// 10 requests at 1000/s with a burst of 5: the first 5 go at once, the
	// other 5 each wait one more interval, so the whole takes >= 5ms.
	r := newRateLimiter(1000, 5)
	start := time.Now()
	for range 10 {
		if err := r.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 4*time.Millisecond {
		t.Errorf("10 requests took %v; the limit allows no less than 4ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := newRateLimiter(0.001, 1)
	_ = slow.wait(context.Background()) // takes the one token
	if err := slow.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("wait on a cancelled context = %v, want context.Canceled", err)
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: err = %v", err)
	}
	for _, want := range []string{"-master", `(default "http://127.0.0.1:8001")`, "-namespace", `(default "default")`, "-workers", "(default 16)", "-qps", "-burst", "-request-timeout", "-watch-stall", "-image", "-page-size", "-log-level"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h output lacks %q:\n%s", want, out.String())
		}
	}
	for _, bad := range [][]string{{"-workers", "0"}, {"extra"}, {"-watch-stall", "1ms"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted bad flags", bad)
		}
	}
}

func TestBaseName(t *testing.T) {
	long := strings.Repeat("a", 253)
	for _, tc := range []struct {
		name, want string
	}{
		{"example", "example"},
		{strings.Repeat("x", 56), strings.Repeat("x", 56)},
		{"my.cluster", "my-cluster-"},
		{"3node", "node-"},
		{"123", "etcd-"},
		{strings.Repeat("x", 57), strings.Repeat("x", 47) + "-"},
		{long, strings.Repeat("a", 47) + "-"},
	} {
		got := baseName(tc.name)
		if !strings.HasPrefix(got, tc.want) || (got != tc.want && len(got) != len(tc.want)+hashLen) {
			t.Errorf("baseName(%.20q...) = %q, want %q plus a hash", tc.name, got, tc.want)
		}
		for _, obj := range []string{got + "-0", got + "-6", got + "-client"} {
			if len(obj) > 63 || !dns1035.MatchString(obj) {
				t.Errorf("object name %q is not a DNS-1035 label", obj)
			}
		}
		if baseName(tc.name) != got {
			t.Errorf("baseName(%q) is not deterministic", tc.name)
		}
	}
	// Names that clean to the same text still differ by their hash.
	if a, b := baseName("a.b"), baseName("a..b"); a == b || a == "a-b" {
		t.Errorf("baseName(a.b) = %q, baseName(a..b) = %q: want distinct hashed names", a, b)
	}
	if a, b := baseName(long), baseName(long[:252]+"b"); a == b {
		t.Errorf("two long names share base name %q", a)
	}
}

func TestTokenIsStablePerUID(t *testing.T) {
	plan := func(uid string) clusterPlan {
		return newClusterPlan(objectMeta{Name: "example", Namespace: "default", UID: uid}, "img:"+defaultVersion)
	}
	a, b := plan("uid-1"), plan("uid-2")
	if a.Token != plan("uid-1").Token {
		t.Error("the token of one cluster changes between calls")
	}
	if a.Token == b.Token {
		t.Error("two clusters (different uids) share a token")
	}
}

// selfSignedCA makes a CA certificate that signed nothing. (Every httptest
// server uses the same built-in certificate, so another one would not do.)
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
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
			c := newClient(base, nil)
			c.attempts = 1
			w := &watcher[*EtcdCluster]{client: c, path: clustersPath("default"), decode: clusterRV, pageSize: 10, log: slog.New(slog.DiscardHandler)}
			_, err := w.list(context.Background(), make(chan event[*EtcdCluster]))
			if hint := listHint("etcdclusters", err); err == nil || !strings.Contains(hint, tc.want) {
				t.Errorf("list error %v: hint %q, want one with %q", err, hint, tc.want)
			}
		})
	}
}

// A full Event queue drops Events without blocking and without a log line
// for each: the first drop and every hundredth are logged.
func TestEventQueueFullDropsQuietly(t *testing.T) {
	var logs syncBuffer
	r := newRecorder(newClient("http://127.0.0.1:1", nil), slog.New(slog.NewTextHandler(&logs, nil)))
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

// The stall bound is for silence, not for the length of a watch: every
// byte that arrives pushes it back, so a stream that sends something more
// often than the bound, for longer than the bound, is kept.
func TestSlowWatchIsNotStalled(t *testing.T) {
	f := newFakeAPI(t)
	const stall = time.Second
	c := newClient(f.srv.URL, nil)
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

// parseSpec accepts exactly the sizes 1 to 7, whole numbers, and a version
// that is an image tag (the default when none is given).
func TestParseSpecBounds(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want clusterSpec // zero: refused
	}{
		{`{"size":0}`, clusterSpec{}},
		{`{"size":1}`, clusterSpec{Size: 1, Version: defaultVersion}},
		{`{"size":7}`, clusterSpec{Size: 7, Version: defaultVersion}},
		{`{"size":8}`, clusterSpec{}},
		{`{"size":3,"version":"v3.7.3"}`, clusterSpec{Size: 3, Version: "v3.7.3"}},
		{`{"size":3,"version":null}`, clusterSpec{Size: 3, Version: defaultVersion}},
		{`{"size":3,"version":""}`, clusterSpec{}},
		{`{"size":3,"version":"-x"}`, clusterSpec{}},
		{`{"size":3,"version":"` + strings.Repeat("a", 128) + `"}`, clusterSpec{Size: 3, Version: strings.Repeat("a", 128)}},
		{`{"size":3,"version":"` + strings.Repeat("a", 129) + `"}`, clusterSpec{}},
		{`{"size":3.0}`, clusterSpec{}},
		{`{"size":"3"}`, clusterSpec{}},
		{`{"size":1e0}`, clusterSpec{}},
	} {
		got, err := parseSpec(json.RawMessage(tc.raw))
		if got != tc.want || (err == nil) != (tc.want != clusterSpec{}) {
			t.Errorf("parseSpec(%s) = %+v, %v; want %+v", tc.raw, got, err, tc.want)
		}
	}
}

// Events have a rate limit of their own, 10 a second after a burst of 25,
// whatever the client's -qps allows: the first 25 go at once, the next
// ones a tenth of a second apart.
func TestEventRateLimit(t *testing.T) {
	f := newFakeAPI(t)
	r := newRecorder(newClient(f.srv.URL, nil), slog.New(slog.DiscardHandler)) // a client with no limit
	ec := &EtcdCluster{Metadata: objectMeta{Name: "example", Namespace: "default", UID: "u"}}
	const n = 30
	for i := range n {
		r.record(ec, eventNormal, reasonMemberCreated, fmt.Sprint(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); r.run(ctx) }()
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

// A failed cluster is retried after a delay of its own that doubles from
// 1s up to 5 minutes; the retry reads the cluster again first. A success,
// or the cluster's deletion, starts the delay over; other clusters' delays
// are their own.
// about returns the requests, Events excepted, whose path, query or body
// name the cluster.
func about(reqs []request, name string) []string {
	var out []string
	for _, r := range reqs {
		if strings.HasSuffix(r.Path, "/events") {
			continue
		}
		if strings.Contains(r.Path, name) || strings.Contains(r.Query.Encode(), name) || strings.Contains(r.Body, `"`+name) {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
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
	waitPhase(f, "example", phaseFailed)
	mark := f.requestCount()
	f.deleteCluster("default", "example")
	f.waitFor("the retry", func() bool { return len(about(f.requests[mark:], "example")) > 0 })
	want := []string{"GET /apis/coreos.com/v1/namespaces/default/etcdclusters/example"}
	if got := about(f.requestsSince(mark), "example"); !slices.Equal(got, want) {
		t.Errorf("the retry after the cluster was deleted sent %v, want only %v", got, want)
	}
}

// Objects of a deleted EtcdCluster may outlive it for a while (the garbage
// collector has not removed them yet). A new EtcdCluster of the same name
// (another uid) does not take them for its own: it is Failed, with the
// object named, and is created anew, with a new etcd cluster, once they are
// gone.
func TestRecreatedClusterOfTheSameName(t *testing.T) {
	f := newFakeAPI(t)
	f.putCluster("default", "example", size(1))
	op := startOperator(t, f)
	old := statusOf(waitPhase(f, "example", phaseRunning))
	oldUID := f.clusterUID("default", "example")
	f.deleteCluster("default", "example")
	op.waitLog("cluster deleted")
	f.putCluster("default", "example", size(1))
	newUID := f.clusterUID("default", "example")

	st := statusOf(waitPhase(f, "example", phaseFailed))
	if want := "create service/example-0: the name is taken by an object this EtcdCluster does not own"; !strings.Contains(st.Message, want) {
		t.Errorf("status.message = %q, want %q", st.Message, want)
	}
	f.collectGarbage("default", oldUID)
	st = waitStatus(f, "example", "Running anew", running(1))
	if st.ClusterID == "" || st.ClusterID == old.ClusterID {
		t.Errorf("cluster ID %q, want a new one (the old cluster's was %s)", st.ClusterID, old.ClusterID)
	}
	for _, r := range []string{"services", "pods"} {
		for _, n := range f.objectNames(r) {
			owners := f.object(r, "default", n)["metadata"].(map[string]any)["ownerReferences"].([]any)
			if uid := owners[0].(map[string]any)["uid"]; uid != newUID {
				t.Errorf("%s %s is owned by %v, want the new cluster %s", r, n, uid, newUID)
			}
		}
	}
}

// loop runs the control loop alone on events a test hands it, one at a
// time and in order, against a fake API server. A pass for a cluster the
// fake does not hold costs one GET (404) when it reads the cluster first,
// more when it acts on the event's object.
type loop struct {
	clusters   chan event[*EtcdCluster]
	pods       chan event[podEvent]
	synced     chan struct{}
	podsSynced chan struct{}
	done       chan struct{}
	finishOnce sync.Once
}

func startLoop(t *testing.T, f *fakeAPI) *loop {
	t.Helper()
	c := newClient(f.srv.URL, nil)
	log := slog.New(slog.DiscardHandler)
	ctl := &controller{client: c, log: log, image: repo, events: newRecorder(c, log)}
	l := &loop{clusters: make(chan event[*EtcdCluster]), pods: make(chan event[podEvent]),
		synced: make(chan struct{}), podsSynced: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { defer close(l.done); ctl.run(ctx, l.clusters, l.pods, l.synced, l.podsSynced, 1) }()
	t.Cleanup(func() { l.finish(); cancel() })
	return l
}

// finish ends the watches' channels and waits until the loop and its
// workers are done: every pass the events started has been made.
func (l *loop) finish() {
	l.finishOnce.Do(func() {
		close(l.clusters)
		close(l.pods)
	})
	<-l.done
}

func (l *loop) cluster(typ, name string, gen int64, st clusterStatus) {
	raw := mustJSON(st)
	l.clusters <- event[*EtcdCluster]{Type: typ, Object: &EtcdCluster{
		Metadata: objectMeta{Namespace: "default", Name: name, UID: "uid-" + name, Generation: gen},
		Spec:     json.RawMessage(`{"size":3}`), Status: raw}}
}

func (l *loop) pod(typ, cluster, name string, ready bool) {
	l.pods <- event[podEvent]{Type: typ, Object: podEvent{Namespace: "default", Name: name, Cluster: cluster, Ready: ready}}
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
			close(l.podsSynced)
			f.waitFor("the pass the Pod list calls for", func() bool { return len(about(f.requests, "example")) == 1 })
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
			f.waitFor("the pass", func() bool { return len(about(f.requests, "example")) == 1 })
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
				got := about(reqs, name) // "": every request
				if len(got) != want {
					t.Errorf("requests about %q: %v, want %d", name, got, want)
				}
			}
		})
	}
}

// The queue never runs two passes of one cluster at once: events that
// arrive during a pass wait, folded into the newest, and are dropped when
// the pass handled their generation already (the operator's own status
// writes, coming back). A request to read the cluster again is never
// dropped.
// The API server refusing the operator what it needs to look at a cluster
// (its Pods, or etcd through the Pods' proxy) is for someone to fix: the
// cluster is Failed with the server's words, not left waiting in silence.
func TestObserveRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refused func(r request) bool
		want    string
	}{
		{name: "pods/proxy", want: `cannot create resource "pods/proxy"`,
			refused: func(r request) bool { return strings.HasSuffix(r.Path, "/proxy/v3/maintenance/status") }},
		{name: "list a cluster's pods", want: `cannot list resource "pods"`, refused: func(r request) bool {
			return r.Method == "GET" && r.Path == "/api/v1/namespaces/default/pods" && r.Query.Get("labelSelector") == labelCluster+"=example"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			f.setFault(func(r request) (int, string, string) {
				if tc.refused(r) {
					return http.StatusForbidden, "", `User "system:serviceaccount:ops:etcd-operator" ` + tc.want
				}
				return 0, "", ""
			})
			f.putCluster("default", "example", size(1))
			startOperator(t, f)
			st := statusOf(waitPhase(f, "example", phaseFailed))
			if !strings.Contains(st.Message, "403 Forbidden") || !strings.Contains(st.Message, tc.want) {
				t.Errorf("status.message = %q, want the 403 and %q", st.Message, tc.want)
			}
		})
	}
}

// What the Pod watcher keeps of a Pod: its cluster (from its controlling
// EtcdCluster ownerReference) and whether it is Ready; a Pod being deleted
// is not.
func TestDecodePodEvent(t *testing.T) {
	owner := `"ownerReferences":[{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","name":"example","uid":"u","controller":true}]`
	for _, tc := range []struct {
		name, raw string
		want      podEvent
	}{
		{name: "ready", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			want: podEvent{Namespace: "ns", Name: "example-0", Cluster: "example", Ready: true}},
		{name: "not ready", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"conditions":[{"type":"Ready","status":"False"}]}}`,
			want: podEvent{Namespace: "ns", Name: "example-0", Cluster: "example"}},
		{name: "no conditions yet", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `}}`,
			want: podEvent{Namespace: "ns", Name: "example-0", Cluster: "example"}},
		{name: "ready, being deleted", raw: `{"metadata":{"name":"example-0","namespace":"ns","deletionTimestamp":"2026-01-01T00:00:00Z",` + owner + `},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			want: podEvent{Namespace: "ns", Name: "example-0", Cluster: "example"}},
		{name: "owned by something else", raw: `{"metadata":{"name":"x","namespace":"ns","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"example","uid":"u","controller":true}]},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			want: podEvent{Namespace: "ns", Name: "x", Ready: true}},
		{name: "not the controller", raw: `{"metadata":{"name":"x","namespace":"ns","ownerReferences":[{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","name":"example","uid":"u"}]}}`,
			want: podEvent{Namespace: "ns", Name: "x"}},
	} {
		got, _, err := decodePodEvent(json.RawMessage(tc.raw))
		if err != nil || got != tc.want {
			t.Errorf("%s: decodePodEvent = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}
