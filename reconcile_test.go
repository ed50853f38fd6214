// Tests of whole passes: observe, decide, act and report, carried out by the
// operator against the fake API server, fake kubelet and fake etcd
// (fakeapi_test.go, fakeetcd_test.go). decide_test.go checks the same
// decisions as a pure function; here they meet real requests, lost answers
// and crashes.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
)

func TestCreatesCluster(t *testing.T) {
	f := newFakeAPI(t)
	ec := f.putCluster("default", "example", map[string]any{"size": 3, "version": "v3.6.16"})
	uid := ec["metadata"].(map[string]any)["uid"].(string)
	startOperator(t, f)
	st := waitStatus(f, "example", inPhase(phaseRunning))

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

	// What each member's manifests contain is in testdata/manifests
	// (TestManifests). Here: each member is one of a new cluster of all
	// three, from the image the operator was started with.
	const initialCluster = "example-0=http://example-0:2380,example-1=http://example-1:2380,example-2=http://example-2:2380"
	tokens := map[string]bool{}
	for _, m := range []string{"example-0", "example-1", "example-2"} {
		labels := map[string]any{"app": "etcd", "etcd.coreos.com/cluster": "example", "etcd.coreos.com/member": m}
		svc := f.object("services", "default", m)
		if got := svc["metadata"].(map[string]any)["labels"]; !jsonEqual(got, labels) {
			t.Errorf("service %s labels = %v, want %v", m, got, labels)
		}
		if sel := svc["spec"].(map[string]any)["selector"]; !jsonEqual(sel, labels) {
			t.Errorf("service %s selector = %v, want %v", m, sel, labels)
		}

		pod := f.object("pods", "default", m)
		if got := pod["metadata"].(map[string]any)["labels"]; !jsonEqual(got, labels) {
			t.Errorf("pod %s labels = %v, want %v", m, got, labels)
		}
		c := pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		if c["image"] != "gcr.io/etcd-development/etcd:v3.6.16" {
			t.Errorf("pod %s image = %v", m, c["image"])
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
	}
	if len(tokens) != 1 {
		t.Errorf("members disagree on --initial-cluster-token: %v", tokens)
	}

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
	marked := 0
	for _, r := range f.requestsSince(0) {
		if r.Method == "PATCH" && r.Path == "/apis/coreos.com/v1/namespaces/default/etcdclusters/example" {
			// Once: the cluster ID in the annotations, nothing else.
			var p map[string]any
			_ = json.Unmarshal([]byte(r.Body), &p)
			if want := map[string]any{"metadata": map[string]any{"annotations": map[string]any{annotationClusterID: st.ClusterID}}}; !reflect.DeepEqual(p, want) {
				t.Errorf("the EtcdCluster patched with %s, want only its cluster ID annotation", r.Body)
			}
			marked++
			continue
		}
		if r.Method == "PATCH" {
			if r.Path != "/apis/coreos.com/v1/namespaces/default/etcdclusters/example/status" || r.ContentType != "application/merge-patch+json" {
				t.Errorf("status written as %s %s (%s)", r.Method, r.Path, r.ContentType)
			}
			var p struct{ Status clusterStatus }
			_ = json.Unmarshal([]byte(r.Body), &p)
			patches = append(patches, p.Status.Phase)
		}
	}
	if marked != 1 {
		t.Errorf("the cluster ID annotation written %d times, want once", marked)
	}
	// A pass may see the last Pod before the kubelet's first word on it
	// (the watch shows the create first, as the API server does): the
	// cluster has formed with a voter not yet running, which is Degraded,
	// and says so once. Nothing else is written between.
	phases := strings.Join(patches, " ")
	if phases != "Creating Running" && phases != "Creating Degraded Running" {
		t.Errorf("status phases written = %v, want Creating, Running (with Degraded between at most once)", patches)
	}

	f.waitFor("an event", func() bool { return len(f.events) >= 1 })
	reasons := map[string]int{}
	for _, ev := range f.postedEvents() {
		reasons[ev["reason"].(string)]++
		inv := ev["involvedObject"].(map[string]any)
		if inv["uid"] != uid || inv["kind"] != "EtcdCluster" || inv["name"] != "example" {
			t.Errorf("event involvedObject = %v", inv)
		}
	}
	if reasons[reasonClusterCreated] != 1 || reasons[reasonMemberCreated] != 0 {
		t.Errorf("event reasons = %v, want one %s (the members named in it)", reasons, reasonClusterCreated)
	}
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

			st := waitStatus(f, "example", inPhase(tc.wantPhase))
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
			waitStatus(f, "example", inPhase(phaseRunning))
			waitStatus(f, "other", inPhase(phaseRunning))
			if got := f.objectNames("pods"); !slices.Equal(got, []string{"example-0", "other-0"}) {
				t.Errorf("pods = %v", got)
			}
		})
	}
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
	st := waitStatus(f, "example", inPhase(phaseFailed))
	if want := "create service/example-0: the name is taken by an object this EtcdCluster does not own"; !strings.Contains(st.Message, want) {
		t.Errorf("status.message = %q, want %q", st.Message, want)
	}
	if pods := f.objectNames("pods"); len(pods) > 0 {
		t.Errorf("created pods %v next to a Service that is not the cluster's", pods)
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
	waitStatus(f, "valid", inPhase(phaseRunning))

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := waitStatus(f, tc.name, inPhase(phaseFailed))
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
	waitStatus(f, "size-zero", inPhase(phaseRunning))
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
	old := waitStatus(f, "example", inPhase(phaseRunning))
	oldUID := f.clusterUID("default", "example")
	f.deleteCluster("default", "example")
	op.waitLog("cluster deleted")
	f.putCluster("default", "example", size(1))
	newUID := f.clusterUID("default", "example")

	st := waitStatus(f, "example", inPhase(phaseFailed))
	if want := "create service/example-0: the name is taken by an object this EtcdCluster does not own"; !strings.Contains(st.Message, want) {
		t.Errorf("status.message = %q, want %q", st.Message, want)
	}
	f.collectGarbage("default", oldUID)
	st = waitStatus(f, "example", running(1))
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

// Kubernetes' view and etcd's, in the status: a crashed member shows within
// one Pod event, quorum loss is said plainly and changes nothing, and the
// cluster recovers by itself when the members come back.
func TestHealthIsReported(t *testing.T) {
	f, _ := startExample(t)
	st := waitStatus(f, "example", running(3))
	if c, _ := st.condition(condAvailable); c.Status != "True" || st.ClusterID == "" || st.CurrentVersion != "3.6.16" {
		t.Fatalf("status = %+v", st)
	}
	leaders := 0
	for _, m := range st.Members {
		if m.Leader {
			leaders++
		}
		if m.ID == "" || m.Version != "3.6.16" || m.Learner {
			t.Errorf("member status %+v", m)
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders in %+v", leaders, st.Members)
	}

	f.killMember("default", "example-2", true)
	st = waitStatus(f, "example", inPhase(phaseDegraded))
	if c, _ := st.condition(condAvailable); c.Status != "True" || st.Ready != "2/3" {
		t.Errorf("one member down: status = %+v", st)
	}
	f.killMember("default", "example-1", true)
	st = waitStatus(f, "example", inPhase(phaseUnavailable))
	if c, _ := st.condition(condAvailable); c.Status != "False" || c.Reason != "QuorumLost" || !strings.Contains(st.Message, "quorum lost: 1 of 3 voting members answer, 2 needed") {
		t.Errorf("two members down: status = %+v", st)
	}
	f.waitFor("a QuorumLost event", func() bool {
		for _, ev := range f.events {
			if ev["reason"] == "QuorumLost" {
				return true
			}
		}
		return false
	})
	f.killMember("default", "example-1", false)
	f.killMember("default", "example-2", false)
	waitStatus(f, "example", running(3))
	if log := f.membershipLog(); len(log) > 0 {
		t.Errorf("membership changed while members crashed and came back: %v", log)
	}
}

// A member Pod deleted on emptyDir takes its data with it: the member is
// replaced (removed from etcd, added again as a learner under the same
// name, started with empty data, promoted). With its PVC deleted too, the
// same, on a fresh PVC.
func TestDeletedMemberIsReplaced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   any
		delete func(f *fakeAPI)
	}{
		{name: "emptyDir", spec: onEmptyDir(3), delete: func(f *fakeAPI) { f.deletePod("default", "example-1") }},
		{name: "its volume claim deleted, then its Pod", spec: size(3), delete: func(f *fakeAPI) {
			f.deleteClaim("default", "example-1")
			f.deletePod("default", "example-1")
		}},
		// The PVC watch is behind the Pod watch: the operator sees the Pod
		// gone, not yet its claim, and makes the Pod again on a claim that
		// is gone; the scheduler keeps that Pod Pending for good.
		{name: "its Pod's deletion seen before its claim's", spec: size(3), delete: func(f *fakeAPI) {
			f.lagClaims()
			f.deleteClaim("default", "example-1")
			f.deletePod("default", "example-1")
			f.waitFor("Pod example-1 made again on its deleted claim", func() bool {
				p := f.objects["pods/default/example-1"]
				return p != nil && p["status"].(map[string]any)["phase"] == "Pending"
			})
			f.catchUpOwned()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testReplaced(t, tc.spec, tc.delete) })
	}
}

