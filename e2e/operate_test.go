package e2e

// Day-2 on the real node: the operator's health reporting, resize, member
// replacement and rolling upgrade, against etcd members that the kubelet
// runs. Each test has a namespace and an operator of its own.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// e2eStatus is an EtcdCluster's status as the operator writes it.
type e2eStatus struct {
	Phase, Message, Ready, ClusterID, CurrentVersion string
	ReadyMembers                                     int
	Members                                          []struct {
		Name, ID               string
		Ready, Leader, Learner bool
		Version                string
	}
	Conditions         []struct{ Type, Status, Reason, Message string }
	ObservedGeneration int64
	TLS                struct{ Auth, User, CredentialsRotation, CARotation string }
}

func (s e2eStatus) cond(typ string) string {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func (s e2eStatus) reason(typ string) string {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c.Reason
		}
	}
	return ""
}

// day2 is one test's namespace, operator and cluster.
type day2 struct {
	t        *testing.T
	ns, name string
	emptyDir bool
}

// startDay2 makes a namespace, starts an operator for it and applies a
// cluster of size members, each on a PersistentVolumeClaim.
func startDay2(t *testing.T, ns, name string, size int, version string) *day2 {
	t.Helper()
	return startDay2With(t, ns, name, size, version, false)
}

// startEphemeral is startDay2 with the members' data on emptyDir: a lost
// Pod is a lost member, which the tests of replacement need.
func startEphemeral(t *testing.T, ns, name string, size int, version string) *day2 {
	t.Helper()
	return startDay2With(t, ns, name, size, version, true)
}

func startDay2With(t *testing.T, ns, name string, size int, version string, emptyDir bool) *day2 {
	t.Helper()
	needNode(t)
	nodeNamespace(t, ns)
	d := &day2{t: t, ns: ns, name: name, emptyDir: emptyDir}
	startOperator(t, ns, "")
	d.apply(size, version)
	return d
}

// apply sets the cluster's size and version, making it the first time.
func (d *day2) apply(size int, version string) {
	d.t.Helper()
	applyCluster(d.t, Cluster{Namespace: d.ns, Name: d.name, Size: size, Version: version, EmptyDir: d.emptyDir})
}

func (d *day2) status() (e2eStatus, int64) {
	var o struct {
		Metadata struct{ Generation int64 }
		Status   e2eStatus
	}
	_ = cp.Get("/apis/coreos.com/v1/namespaces/"+d.ns+"/etcdclusters/"+d.name, &o)
	return o.Status, o.Metadata.Generation
}

// wait polls the status until cond holds for the current generation.
func (d *day2) wait(what string, timeout time.Duration, cond func(e2eStatus) bool) e2eStatus {
	d.t.Helper()
	var st e2eStatus
	err := Eventually(timeout, d.ns+"/"+d.name+": "+what, func() (bool, error) {
		var gen int64
		st, gen = d.status()
		return st.ObservedGeneration == gen && cond(st), nil
	})
	if err != nil {
		d.dumpMembers()
		d.t.Fatalf("%v; last status: %+v", err, st)
	}
	return st
}

