// Tests of observing a cluster: what the Pod watcher keeps of a member Pod,
// and a cluster the API server does not let the operator look at.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// What the Pod watcher keeps of a Pod: its cluster (from its controlling
// EtcdCluster ownerReference) and whether it is Ready; a Pod being deleted
// is not.
func TestDecodePodEvent(t *testing.T) {
	owner := `"ownerReferences":[{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","name":"example","uid":"u","controller":true}]`
	for _, tc := range []struct {
		name, raw string
		cluster   string
		ready     bool
		claim     string
		dataLost  string
	}{
		{name: "ready", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			cluster: "example", ready: true},
		{name: "not ready", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"conditions":[{"type":"Ready","status":"False"}]}}`,
			cluster: "example"},
		{name: "no conditions yet", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `}}`,
			cluster: "example"},
		{name: "ready, being deleted", raw: `{"metadata":{"name":"example-0","namespace":"ns","deletionTimestamp":"2026-01-01T00:00:00Z",` + owner + `},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			cluster: "example"},
		{name: "owned by something else", raw: `{"metadata":{"name":"x","namespace":"ns","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"example","uid":"u","controller":true}]},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`,
			ready: true},
		{name: "not the controller", raw: `{"metadata":{"name":"x","namespace":"ns","ownerReferences":[{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","name":"example","uid":"u"}]}}`,
			cluster: ""},
		{name: "data on a volume claim", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"spec":{"volumes":[{"name":"restore","persistentVolumeClaim":{"claimName":"other"}},{"name":"data","persistentVolumeClaim":{"claimName":"example-0"}}]}}`,
			cluster: "example", claim: "example-0"},
		// etcd 3.6.16's last words, from runs on wiped data: as the
		// kubelet keeps them (the end of the log, JSON-escaped here).
		{name: "etcd exited: raft amnesia", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"containerStatuses":[{"name":"etcd","state":{"waiting":{"reason":"CrashLoopBackOff"}},"lastState":{"terminated":{"exitCode":2,"message":"panic: tocommit(29) is out of range [lastIndex(0)]. Was the raft log corrupted, truncated, or lost?\n\ngoroutine 129 [running]:\ngo.uber.org/zap/zapcore.CheckWriteAction.OnWrite(...)"}}}]}}`,
			cluster: "example", dataLost: "Was the raft log corrupted, truncated, or lost?"},
		{name: "etcd exited: bootstrapped before", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"containerStatuses":[{"name":"etcd","lastState":{"terminated":{"exitCode":1,"message":"{\"level\":\"fatal\",\"msg\":\"discovery failed\",\"error\":\"member ce2d939a33279a5e has already been bootstrapped\"}\n"}}}]}}`,
			cluster: "example", dataLost: "has already been bootstrapped"},
		{name: "etcd exited: stale member list", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"containerStatuses":[{"name":"etcd","lastState":{"terminated":{"exitCode":1,"message":"{\"level\":\"fatal\",\"msg\":\"discovery failed\",\"error\":\"error validating peerURLs {ClusterID:8aa6af022dc45569}: member count is unequal\"}\n"}}}]}}`,
			cluster: "example", dataLost: "error validating peerURLs"},
		{name: "etcd exited: something else", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"containerStatuses":[{"name":"etcd","lastState":{"terminated":{"exitCode":2,"message":"panic: runtime error: invalid memory address or nil pointer dereference"}}}]}}`,
			cluster: "example"},
		{name: "another container's last words", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"status":{"containerStatuses":[{"name":"sidecar","lastState":{"terminated":{"exitCode":1,"message":"error validating peerURLs"}}}]}}`,
			cluster: "example"},
		{name: "data on emptyDir", raw: `{"metadata":{"name":"example-0","namespace":"ns",` + owner + `},"spec":{"volumes":[{"name":"data","emptyDir":{}}]}}`,
			cluster: "example"},
	} {
		got, _, err := decodePodEvent(json.RawMessage(tc.raw))
		if err != nil || got.Namespace != "ns" || got.Cluster != tc.cluster || got.Pod == nil || (got.Pod.Ready && !got.Pod.Deleting) != tc.ready || got.Pod.Claim != tc.claim || got.Pod.DataLost != tc.dataLost {
			t.Errorf("%s: decodePodEvent = %+v (Pod %+v), %v; want cluster %q, ready %v, claim %q, data lost %q", tc.name, got, got.Pod, err, tc.cluster, tc.ready, tc.claim, tc.dataLost)
		}
	}
}

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
		// etcd's /version is a GET: "get" on pods/proxy, asked while no
		// version is known yet (a new cluster).
		{name: "get pods/proxy", want: `cannot get resource "pods/proxy"`,
			refused: func(r request) bool { return r.Method == "GET" && strings.HasSuffix(r.Path, "/proxy/version") }},
		// The Pod watch cannot list, so the cache never fills: the pass
		// waits cacheLag for it, lists the cluster's Pods itself, and is
		// refused too.
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
			// Running would be the refusal taken for silence.
			st := waitStatus(f, "example", statusCheck{"phase Failed (or Running)", func(st clusterStatus) bool { return st.Phase == phaseFailed || st.Phase == phaseRunning }})
			if st.Phase != phaseFailed || !strings.Contains(st.Message, "403 Forbidden") || !strings.Contains(st.Message, tc.want) {
				t.Errorf("status %s: %q, want Failed with the 403 and %q", st.Phase, st.Message, tc.want)
			}
		})
	}
}