// A volume claim deleted while its member runs: nothing but the PVC's
// watch tells of it (the Pod runs on, and the claim waits for it:
// pvc-protection), to an operator that has nothing else to do.
func TestClaimDeletedAloneIsReplaced(t *testing.T) {
	f, _ := idleExample(t)
	f.deleteClaim("default", "example-1")
	waitStatus(f, "example", statusCheck{"Running after the replacement", func(st clusterStatus) bool {
		return running(3).ok(st) && len(f.etcdLog) == 3
	}})
	if want := []string{"remove example-1", "add example-1", "promote example-1"}; !slices.Equal(f.membershipLog(), want) {
		t.Errorf("membership changes = %v, want %v", f.membershipLog(), want)
	}
}

// A member's data wiped while its Pod lives: etcd stops, and the status
// says so; then the kubelet's restarts keep failing, which only the
// container's state tells, not its readiness. The operator is restarted
// in between, so that no pass of its own is under way when it does.
func TestWipedMemberIsReplaced(t *testing.T) {
	f, op := startExampleWith(t, onEmptyDir(3))
	waitStatus(f, "example", running(3))
	f.killMember("default", "example-1", true)
	waitStatus(f, "example", inPhase(phaseDegraded))
	op.stop()
	startOperator(t, f)
	f.waitFor("the new operator to watch clusters and Pods", func() bool { return len(f.streams) == 1 && len(f.podStreams) == 1 })
	const words = `{"level":"fatal","msg":"discovery failed","error":"member 22 has already been bootstrapped"}`
	f.crashLoop("default", "example-1", words)
	waitStatus(f, "example", statusCheck{"Running after the replacement", func(st clusterStatus) bool {
		return running(3).ok(st) && len(f.etcdLog) == 3
	}})
	if want := []string{"remove example-1", "add example-1", "promote example-1"}; !slices.Equal(f.membershipLog(), want) {
		t.Errorf("membership changes = %v, want %v", f.membershipLog(), want)
	}
	f.waitFor("a MemberReplaced event that says what etcd said", func() bool {
		return slices.ContainsFunc(f.events, func(ev map[string]any) bool {
			return ev["reason"] == reasonMemberReplaced && strings.Contains(fmt.Sprint(ev["message"]), "has already been bootstrapped")
		})
	})
}

