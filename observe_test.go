// Tests of observing a cluster: what the Pod watcher keeps of a member Pod,
// and a cluster the API server does not let the operator look at.
package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// What the Pod watcher keeps of a Pod: its cluster (from its controlling
// EtcdCluster ownerReference, by name and uid), and what decide reads of
// it, computed once; a Pod being deleted is not ready.
func TestDecodePodEvent(t *testing.T) {
	owner := `"ownerReferences":[{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","name":"example","uid":"u","controller":true}]`
	member := func(v podView) podEvent {
		return podEvent{Namespace: "ns", Cluster: "example", Owner: uidKey("u"), Pod: cachedPod{view: v}}
	}
	deleting := member(podView{Name: "example-0", Ready: true, Deleting: true})
	deleting.Pod.deleteBy = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	running := member(podView{Name: "example-0", Phase: "Running", Image: "etcd:v3.6.16", InitialCluster: "example-0=http://example-0:2380", State: "new",
		Waiting: "CrashLoopBackOff", WaitingMessage: "back-off 10s"})
	running.Pod.hasIP = true
	for _, tc := range []struct {
		name, raw string
		want      podEvent
		ready     bool
	}{
		{name: "ready", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			want: member(podView{Name: "example-0", Ready: true}), ready: true},
		{name: "not ready", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"conditions":[{"type":"Ready","status":"False"}]}}`,
			want: member(podView{Name: "example-0"})},
		{name: "no conditions yet", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `}}`,
			want: member(podView{Name: "example-0"})},
		{name: "ready, being deleted", raw: `{"metadata":{"name":"example-0","namespace":"ns","deletionTimestamp":"2026-01-01T00:00:00Z",` + owner + `},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			want: deleting},
		{name: "what decide reads", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},` +
			`"spec":{"containers":[{"name":"etcd","image":"etcd:v3.6.16","command":["etcd","--initial-cluster=example-0=http://example-0:2380","--initial-cluster-state=new"]}]},` +
			`"status":{"phase":"Running","podIP":"10.0.0.1","containerStatuses":[{"name":"etcd","state":{"waiting":{"reason":"CrashLoopBackOff","message":"back-off 10s"}}}]}}`,
			want: running},
		{name: "owned by something else", raw: `{"metadata":{"name":"x","namespace":"ns","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"example","uid":"u","controller":true}]},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			want: podEvent{Namespace: "ns", Owner: uidKey(""), Pod: cachedPod{view: podView{Name: "x", Ready: true}}}, ready: true},
		{name: "not the controller", raw: `{"metadata":{"name":"x","namespace":"ns","ownerReferences":[{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","name":"example","uid":"u"}]}}`,
			want: podEvent{Namespace: "ns", Owner: uidKey(""), Pod: cachedPod{view: podView{Name: "x"}}}},
	} {
		got, _, err := decodePodEvent(json.RawMessage(tc.raw))
		if err != nil || got != tc.want || got.ready() != tc.ready {
			t.Errorf("%s: decodePodEvent = %+v (ready %v), %v; want %+v (ready %v)", tc.name, got, got.ready(), err, tc.want, tc.ready)
		}
	}
}

// What the Service watcher keeps of a Service: its name and the
// EtcdCluster that controls it.
func TestDecodeServiceEvent(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      svcEvent
	}{
		{name: "a member's", raw: `{"metadata":{"name":"example-0","namespace":"ns","ownerReferences":[{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","name":"example","uid":"u","controller":true}]},"spec":{"clusterIP":"10.0.0.1"}}`,
			want: svcEvent{Namespace: "ns", Name: "example-0", Cluster: "example", Owner: uidKey("u")}},
		{name: "someone else's", raw: `{"metadata":{"name":"example-0","namespace":"ns"}}`,
			want: svcEvent{Namespace: "ns", Name: "example-0", Owner: uidKey("")}},
	} {
		if got, _, err := decodeServiceEvent(json.RawMessage(tc.raw)); err != nil || got != tc.want {
			t.Errorf("%s: decodeServiceEvent = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// A Pod being deleted is overdue a minute after its grace period ended,
// whenever the pass looks; etcd is asked only in a running Pod with an IP.
func TestCachedPod(t *testing.T) {
	end := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := cachedPod{view: podView{Name: "a", Phase: "Running", Deleting: true}, deleteBy: end.Unix(), hasIP: true}
	if p.at(end.Add(overdue)).Overdue || !p.at(end.Add(overdue+time.Second)).Overdue {
		t.Error("a deletion is overdue a minute after its grace period ends, not before")
	}
	if (cachedPod{view: podView{Phase: "Running"}}).at(end).Overdue {
		t.Error("a Pod not being deleted is overdue")
	}
	for _, tc := range []struct {
		p    cachedPod
		want bool
	}{
		{cachedPod{view: podView{Phase: "Running"}, hasIP: true}, true},
		{cachedPod{view: podView{Phase: "Running"}}, false},
		{cachedPod{view: podView{Phase: "Pending"}, hasIP: true}, false},
		{p, false},
	} {
		if got := tc.p.runs(); got != tc.want {
			t.Errorf("runs(%+v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}

// The API server refusing the operator what it needs to look at a cluster
// (a list of its Pods, or etcd through the Pods' proxy) is for someone to fix: the
// cluster is Failed with the server's words, not left waiting in silence.
func TestObserveRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refused func(r request) bool
		want    string
	}{
		{name: "pods/proxy", want: `cannot create resource "pods/proxy"`,
			refused: func(r request) bool { return strings.HasSuffix(r.Path, "/proxy/v3/maintenance/status") }},
		// The Pod watch cannot list: after cacheWait, the pass lists the
		// cluster's Pods itself, and is refused too.
		{name: "list pods", want: `cannot list resource "pods"`, refused: func(r request) bool {
			return r.Method == "GET" && r.Path == "/api/v1/namespaces/default/pods" && r.Query.Get("watch") == ""
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
			st := waitStatus(f, "example", inPhase(phaseFailed))
			if !strings.Contains(st.Message, "403 Forbidden") || !strings.Contains(st.Message, tc.want) {
				t.Errorf("status.message = %q, want the 403 and %q", st.Message, tc.want)
			}
		})
	}
}