// etcd's cluster version is asked only while a listed member is silent,
// or while the members run another minor version than the status knows:
// a pass over a healthy cluster costs no more requests than before.
func TestObserveClusterVersion(t *testing.T) {
	f := settledExample(t, nil, running(3))
	ctl := newController(f)
	ec, err := decodeCluster(mustJSON(f.cluster("default", "example")))
	if err != nil {
		t.Fatal(err)
	}
	versionAsked := func() int {
		return f.countMatching("GET", func(p string) bool { return strings.HasSuffix(p, "/proxy/version") })
	}
	for _, tc := range []struct {
		name  string
		down  bool
		known string // the status's currentVersion
		want  string
		asked int
	}{
		{"every member answers", false, "3.6.16", "", 0},
		{"one member is down", true, "3.6.16", "3.6.0", 1},
		{"the members run a newer minor than the status knows", false, "3.5.21", "3.6.0", 1},
		{"no version known yet", false, "", "3.6.0", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.killMember("default", "example-2", tc.down)
			before := versionAsked()
			obs, err := ctl.observe(context.Background(), ec, input{Base: "example", Prev: clusterStatus{CurrentVersion: tc.known}})
			if err != nil {
				t.Fatal(err)
			}
			if obs.Etcd.ClusterVersion != tc.want || versionAsked()-before != tc.asked {
				t.Errorf("ClusterVersion %q after %d GETs of /version, want %q after %d", obs.Etcd.ClusterVersion, versionAsked()-before, tc.want, tc.asked)
			}
		})
	}
}

// The member list comes from the leader, as a linearizable read: a
// follower's list, or a serializable one, may not show a membership
// change yet. Leadership is moved away from the first member, so that the
// leader is not merely the first Pod asked.
func TestObserveAsksTheLeaderForTheMembers(t *testing.T) {
	f := settledExample(t, nil, running(3))
	f.mu.Lock()
	e := f.etcds["default/example"]
	e.Leader = e.member("example-2").ID
	f.mu.Unlock()
	ctl := newController(f)
	ec, err := decodeCluster(mustJSON(f.cluster("default", "example")))
	if err != nil {
		t.Fatal(err)
	}
	mark := f.requestCount()
	obs, err := ctl.observe(context.Background(), ec, input{Base: "example", Prev: clusterStatus{CurrentVersion: "3.6.16"}})
	if err != nil {
		t.Fatal(err)
	}
	var lists []string
	for _, r := range f.requestsSince(mark) {
		if strings.HasSuffix(r.Path, "/proxy/v3/cluster/member/list") {
			lists = append(lists, r.Path+" "+r.Body)
		}
	}
	want := []string{`/api/v1/namespaces/default/pods/example-2:2379/proxy/v3/cluster/member/list {"linearizable":true}`}
	if !slices.Equal(lists, want) {
		t.Errorf("member lists asked: %q, want %q", lists, want)
	}
	if obs.Etcd.LeaderPod != "example-2" || len(obs.Etcd.Members) != 3 {
		t.Errorf("leader Pod %q, %d members; want example-2 and 3", obs.Etcd.LeaderPod, len(obs.Etcd.Members))
	}
}

// A member whose proxied request hangs (its node cut off) does not hold up
// the pass that reports it: each request to a member is bounded by
// etcdTimeout, not by the API client's own timeout.
func TestObserveBoundsEachMemberRequest(t *testing.T) {
	f := settledExample(t, nil, running(3))
	ctl := newController(f)
	ec, err := decodeCluster(mustJSON(f.cluster("default", "example")))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		hangs func(r request) bool
		known string // the status's currentVersion: "" asks etcd's cluster version
		check func(obs observed) string
	}{
		{name: "status", known: "3.6.16",
			hangs: func(r request) bool { return strings.HasSuffix(r.Path, "/example-1:2379/proxy/v3/maintenance/status") },
			check: func(obs observed) string {
				if !slices.Equal(obs.Etcd.AnsweredPods, []string{"example-0", "example-2"}) {
					return fmt.Sprintf("answered %v, want example-0 and example-2", obs.Etcd.AnsweredPods)
				}
				return ""
			}},
		{name: "version",
			hangs: func(r request) bool { return strings.HasSuffix(r.Path, "/example-0:2379/proxy/version") },
			check: func(obs observed) string {
				if obs.Etcd.ClusterVersion != "3.6.0" {
					return fmt.Sprintf("cluster version %q, want 3.6.0 from the next member", obs.Etcd.ClusterVersion)
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.setFault(func(r request) (int, string, string) {
				if tc.hangs(r) {
					<-r.Ctx.Done()
				}
				return 0, "", ""
			})
			defer f.setFault(nil)
			// Bounded here too, so that a pass that waits for good fails.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			obs, err := ctl.observe(ctx, ec, input{Base: "example", Prev: clusterStatus{CurrentVersion: tc.known}})
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if took > etcdTimeout+5*time.Second {
				t.Errorf("observe took %v with one request hanging; want about etcdTimeout (%v)", took.Round(time.Millisecond), etcdTimeout)
			}
			if msg := tc.check(obs); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// A Pod still there longer than overdue after the end of its grace period
// (its deletionTimestamp) is overdue: its node is gone, and decide may
// replace the member. One not being deleted never is.
func TestPodOverdue(t *testing.T) {
	end := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var deleting, alive pod
	deleting.Metadata.DeletionTimestamp = end.Format(time.RFC3339)
	for _, tc := range []struct {
		p    *pod
		now  time.Time
		want bool
	}{
		{&deleting, end.Add(-time.Second), false},
		{&deleting, end.Add(overdue), false},
		{&deleting, end.Add(overdue + time.Second), true},
		{&alive, end.Add(time.Hour), false},
	} {
		if got := tc.p.cached().view(tc.now).Overdue; got != tc.want {
			t.Errorf("deletionTimestamp %q, %v after %v: overdue %v, want %v", tc.p.Metadata.DeletionTimestamp, tc.now.Sub(end), end, got, tc.want)
		}
	}
}