func testReplaced(t *testing.T, spec any, deleteMember func(f *fakeAPI)) {
	f, _ := startExampleWith(t, spec)
	before := waitStatus(f, "example", running(3))
	oldClaim := f.object("persistentvolumeclaims", "default", "example-1")
	deleteMember(f)
	st := waitStatus(f, "example", statusCheck{"Running after the replacement", func(st clusterStatus) bool {
		return running(3).ok(st) && len(f.etcdLog) == 3
	}})
	if want := []string{"remove example-1", "add example-1", "promote example-1"}; !slices.Equal(f.membershipLog(), want) {
		t.Errorf("membership changes = %v, want %v", f.membershipLog(), want)
	}
	if newClaim := f.object("persistentvolumeclaims", "default", "example-1"); oldClaim != nil &&
		(newClaim == nil || newClaim["metadata"].(map[string]any)["uid"] == oldClaim["metadata"].(map[string]any)["uid"]) {
		t.Errorf("the new member's volume claim = %v, want a fresh one", newClaim)
	}
	if st.ClusterID != before.ClusterID {
		t.Errorf("cluster ID changed: %s -> %s", before.ClusterID, st.ClusterID)
	}
	if got := f.etcdMembers("default", "example"); !slices.Equal(got, membersOf(3)) {
		t.Errorf("etcd members = %v", got)
	}
	cmd := f.object("pods", "default", "example-1")["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["command"]
	if s := fmt.Sprint(cmd); !strings.Contains(s, "--initial-cluster-state=existing") {
		t.Errorf("the new member's command = %s, want it to join the existing cluster", s)
	}
	f.waitFor("a MemberReplaced event", func() bool {
		return slices.ContainsFunc(f.events, func(ev map[string]any) bool { return ev["reason"] == reasonMemberReplaced })
	})
}

// 3 -> 5 -> 3 -> 1 -> 3, one member at a time, learners first.
func TestResize(t *testing.T) {
	f, _ := startExample(t)
	waitStatus(f, "example", running(3))
	id := statusOf(f.cluster("default", "example")).ClusterID
	for _, n := range []int{5, 3, 1, 3} {
		f.putCluster("default", "example", size(n))
		st := waitStatus(f, "example", statusCheck{fmt.Sprintf("Running at size %d", n), func(st clusterStatus) bool {
			return running(n).ok(st) && len(st.Members) == n
		}})
		if got := f.etcdMembers("default", "example"); !slices.Equal(got, membersOf(n)) {
			t.Errorf("size %d: etcd members = %v", n, got)
		}
		if got := f.objectNames("pods"); !slices.Equal(got, membersOf(n)) {
			t.Errorf("size %d: pods = %v", n, got)
		}
		if got, want := f.objectNames("services"), append(membersOf(n), "example-client"); !slices.Equal(got, want) {
			t.Errorf("size %d: services = %v, want %v", n, got, want)
		}
		if st.ClusterID != id {
			t.Errorf("size %d: cluster ID %s, want %s", n, st.ClusterID, id)
		}
	}
	want := []string{
		"add example-3", "promote example-3", "add example-4", "promote example-4",
		"remove example-4", "remove example-3",
		"remove example-2", "remove example-1",
		"add example-1", "promote example-1", "add example-2", "promote example-2",
	}
	if got := f.membershipLog(); !slices.Equal(got, want) {
		t.Errorf("membership changes:\n%v\nwant\n%v", got, want)
	}
}

// A size changed back while a learner has not caught up ends at the new
// size without promoting it.
func TestResizeChangedMidway(t *testing.T) {
	f, _ := startExample(t)
	waitStatus(f, "example", running(3))
	f.mu.Lock()
	f.lagLearners = true
	f.mu.Unlock()
	f.putCluster("default", "example", size(5))
	waitStatus(f, "example", progressing("PromotingLearner"))
	f.putCluster("default", "example", size(3))
	waitStatus(f, "example", statusCheck{"Running at 3", func(st clusterStatus) bool { return running(3).ok(st) && st.ObservedGeneration == 3 }})
	if want := []string{"add example-3", "remove example-3"}; !slices.Equal(f.membershipLog(), want) {
		t.Errorf("membership changes = %v, want %v", f.membershipLog(), want)
	}
	if got := f.objectNames("pods"); !slices.Equal(got, membersOf(3)) {
		t.Errorf("pods = %v", got)
	}
}

// A version change rolls one member at a time, the leader last; an image
// the kubelet cannot pull stops after one member, and setting the version
// back repairs it.
func TestRollingUpgrade(t *testing.T) {
	f, _ := startExample(t)
	st := waitStatus(f, "example", running(3))
	leader := ""
	for _, m := range st.Members {
		if m.Leader {
			leader = m.Name
		}
	}
	mark := f.requestCount()
	f.putCluster("default", "example", map[string]any{"size": 3, "version": "v3.7.3"})
	st = waitStatus(f, "example", statusCheck{"Running 3.7.3", func(st clusterStatus) bool { return running(3).ok(st) && st.CurrentVersion == "3.7.3" }})
	var order []string
	for _, r := range f.requestsSince(mark) {
		if r.Method == "PATCH" && strings.Contains(r.Path, "/pods/") {
			order = append(order, r.Path[strings.LastIndex(r.Path, "/")+1:])
		}
	}
	if len(order) != 3 || order[2] != leader {
		t.Errorf("upgrade order = %v, want 3 members with the leader %s last", order, leader)
	}
	if len(f.membershipLog()) > 0 {
		t.Errorf("an upgrade changed membership: %v", f.membershipLog())
	}

	mark = f.requestCount()
	f.putCluster("default", "example", map[string]any{"size": 3, "version": "v3.7.99"})
	st = waitStatus(f, "example", progressing("UpgradeStalled"))
	if !strings.Contains(st.Message, "ImagePullBackOff") || st.Phase != phaseDegraded {
		t.Errorf("stalled upgrade: status = %+v", st)
	}
	if c, _ := st.condition(condAvailable); c.Status != "True" {
		t.Errorf("a stalled upgrade left the cluster unavailable: %+v", c)
	}
	patched := 0
	for _, r := range f.requestsSince(mark) {
		if r.Method == "PATCH" && strings.Contains(r.Path, "/pods/") {
			patched++
		}
	}
	if patched != 1 {
		t.Errorf("%d members patched to an image that cannot be pulled, want 1", patched)
	}
	f.putCluster("default", "example", map[string]any{"size": 3, "version": "v3.7.3"})
	waitStatus(f, "example", statusCheck{"Running after the revert", func(st clusterStatus) bool { return running(3).ok(st) && st.ObservedGeneration == 4 }})
}

// A cluster whose Pods are not running costs nothing while it waits: the
// Pod watch wakes the operator, no timer does. Once a Pod is Ready, etcd
// should answer, and the operator looks again until it does.
func TestBootstrapWaitPollsOnlyWhenAPodIsReady(t *testing.T) {
	fresh := in(3, "v3.6.16")
	fresh.Prev, fresh.FormedID = clusterStatus{}, ""
	w := newWorld(3).do(func(w *world) {
		w.obs.Etcd = etcdView{}
		for i := range w.obs.Pods {
			w.obs.Pods[i].Phase, w.obs.Pods[i].Ready = "Pending", false
		}
	})
	if _, s := decide(fresh, w.obs); s.Action != actNone || s.Again != 0 {
		t.Errorf("Pods pending: step %+v, want no action and no timer", s)
	}
	w.pod("example-0").Phase, w.pod("example-0").Ready = "Running", true
	if _, s := decide(fresh, w.obs); s.Action != actNone || s.Again == 0 {
		t.Errorf("a Pod Ready, etcd silent: step %+v, want a timer", s)
	}
}

// The operator may die, or lose its connection, between any two requests.
// For each k, the k-th write of a resize 3->5 (or of a replacement) is
// never answered (served or not) and the operator is stopped there; a new
// operator must converge with no member added twice.
func TestCrashAtEveryStep(t *testing.T) {
	for _, tc := range []struct {
		name   string
		start  func(f *fakeAPI)
		size   int
		served bool
	}{
		{name: "resize, request lost", start: func(f *fakeAPI) { f.putCluster("default", "example", onEmptyDir(5)) }, size: 5},
		{name: "resize, answer lost", start: func(f *fakeAPI) { f.putCluster("default", "example", onEmptyDir(5)) }, size: 5, served: true},
		// On emptyDir a deleted Pod's member is replaced (on a volume it
		// comes back with one create: TestMemberBackOnItsVolume).
		{name: "replacement, answer lost", start: func(f *fakeAPI) { f.deletePod("default", "example-1") }, size: 3, served: true},
		{name: "replacement, request lost", start: func(f *fakeAPI) { f.deletePod("default", "example-1") }, size: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k := 1; ; k++ {
				f, op := startExampleWith(t, onEmptyDir(3))
				waitStatus(f, "example", running(3))
				var mu sync.Mutex
				writes, hung := 0, make(chan struct{})
				f.setFault(func(r request) (int, string, string) {
					if r.Method == "GET" || strings.HasSuffix(r.Path, "/events") || strings.HasSuffix(r.Path, "/status") ||
						strings.HasSuffix(r.Path, "/maintenance/status") || strings.HasSuffix(r.Path, "/member/list") {
						return 0, "", ""
					}
					mu.Lock()
					writes++
					n := writes
					mu.Unlock()
					if n != k {
						return 0, "", ""
					}
					close(hung)
					f.wake() // the wait below watches hung, which is no request
					if tc.served {
						return answerLost, "", ""
					}
					<-r.Ctx.Done()
					return 0, "", ""
				})
				tc.start(f)
				reached := false
				f.waitFor("the operator to converge or to reach write "+fmt.Sprint(k), func() bool {
					select {
					case <-hung:
						reached = true
						return true
					default:
					}
					return slices.Contains(f.etcdLog, "promote example-"+fmt.Sprint(tc.size-2)) &&
						running(tc.size).ok(statusOf(f.clusters["default/example"])) && len(f.etcds["default/example"].Members) == tc.size &&
						!slices.ContainsFunc(f.etcds["default/example"].Members, func(m *fakeMember) bool { return m.Learner })
				})
				op.stop()
				if !reached {
					if k < 4 {
						t.Fatalf("only %d writes in the whole sequence", k-1)
					}
					t.Logf("cut the sequence at each of its %d writes", k-1)
					return // every write of the sequence has been cut once
				}
				f.setFault(nil)
				startOperator(t, f)
				waitStatus(f, "example", statusCheck{"Running after the crash", func(st clusterStatus) bool {
					return running(tc.size).ok(st) && len(st.Members) == tc.size && slices.Contains(f.etcdLog, "promote example-"+fmt.Sprint(tc.size-2))
				}})
				if got := f.etcdMembers("default", "example"); !slices.Equal(got, membersOf(tc.size)) {
					t.Fatalf("cut at write %d: etcd members = %v", k, got)
				}
				adds := map[string]int{}
				for _, l := range f.membershipLog() {
					if strings.HasPrefix(l, "add ") {
						adds[l]++
					}
				}
				for l, n := range adds {
					if n > 1 {
						t.Fatalf("cut at write %d: %q %d times: %v", k, l, n, f.membershipLog())
					}
				}
				if k > 40 {
					t.Fatal("no end to the writes")
				}
			}
		})
	}
}