// dumpMembers logs the end of each member's etcd log: what etcd said is
// the first thing to read when a cluster did not get where a test waited.
func (d *day2) dumpMembers() {
	out, err := cp.Kubectl("", "get", "pods", "-n", d.ns, "-l", "etcd.coreos.com/cluster="+d.name, "-o", "name")
	if err != nil {
		d.t.Logf("member Pods: %v", err)
		return
	}
	for _, pod := range strings.Fields(out) {
		pod = strings.TrimPrefix(pod, "pod/")
		logs, err := cp.PodLogs(d.ns, pod, "etcd")
		if err != nil {
			d.t.Logf("etcd log of %s: %v", pod, err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(logs), "\n")
		d.t.Logf("etcd log of %s, last %d lines:\n%s", pod, min(len(lines), 40), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// record keeps every status the operator writes from now on (a watch
// misses none, however short-lived); seen reports whether one matched.
func (d *day2) record() (seen func(cond func(e2eStatus) bool) bool) {
	d.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d.t.Cleanup(cancel)
	events, err := cp.Watch(ctx, "/apis/coreos.com/v1/namespaces/"+d.ns+"/etcdclusters?fieldSelector=metadata.name%3D"+d.name)
	if err != nil {
		d.t.Fatal(err)
	}
	var mu sync.Mutex
	var all []e2eStatus
	go func() {
		for ev := range events {
			var o struct{ Status e2eStatus }
			if json.Unmarshal(ev.Object, &o) == nil {
				mu.Lock()
				all = append(all, o.Status)
				mu.Unlock()
			}
		}
	}()
	return func(cond func(e2eStatus) bool) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(all, cond)
	}
}

func (d *day2) running(n int) e2eStatus {
	d.t.Helper()
	return d.wait(fmt.Sprintf("Running %d/%d", n, n), 4*time.Minute, func(st e2eStatus) bool {
		return st.Phase == "Running" && st.Ready == fmt.Sprintf("%d/%d", n, n) && len(st.Members) == n
	})
}

func (d *day2) member(i int) string { return fmt.Sprintf("%s-%d", d.name, i) }

func (d *day2) members(n int) []string {
	var out []string
	for i := range n {
		out = append(out, d.member(i))
	}
	return out
}

// etcd POSTs to a member's JSON gateway through the API server's Pod proxy.
func (d *day2) etcd(pod, path string, req, resp any) error {
	b, _ := json.Marshal(req)
	code, body, err := cp.Do("POST", "/api/v1/namespaces/"+d.ns+"/pods/"+pod+":2379/proxy"+path, b, "application/json")
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("POST %s on %s: %d %s", path, pod, code, body)
	}
	if resp != nil {
		return json.Unmarshal(body, resp)
	}
	return nil
}

// health is what a member's own /health says.
func (d *day2) health(pod string) bool {
	code, body, err := cp.Do("GET", "/api/v1/namespaces/"+d.ns+"/pods/"+pod+":2379/proxy/health", nil, "")
	var h struct{ Health string }
	return err == nil && code == 200 && json.Unmarshal(body, &h) == nil && h.Health == "true"
}

// etcdMembers asks pod for the member list: the cluster ID and the names of
// started members (an unstarted one shows as "(unstarted)").
func (d *day2) etcdMembers(pod string) (string, []string) {
	d.t.Helper()
	var list struct {
		Header struct {
			ClusterID string `json:"cluster_id"`
		}
		Members []struct {
			Name       string
			ClientURLs []string `json:"clientURLs"`
			IsLearner  bool     `json:"isLearner"`
		}
	}
	if err := d.etcd(pod, "/v3/cluster/member/list", map[string]any{}, &list); err != nil {
		d.t.Fatal(err)
	}
	var names []string
	for _, m := range list.Members {
		n := m.Name
		if n == "" || len(m.ClientURLs) == 0 {
			n = "(unstarted)"
		}
		if m.IsLearner {
			n += "(learner)"
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return list.Header.ClusterID, names
}

// put and get a key through the client Service, by the API server's
// Service proxy (which sends to a ready endpoint).
func (d *day2) put(key, value string) error {
	b, _ := json.Marshal(map[string]string{"key": b64(key), "value": b64(value)})
	code, body, err := cp.Do("POST", "/api/v1/namespaces/"+d.ns+"/services/"+d.name+"-client:2379/proxy/v3/kv/put", b, "application/json")
	if err == nil && code != 200 {
		err = fmt.Errorf("put %s: %d %s", key, code, body)
	}
	return err
}

func (d *day2) get(key string) string {
	d.t.Helper()
	b, _ := json.Marshal(map[string]string{"key": b64(key)})
	code, body, err := cp.Do("POST", "/api/v1/namespaces/"+d.ns+"/services/"+d.name+"-client:2379/proxy/v3/kv/range", b, "application/json")
	if err != nil || code != 200 {
		d.t.Fatalf("get %s: %v %d %s", key, err, code, body)
	}
	var rng struct{ Kvs []struct{ Value string } }
	_ = json.Unmarshal(body, &rng)
	if len(rng.Kvs) != 1 {
		return ""
	}
	return unb64(rng.Kvs[0].Value)
}

// writer writes a key every 100 ms through the client Service and keeps
// the longest time between two successful writes.
type writer struct {
	stop, done chan struct{}
	mu         sync.Mutex
	longest    time.Duration
	writes     int
}

func (d *day2) startWriter() *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		last := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			if d.put("/writer", strconv.Itoa(i)) == nil {
				now := time.Now()
				w.mu.Lock()
				w.longest = max(w.longest, now.Sub(last))
				w.writes++
				w.mu.Unlock()
				last = now
			}
		}
	}()
	d.t.Cleanup(w.end)
	return w
}

func (w *writer) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// report ends the writer and logs its longest gap.
func (w *writer) report(t *testing.T, what string) time.Duration {
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("%s: a client writing every 100 ms: %d writes, longest gap %s", what, w.writes, w.longest.Round(time.Millisecond))
	fmt.Printf("e2e: %s: longest write gap %s (%d writes)\n", what, w.longest.Round(time.Millisecond), w.writes)
	return w.longest
}

// signal sends sig to a member's etcd, found on the host by its Pod's
// cgroup. SIGSTOP holds a member down (its container keeps running, its
// probes fail) for as long as a test needs; SIGCONT lets it go on.
func (d *day2) signal(pod string, sig syscall.Signal) {
	d.t.Helper()
	pids := PodProcesses(cp.PodUID(d.ns, pod))
	if len(pids) == 0 {
		d.t.Fatalf("no process of Pod %s/%s runs", d.ns, pod)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil {
			d.t.Fatal(err)
		}
		if sig == syscall.SIGSTOP {
			d.t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		}
	}
}

func (d *day2) podUID(pod string) string { return cp.PodUID(d.ns, pod) }

func (d *day2) deletePods(pods ...string) {
	d.t.Helper()
	args := append([]string{"delete", "pod", "-n", d.ns, "--wait=false"}, pods...)
	if _, err := cp.Kubectl("", args...); err != nil {
		d.t.Fatal(err)
	}
}

func (d *day2) events(reason string) int { return len(d.eventMessages(reason)) }

// eventMessages are the messages of the cluster's Events of reason.
func (d *day2) eventMessages(reason string) []string {
	var l struct {
		Items []struct {
			Reason, Message string
			InvolvedObject  struct{ Name string }
		}
	}
	_ = cp.Get("/api/v1/namespaces/"+d.ns+"/events", &l)
	var msgs []string
	for _, e := range l.Items {
		if e.Reason == reason && e.InvolvedObject.Name == d.name {
			msgs = append(msgs, e.Message)
		}
	}
	return msgs
}

func unb64(s string) string {
	b, _ := base64.StdEncoding.DecodeString(s)
	return string(b)
}

// Health: Available within seconds of the members answering /health; a
// crashed member shows as 2/3 and Degraded until the kubelet restarts it;
// two members stopped make Available False with quorum lost; the status
// never calls a member ready that /health calls unhealthy.
func TestHealth(t *testing.T) {
	d := startDay2(t, "health", "example", 3, "v3.6.16")
	var healthyAt time.Time
	err := Eventually(4*time.Minute, "every member answering /health", func() (bool, error) {
		for _, m := range d.members(3) {
			if !d.health(m) {
				return false, nil
			}
		}
		healthyAt = time.Now()
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st := d.wait("Available", time.Minute, func(st e2eStatus) bool { return st.cond("Available") == "True" })
	delay := time.Since(healthyAt)
	t.Logf("Available %s after every member answered /health", delay.Round(time.Millisecond))
	fmt.Printf("e2e: health: Available %s after all members answered /health\n", delay.Round(time.Millisecond))
	st = d.running(3)
	if st.ClusterID == "" || st.CurrentVersion != "3.6.16" || st.cond("Degraded") != "False" {
		t.Errorf("healthy cluster's status: %+v", st)
	}
	if out, err := cp.Kubectl("", "wait", "-n", d.ns, "--for=condition=Available", "etcdcluster/example", "--timeout=10s"); err != nil {
		t.Errorf("kubectl wait: %v %s", err, out)
	}
	if out, _ := cp.Kubectl("", "get", "etcdclusters", "-n", d.ns); !strings.Contains(out, "3/3") || !strings.Contains(out, "Running") {
		t.Errorf("kubectl get etcdclusters:\n%s", out)
	}
	checkHonest := func(st e2eStatus) {
		for _, m := range st.Members {
			if m.Ready && !d.health(m.Name) {
				// The status may lag a change by one pass; look again.
				if st2, _ := d.status(); slices.ContainsFunc(st2.Members, func(m2 struct {
					Name, ID               string
					Ready, Leader, Learner bool
					Version                string
				}) bool {
					return m2.Name == m.Name && m2.Ready
				}) && !d.health(m.Name) {
					t.Errorf("status calls %s ready; its /health says no", m.Name)
				}
			}
		}
	}
	checkHonest(st)

	// A crash of a follower: the kubelet restarts etcd in the same Pod,
	// with its data. The status says so while it lasts (a second or two).
	follower := ""
	for _, m := range st.Members {
		if !m.Leader {
			follower = m.Name
		}
	}
	uid := d.podUID(follower)
	seen := d.record()
	if _, err := cp.KillMember(d.ns, follower); err != nil {
		t.Fatal(err)
	}
	err = Eventually(time.Minute, "a status READY 2/3, Degraded, Available", func() (bool, error) {
		return seen(func(st e2eStatus) bool {
			return st.Ready == "2/3" && st.cond("Degraded") == "True" && st.cond("Available") == "True" && st.Phase == "Degraded"
		}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st = d.running(3)
	checkHonest(st)
	if d.podUID(follower) != uid {
		t.Error("a crashed member was replaced; the kubelet should have restarted it in place")
	}

	// Two of three stopped: no quorum, said plainly; nothing is changed.
	d.signal(d.member(1), syscall.SIGSTOP)
	d.signal(d.member(2), syscall.SIGSTOP)
	st = d.wait("Available False: quorum lost", 2*time.Minute, func(st e2eStatus) bool {
		return st.cond("Available") == "False" && strings.Contains(st.Message, "quorum lost")
	})
	t.Logf("quorum lost: %s", st.Message)
	checkHonest(st)
	d.signal(d.member(1), syscall.SIGCONT)
	d.signal(d.member(2), syscall.SIGCONT)
	st = d.running(3)
	checkHonest(st)
	if n := d.events("MemberReplaced"); n > 0 {
		t.Errorf("%d members replaced; none was lost", n)
	}
}

// Resize 3 -> 5 -> 3 -> 1 -> 3 with a key written first and read after each
// step, one cluster ID, the member list equal to spec, a client writing
// throughout; the operator is killed in the middle of the first step.
func TestResize(t *testing.T) {
	d := startDay2(t, "resize", "example", 3, "v3.6.16")
	st := d.running(3)
	id := st.ClusterID
	if err := d.put("/before", "resize"); err != nil {
		t.Fatal(err)
	}
	w := d.startWriter()
	for i, n := range []int{5, 3, 1, 3} {
		d.apply(n, "v3.6.16")
		if i == 0 {
			// Kill the operator while the first learner joins; a new one
			// must finish without a second add.
			d.wait("a member being added", 2*time.Minute, func(st e2eStatus) bool {
				r := st.reason("Progressing")
				return r == "AddingMember" || r == "StartingMember" || r == "PromotingLearner" || r == "WaitingForLearner"
			})
			cp.StopProcess(operatorName(d.ns), 0)
			startOperator(t, d.ns, "")
		}
		st := d.running(n)
		if st.ClusterID != id {
			t.Errorf("size %d: cluster ID %s, want %s", n, st.ClusterID, id)
		}
		gotID, names := d.etcdMembers(d.member(0))
		if gotID != id || !slices.Equal(names, d.members(n)) {
			t.Errorf("size %d: etcd says cluster %s, members %v; want %s, %v", n, gotID, names, id, d.members(n))
		}
		if v := d.get("/before"); v != "resize" {
			t.Errorf("size %d: the key written before reads %q", n, v)
		}
		t.Logf("size %d: members %v", n, names)
	}
	w.report(t, "resize 3->5->3->1->3")
}

// Replacement: a deleted member Pod is replaced by a new member; two of
// three deleted at once is quorum lost, said and left alone; one of five
// deleted while another is unready is replaced alone.
func TestReplaceMember(t *testing.T) {
	d := startEphemeral(t, "replace", "example", 3, "v3.6.16")
	st := d.running(3)
	id := st.ClusterID
	if err := d.put("/before", "replace"); err != nil {
		t.Fatal(err)
	}
	w := d.startWriter()
	old := d.podUID(d.member(1))
	d.deletePods(d.member(1))
	err := Eventually(3*time.Minute, "a MemberReplaced event", func() (bool, error) { return d.events("MemberReplaced") == 1, nil })
	if err != nil {
		t.Fatal(err)
	}
	st = d.running(3)
	w.report(t, "replace one member of 3")
	if d.podUID(d.member(1)) == old {
		t.Error("the member's Pod was not replaced")
	}
	gotID, names := d.etcdMembers(d.member(0))
	if gotID != id || st.ClusterID != id || !slices.Equal(names, d.members(3)) {
		t.Errorf("after the replacement: cluster %s, members %v; want %s and %v", gotID, names, id, d.members(3))
	}
	if v := d.get("/before"); v != "replace" {
		t.Errorf("the key written before reads %q", v)
	}

	t.Run("one of five while another is unready", func(t *testing.T) {
		d5 := startEphemeral(t, "replace5", "five", 5, "v3.6.16")
		d5.running(5)
		unready := d5.podUID(d5.member(3))
		d5.signal(d5.member(3), syscall.SIGSTOP)
		d5.wait("4/5", time.Minute, func(st e2eStatus) bool { return st.Ready == "4/5" })
		d5.deletePods(d5.member(1))
		d5.wait("five-1 replaced, five-3 still unready", 3*time.Minute, func(st e2eStatus) bool {
			return d5.events("MemberReplaced") == 1 && st.Ready == "4/5" && st.reason("Progressing") != "" && len(st.Members) == 5 &&
				slices.ContainsFunc(st.Members, func(m struct {
					Name, ID               string
					Ready, Leader, Learner bool
					Version                string
				}) bool {
					return m.Name == d5.member(1) && m.Ready
				})
		})
		if d5.podUID(d5.member(3)) != unready {
			t.Error("the unready member was replaced too")
		}
		d5.signal(d5.member(3), syscall.SIGCONT)
		d5.running(5)
		if n := d5.events("MemberReplaced"); n != 1 {
			t.Errorf("%d replacements, want 1", n)
		}
	})

	t.Run("two of three at once", func(t *testing.T) {
		d.deletePods(d.member(0), d.member(2))
		st := d.wait("quorum lost", 2*time.Minute, func(st e2eStatus) bool {
			return st.cond("Available") == "False" && strings.Contains(st.Message, "quorum lost")
		})
		t.Logf("status: %s", st.Message)
		var list struct{ Members []struct{ Name string } }
		if err := d.etcd(d.member(1), "/v3/cluster/member/list", map[string]any{"linearizable": false}, &list); err != nil {
			t.Fatal(err)
		}
		// A member whose Pod is being deleted is removed from etcd at once
		// while the others keep a quorum: the first deletion seen may be
		// (the other not seen yet), never both, and nothing once the
		// quorum is lost.
		if len(list.Members) < 2 {
			t.Errorf("two members removed, one of them without a quorum: %+v", list.Members)
		}
		// Events wait for the work queue to be idle (report.go): a
		// removal's may come a pass or two after the status.
		want := 1 + 3 - len(list.Members)
		err := Eventually(90*time.Second, fmt.Sprintf("%d MemberReplaced events", want), func() (bool, error) {
			got := d.events("MemberReplaced")
			if got > want {
				return false, fmt.Errorf("%d MemberReplaced events for %d members left, want the first test's and one per removal", got, len(list.Members))
			}
			return got == want, nil
		})
		if err != nil {
			t.Error(err)
		}
	})
}

// Rolling upgrade v3.6.16 -> v3.7.3 in place, one member at a time, the data
// kept; a skipped minor and a downgrade refused; an image that cannot be
// pulled stops after one member and is repaired by setting the version back.
func TestRollingUpgrade(t *testing.T) {
	needNodeBeside(t)
	d := startDay2(t, "upgrade", "example", 3, "v3.6.16")
	st := d.running(3)
	id := st.ClusterID
	uids := map[string]string{}
	for _, m := range d.members(3) {
		uids[m] = d.podUID(m)
	}
	if err := d.put("/before", "upgrade"); err != nil {
		t.Fatal(err)
	}
	w := d.startWriter()
	d.apply(3, "v3.7.3")
	st = d.wait("every member at 3.7.3", 5*time.Minute, func(st e2eStatus) bool {
		return st.Phase == "Running" && st.CurrentVersion == "3.7.3" && st.Ready == "3/3"
	})
	w.report(t, "upgrade 3 members v3.6.16 -> v3.7.3")
	for _, m := range st.Members {
		if !strings.HasPrefix(m.Version, "3.7.") {
			t.Errorf("member %s reports %s", m.Name, m.Version)
		}
		if d.podUID(m.Name) != uids[m.Name] {
			t.Errorf("member %s's Pod was replaced; an upgrade keeps it", m.Name)
		}
	}
	if gotID, _ := d.etcdMembers(d.member(0)); gotID != id || st.ClusterID != id {
		t.Errorf("cluster ID %s, want %s", gotID, id)
	}
	if v := d.get("/before"); v != "upgrade" {
		t.Errorf("the key written before reads %q", v)
	}

	for _, tc := range []struct{ version, want string }{
		{"v3.9.0", "etcd upgrades one minor version at a time"},
		{"v3.6.16", "downgrades are not supported"},
	} {
		d.apply(3, tc.version)
		st := d.wait(tc.version+" refused", time.Minute, func(st e2eStatus) bool { return st.reason("Progressing") == "VersionRefused" })
		if !strings.Contains(st.Message, tc.want) || st.CurrentVersion != "3.7.3" {
			t.Errorf("%s: status %+v", tc.version, st)
		}
	}

	d.apply(3, "v3.7.99") // no such image, and no registry to ask
	st = d.wait("the upgrade stalled", 3*time.Minute, func(st e2eStatus) bool { return st.reason("Progressing") == "UpgradeStalled" })
	t.Logf("stalled: %s", st.Message)
	if st.cond("Available") != "True" || !strings.Contains(st.Message, "upgrade stopped at member") {
		t.Errorf("stalled upgrade: %+v", st)
	}
	stuck := 0
	for _, m := range d.members(3) {
		var p struct {
			Spec struct{ Containers []struct{ Image string } }
		}
		_ = cp.Get("/api/v1/namespaces/"+d.ns+"/pods/"+m, &p)
		if strings.HasSuffix(p.Spec.Containers[0].Image, ":v3.7.99") {
			stuck++
		}
	}
	if stuck != 1 {
		t.Errorf("%d members patched to an image that cannot be pulled, want 1", stuck)
	}
	d.apply(3, "v3.7.3")
	st = d.running(3)
	if st.CurrentVersion != "3.7.3" {
		t.Errorf("after the revert: %+v", st)
	}
}