// A pass over a cluster whose status already says what the pass finds
// writes nothing and records no Event: a healthy cluster, an invalid spec
// already reported, a refused version already reported.
func TestPassWritesOnlyNews(t *testing.T) {
	// The change (generation 2) reported with the reason.
	reported := func(reason string) statusCheck {
		return statusCheck{"generation 2 reported: " + reason, func(st clusterStatus) bool {
			return st.ObservedGeneration == 2 && progressing(reason).ok(st)
		}}
	}
	for _, tc := range []struct {
		name     string
		specs    []any
		reported statusCheck
		foreign  bool
	}{
		{name: "healthy", reported: running(3)},
		{name: "invalid spec", specs: []any{size(9)}, reported: reported("InvalidSpec")},
		{name: "refused version", specs: []any{map[string]any{"size": 3, "version": "v3.8.0"}}, reported: reported("VersionRefused")},
		{name: "a Pod, a Service and a PVC of another cluster of the same name", reported: running(3), foreign: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := settledExample(t, tc.specs, tc.reported)
			if tc.foreign {
				// Objects of another EtcdCluster of the same name (deleted,
				// not yet collected), labelled as members of this one.
				labels := map[string]any{labelApp: "etcd", labelCluster: "example", labelMember: "example-9"}
				owner := ownerReference{APIVersion: apiVersion, Kind: kind, Name: "example", UID: "another-uid", Controller: true}
				f.mu.Lock()
				meta := map[string]any{"name": "example-9", "namespace": "default", "labels": labels, "ownerReferences": []any{owner}}
				f.objects["services/default/example-9"] = map[string]any{"metadata": meta}
				f.objects["pods/default/example-9"] = map[string]any{"metadata": meta,
					"spec": map[string]any{"containers": []any{map[string]any{"name": "etcd", "image": repo + ":v3.6.16"}}}}
				f.objects["persistentvolumeclaims/default/example-9"] = map[string]any{"metadata": meta,
					"spec": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": "8Gi"}}}, "status": map[string]any{"phase": "Bound"}}
				f.mu.Unlock()
			}
			ctl := newController(f)
			ec, err := decodeCluster(mustJSON(f.cluster("default", "example")))
			if err != nil {
				t.Fatal(err)
			}
			mark := f.requestCount()
			if _, err := ctl.reconcile(context.Background(), ec); err != nil {
				t.Fatal(err)
			}
			for _, r := range f.requestsSince(mark) {
				if r.Method != "GET" && !strings.HasSuffix(r.Path, "/v3/maintenance/status") && !strings.HasSuffix(r.Path, "/v3/cluster/member/list") {
					t.Errorf("a pass that found nothing new sent %s %s", r.Method, r.Path)
				}
			}
			if n := len(ctl.events.queue); n > 0 {
				t.Errorf("a pass that found nothing new recorded %d Events", n)
			}
		})
	}
}

// A step whose effect is already there (its answer was lost, or an earlier
// pass took it) is done, not an error, and changes nothing.
func TestStepAlreadyTaken(t *testing.T) {
	f := settledExample(t, nil, running(3))
	ctl := newController(f)
	ctx := context.Background()
	ec, err := decodeCluster(mustJSON(f.cluster("default", "example")))
	if err != nil {
		t.Fatal(err)
	}
	in := newInput(ec, repo)
	obs, err := ctl.observe(ctx, ec, input{Base: "example", Prev: clusterStatus{CurrentVersion: ""}})
	if err != nil || obs.Etcd.LeaderPod == "" {
		t.Fatalf("observe = %+v, %v", obs, err)
	}
	pods, svcs := f.objectNames("pods"), f.objectNames("services")
	d := newDecision(in, obs)
	plan := d.plan(d.image())
	for _, s := range []step{
		d.etcdStep(actAddMember, "example-2", "", "/v3/cluster/member/add", map[string]any{"peerURLs": []string{peerURL("example-2", false)}, "isLearner": true}),
		d.removeStep(memberView{ID: "999", Name: "example-9"}),
		{Action: actDeletePod, Member: "example-9", Delete: "pods"},
		{Action: actDeleteSvc, Member: "example-9", Delete: "services"},
		{Action: actCreateClient, Create: []object{{Resource: "services", Name: "example-client", Body: plan.clientService()}}},
		d.bootstrapStep(membersOf(3)),
	} {
		s.Namespace, s.Cluster, s.Owner = in.Namespace, in.Name, in.UID
		out, err := ctl.act(ctx, s)
		if err != nil {
			t.Errorf("%s %s: %v", s.Action, s.Member, err)
		}
		if s.Delete == "" && out != stepNoop {
			t.Errorf("%s %s: outcome %d, want a no-op", s.Action, s.Member, out)
		}
	}
	// Reading again a cluster that is gone: nothing to do, nothing to retry.
	if got, again, err := ctl.handle(ctx, item{cluster: &EtcdCluster{Metadata: objectMeta{Namespace: "default", Name: "gone"}}, refresh: true}); got != nil || again != 0 || err != nil {
		t.Errorf("handle of a cluster that is gone = %v, %v, %v; want nothing", got, again, err)
	}
	if log := f.membershipLog(); len(log) > 0 {
		t.Errorf("membership changed: %v", log)
	}
	if !slices.Equal(f.objectNames("pods"), pods) || !slices.Equal(f.objectNames("services"), svcs) {
		t.Errorf("objects changed: pods %v, services %v", f.objectNames("pods"), f.objectNames("services"))
	}
}

// A pass under way when its cluster is deleted writes nothing more: no
// step, no status, no Event. A new EtcdCluster of the same name takes the
// same paths, and would get the old one's objects and status.
func TestPassOfADeletedClusterWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		spec    any // size 9 is invalid: a status and an Event, no step
		deleted bool
	}{{size(3), false}, {size(3), true}, {size(9), false}, {size(9), true}} {
		deleted := tc.deleted
		f := newFakeAPI(t)
		f.putCluster("default", "example", tc.spec)
		ec, err := decodeCluster(mustJSON(f.cluster("default", "example")))
		if err != nil {
			t.Fatal(err)
		}
		ctl := newController(f)
		if deleted {
			ctl.forgetDeleted(ec)
		}
		n := f.requestCount()
		if _, err := ctl.reconcile(context.Background(), ec); err != nil {
			t.Fatal(err)
		}
		var writes []string
		for _, r := range f.requestsSince(n) {
			if r.Method != "GET" {
				writes = append(writes, r.Method+" "+r.Path)
			}
		}
		switch {
		case deleted && (len(writes) > 0 || len(ctl.events.queue) > 0):
			t.Errorf("spec %v, deleted during the pass: %v and %d Events", tc.spec, writes, len(ctl.events.queue))
		case !deleted && len(writes) == 0:
			t.Errorf("spec %v: the pass wrote nothing: the test shows nothing", tc.spec)
		}
	}
}
