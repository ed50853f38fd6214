package e2e

// The shared fixture and the tests of the operator's contract with the
// real API server. TestMain starts one control plane (CRD applied,
// kubectl proxy, as the README's quick start has it) and, as root, the
// node; each test works in a namespace of its own with an operator of its
// own (startOperator), so the tests stand alone and in any order. The
// tests here: the quick start, the CRD's schema, long names, many
// clusters, deletion by the garbage collector, restarts of the operator
// and of the API server, the 410 relist, and a small benchmark run.

import (
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// What every test shares.
var (
	cp   *ControlPlane
	node *Node // nil when not root
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	start := time.Now()
	var err error
	if cp, err = Up(os.Stdout, "etcd-operator-e2e-", 0); err != nil {
		fmt.Println("e2e: start control plane:", err)
		return 1
	}
	defer cp.Stop()
	fmt.Printf("e2e: control plane ready in %s, builds included (API server %s, kubectl proxy %s)\n", time.Since(start).Round(time.Millisecond), cp.APIServerURL, cp.ProxyURL)
	code := func() int {
		if _, err = cp.BuildOperator(); err != nil {
			fmt.Println("e2e:", err)
			return 1
		}
		// The real node, for the tests that run Pods; it needs root
		// (.ci/run fails when it is not root, so CI never skips them).
		if os.Geteuid() == 0 {
			if node, err = cp.StartNode(); err != nil {
				fmt.Println("e2e: start the node:", err)
				return 1
			}
		} else {
			fmt.Println("e2e: not root: no node; the tests that run Pods are skipped")
		}
		return m.Run()
	}()
	if code != 0 {
		cp.DumpLogs(os.Stdout, 60)
		fmt.Println("e2e: logs kept in", cp.Dir)
		return code
	}
	cp.Stop()
	os.RemoveAll(cp.Dir)
	return 0
}

func examplePath(name string) string {
	root, _ := RepoRoot()
	return filepath.Join(root, "examples", name)
}

// object is a decoded Kubernetes object.
type object map[string]any

func (o object) meta() map[string]any { m, _ := o["metadata"].(map[string]any); return m }
func (o object) name() string         { s, _ := o.meta()["name"].(string); return s }
func (o object) uid() string          { s, _ := o.meta()["uid"].(string); return s }
func (o object) status() map[string]any {
	s, _ := o["status"].(map[string]any)
	return s
}

// listIn returns the objects of a core resource in ns with a label selector.
func listIn(t *testing.T, ns, resource, selector string) []object {
	t.Helper()
	var l struct{ Items []object }
	if err := cp.Get("/api/v1/namespaces/"+ns+"/"+resource+"?labelSelector="+selector, &l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func names(objs []object) []string {
	var n []string
	for _, o := range objs {
		n = append(n, o.name())
	}
	slices.Sort(n)
	return n
}

func ofCluster(name string) string { return "etcd.coreos.com/cluster%3D" + name }

// waitPhaseIn waits until the EtcdCluster's status reaches phase.
func waitPhaseIn(t *testing.T, ns, name, phase string, timeout time.Duration) object {
	t.Helper()
	o, err := cp.WaitPhase(ns, name, phase, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// waitCreated waits until every object of the cluster exists (see
// ControlPlane.WaitCreated).
func waitCreated(t *testing.T, ns, name string, timeout time.Duration) object {
	t.Helper()
	o, err := cp.WaitCreated(ns, name, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// memberNames are the names in an EtcdCluster's status.members.
func memberNames(ec object) []string {
	var out []string
	members, _ := ec.status()["members"].([]any)
	for _, m := range members {
		if m, ok := m.(map[string]any); ok {
			name, _ := m["name"].(string)
			out = append(out, name)
		}
	}
	return out
}

// apply is kubectl apply of yaml (an EtcdCluster is made with applyCluster).
func apply(t *testing.T, yaml string) {
	t.Helper()
	if _, err := cp.Kubectl(yaml, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// applyCluster makes the EtcdCluster c, or sets its size and version (see
// ControlPlane.ApplyCluster), and returns its uid.
func applyCluster(t *testing.T, c Cluster) string {
	t.Helper()
	uid, err := cp.ApplyCluster(c)
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

// applyExample is the README's quick start: kubectl apply of
// examples/etcd-cluster.yaml as it is, into ns.
func applyExample(t *testing.T, ns string) {
	t.Helper()
	if _, err := cp.Kubectl("", "apply", "-n", ns, "-f", examplePath("etcd-cluster.yaml")); err != nil {
		t.Fatal(err)
	}
}

// startOperator starts an operator of the test's own for ns (see
// ControlPlane.StartOperator) with debug logs, sending its requests to
// master ("" for kubectl proxy; a counting proxy's URL to count them), and
// stops it when the test ends.
func startOperator(t *testing.T, ns, master string) *Process {
	t.Helper()
	name := operatorName(ns)
	p, err := cp.StartOperator(OperatorOptions{Name: name, Master: master, Namespace: ns, Flags: []string{"-log-level=debug"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.StopProcess(name, 10*time.Second) })
	return p
}

// operatorName names the process (and log) of ns's operator.
func operatorName(ns string) string { return "etcd-operator-" + ns }

func processLog(t *testing.T, name string, from int) string {
	t.Helper()
	b, err := os.ReadFile(cp.LogPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b[min(from, len(b)):])
}

// 1. The README's quick start: the objects exist as the server stored them.
func TestQuickStart(t *testing.T) {
	ns := withOperator(t, "quickstart").ns
	applyExample(t, ns)
	ec := waitCreated(t, ns, "example", 60*time.Second)
	if got := memberNames(ec); !slices.Equal(got, []string{"example-0", "example-1", "example-2"}) {
		t.Errorf("status.members = %v", ec.status()["members"])
	}
	pods := listIn(t, ns, "pods", ofCluster("example"))
	svcs := listIn(t, ns, "services", ofCluster("example"))
	if got := names(pods); !slices.Equal(got, []string{"example-0", "example-1", "example-2"}) {
		t.Errorf("pods = %v", got)
	}
	if got := names(svcs); !slices.Equal(got, []string{"example-0", "example-1", "example-2", "example-client"}) {
		t.Errorf("services = %v", got)
	}
	// The quick start's members keep their data on volumes: a claim per
	// member, of the size the example asks for, mounted by its Pod.
	claims := listIn(t, ns, "persistentvolumeclaims", ofCluster("example"))
	if got := names(claims); !slices.Equal(got, []string{"example-0", "example-1", "example-2"}) {
		t.Errorf("persistentvolumeclaims = %v", got)
	}
	for _, c := range claims {
		if size := fmt.Sprint(c["spec"].(map[string]any)["resources"]); !strings.Contains(size, "storage:1Gi") {
			t.Errorf("claim %s resources = %s, want 1Gi", c.name(), size)
		}
	}
	for _, p := range pods {
		if vols := fmt.Sprint(p["spec"].(map[string]any)["volumes"]); !strings.Contains(vols, "claimName:"+p.name()) {
			t.Errorf("pod %s volumes = %s, want its claim %s", p.name(), vols, p.name())
		}
	}
	const initial = "--initial-cluster=example-0=http://example-0:2380,example-1=http://example-1:2380,example-2=http://example-2:2380"
	for _, o := range slices.Concat(pods, svcs, claims) {
		refs, _ := o.meta()["ownerReferences"].([]any)
		if len(refs) != 1 {
			t.Errorf("%s: ownerReferences = %v", o.name(), refs)
			continue
		}
		ref := refs[0].(map[string]any)
		if ref["uid"] != ec.uid() || ref["kind"] != "EtcdCluster" || ref["controller"] != true || ref["blockOwnerDeletion"] != true {
			t.Errorf("%s: ownerReference = %v, want controller EtcdCluster uid %s", o.name(), ref, ec.uid())
		}
		labels := o.meta()["labels"].(map[string]any)
		if labels["app"] != "etcd" || labels["etcd.coreos.com/cluster"] != "example" {
			t.Errorf("%s: labels = %v", o.name(), labels)
		}
	}
	for _, p := range pods {
		c := p["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		cmd := fmt.Sprint(c["command"])
		for _, want := range []string{"/usr/local/bin/etcd", "--name=" + p.name(), initial, "--initial-cluster-state=new", "--initial-advertise-peer-urls=http://" + p.name() + ":2380"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("pod %s command %s lacks %s", p.name(), cmd, want)
			}
		}
		if c["image"] != "gcr.io/etcd-development/etcd:v3.6.16" {
			t.Errorf("pod %s image = %v", p.name(), c["image"])
		}
	}
	for _, s := range svcs {
		ports := fmt.Sprint(s["spec"].(map[string]any)["ports"])
		if !strings.Contains(ports, "port:2379") || (s.name() != "example-client" && !strings.Contains(ports, "port:2380")) {
			t.Errorf("service %s ports = %s", s.name(), ports)
		}
		if ip, _ := s["spec"].(map[string]any)["clusterIP"].(string); ip == "" {
			t.Errorf("service %s has no ClusterIP", s.name())
		}
	}

	out, err := cp.Kubectl("", "get", "-n", ns, "etcdclusters")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "SIZE") || !strings.Contains(out, "PHASE") || !regexpMatch(`example\s+3\s+v3\.6\.16\s+0/3\s+Creating`, out) {
		t.Errorf("kubectl get etcdclusters:\n%s", out)
	}
	err = Eventually(30*time.Second, "events about example", func() (bool, error) {
		out, err = cp.Kubectl("", "describe", "-n", ns, "etcdcluster", "example")
		return strings.Contains(out, "ClusterCreated") && strings.Contains(out, "example-0, example-1, example-2"), err
	})
	if err != nil {
		t.Errorf("%v; kubectl describe:\n%s", err, out)
	}
}

// 6. The CRD's schema refuses what the operator could not use, with a
// message that names the field; the operator never sees those objects.
func TestSchemaRejectsInvalidClusters(t *testing.T) {
	iso := withOperator(t, "schema")
	for _, tc := range []struct {
		name, spec, want string
	}{
		{"size-string", `size: "three"`, `spec.size: Invalid value: "string": spec.size in body must be of type integer`},
		{"size-zero", `size: 0`, `spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1`},
		{"size-eight", `size: 8`, `spec.size: Invalid value: 8: spec.size in body should be less than or equal to 7`},
		{"size-missing", `version: v3.6.16`, `spec.size: Required value`},
		{"bad-version", "size: 1\n  version: \"3.6 latest\"", `spec.version in body should match`},
		{"bad-storage-size", "size: 1\n  storage:\n    size: 8GB", `spec.storage.size in body should match`},
		{"emptydir-with-size", "size: 1\n  storage:\n    emptyDir: true\n    size: 1Gi", `emptyDir cannot be set with size or storageClassName`},
		{"bad-certificate-lifetime", "size: 1\n  tls:\n    certificateLifetime: 90d", `spec.tls.certificateLifetime in body should match`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := fmt.Sprintf("apiVersion: coreos.com/v1\nkind: EtcdCluster\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  %s\n", tc.name, iso.ns, tc.spec)
			out, err := cp.Kubectl(yaml, "apply", "-f", "-")
			if err == nil {
				t.Fatalf("kubectl apply accepted it:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("kubectl apply said:\n%s\nwant it to contain %q", out, tc.want)
			}
		})
	}
	applyCluster(t, Cluster{Namespace: iso.ns, Name: "schema-marker", Size: 1})
	waitCreated(t, iso.ns, "schema-marker", 60*time.Second)
	select {
	case <-iso.proc.Done():
		t.Error("the operator exited")
	default:
	}
}

// Any valid EtcdCluster name, up to 253 characters with dots, yields objects
// the real API server accepts (Service names are DNS-1035 labels of at most
// 63 characters), and Events about it.
func TestLongAndDottedNames(t *testing.T) {
	ns := withOperator(t, "long-names").ns
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) + ".e"
	for _, name := range []string{"my.cluster.v2", strings.Repeat("x", 57), long, "3-node"} {
		t.Run(name[:min(len(name), 20)], func(t *testing.T) {
			applyCluster(t, Cluster{Namespace: ns, Name: name, Size: 3})
			ec := waitCreated(t, ns, name, 60*time.Second)
			members := memberNames(ec)
			if len(members) != 3 {
				t.Fatalf("status.members = %v", ec.status()["members"])
			}
			for _, m := range members {
				var pod object
				if err := cp.Get("/api/v1/namespaces/"+ns+"/pods/"+m, &pod); err != nil {
					t.Errorf("member %v: %v", m, err)
				}
				if len(m) > 63 {
					t.Errorf("member name %q is longer than 63", m)
				}
			}
			if msg, _ := ec.status()["message"].(string); name != "3-node" && !strings.Contains(msg, "shortened") {
				t.Errorf("status.message does not say the names were shortened: %q", msg)
			}
			err := Eventually(30*time.Second, "a ClusterCreated event", func() (bool, error) {
				var l struct {
					Items []struct{ Reason string }
				}
				err := cp.Get("/api/v1/namespaces/"+ns+"/events?fieldSelector=involvedObject.name%3D"+name, &l)
				for _, e := range l.Items {
					if e.Reason == "ClusterCreated" {
						return true, nil
					}
				}
				return false, err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
}

// 7. Fifty clusters applied at once all end complete, with no duplicates.
func TestManyClusters(t *testing.T) {
	ns := withOperator(t, "many").ns
	start := time.Now()
	err := parallel(workers, 50, func(i int) error {
		_, err := cp.ApplyCluster(Cluster{Namespace: ns, Name: fmt.Sprintf("many-%02d", i), Size: 3})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		waitCreated(t, ns, fmt.Sprintf("many-%02d", i), 3*time.Minute)
	}
	t.Logf("50 clusters (350 objects) created in %s", time.Since(start).Round(time.Millisecond))
	pods := listIn(t, ns, "pods", "app%3Detcd")
	svcs := listIn(t, ns, "services", "app%3Detcd")
	perCluster := map[string]int{}
	for _, o := range append(pods, svcs...) {
		perCluster[o.meta()["labels"].(map[string]any)["etcd.coreos.com/cluster"].(string)]++
	}
	for i := range 50 {
		name := fmt.Sprintf("many-%02d", i)
		if perCluster[name] != 7 {
			t.Errorf("%s has %d objects, want 3 Pods and 4 Services", name, perCluster[name])
		}
		if got := names(listIn(t, ns, "pods", ofCluster(name))); !slices.Equal(got, []string{name + "-0", name + "-1", name + "-2"}) {
			t.Errorf("%s pods = %v", name, got)
		}
	}
}

// 3. Deleting the EtcdCluster lets the real garbage collector remove every
// Pod and Service, through the ownerReferences.
func TestDeleteCluster(t *testing.T) {
	ns := withOperator(t, "delete").ns
	applyCluster(t, Cluster{Namespace: ns, Name: "doomed", Size: 3})
	waitCreated(t, ns, "doomed", 60*time.Second)
	if n := len(uidsIn(t, ns, "doomed")); n != 10 {
		t.Fatalf("doomed has %d objects before deletion, want 10: 4 Services, 3 PVCs, 3 Pods", n)
	}
	if _, err := cp.Kubectl("", "delete", "-n", ns, "etcdcluster", "doomed", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	// The garbage collector rediscovers resources every 30s; a CRD created
	// moments before can take up to a minute to cascade.
	err := Eventually(90*time.Second, "the garbage collector to delete doomed's objects", func() (bool, error) {
		return len(uidsIn(t, ns, "doomed")) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v: left %v", err, uidsIn(t, ns, "doomed"))
	}
}

// compactEtcd compacts etcd's history up to its current revision, through
// etcd's JSON gateway.
func compactEtcd(t *testing.T) {
	t.Helper()
	post := func(path string, body any) map[string]any {
		var out map[string]any
		if err := DoJSON(nil, "POST", cp.EtcdURL+path, body, 200, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	r := post("/v3/kv/range", map[string]any{"key": base64.StdEncoding.EncodeToString([]byte("/"))})
	rev := r["header"].(map[string]any)["revision"]
	post("/v3/kv/compaction", map[string]any{"revision": rev, "physical": true})
	t.Logf("compacted etcd at revision %v", rev)
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// A small run of the benchmark (go run ./cmd/bench is the full one). Its
// timings are only printed; what it counts is checked.
func TestBenchmarkSmoke(t *testing.T) {
	r, err := RunBenchmark(cp, BenchOptions{Rounds: 2, Clusters: 10, Singles: 2, RSSClusters: 50, Window: 10 * time.Second, Out: os.Stdout})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	r.Table(&table)
	t.Logf("\n%s", table.String())
	// Counts, not times: a small run on a busy machine says nothing about
	// speed, but every request is the operator's own.
	// A restart lists and watches, once each, the EtcdClusters, the Pods,
	// the Services and the PVCs (one page each here), and decides from
	// that: no other read, no write.
	if r.Restart.Writes != 0 || r.Restart.Reads != r.Restart.Lists || r.Restart.Lists != 4 || r.Restart.Watches != 4 {
		t.Errorf("restart over %d clusters: %s, want the four watches' lists and watches only", r.RestartClusters, r.Restart)
	}
	if r.Steady.All != 0 {
		t.Errorf("steady state over %d created clusters: %s, want none", r.RestartClusters, r.Steady)
	}
	if want := r.Objects + r.Objects/7; r.BurstRequests.Writes-r.BurstRequests.Events != want {
		t.Errorf("the burst's writes but Events = %d, want %d: each cluster's 7 objects and one status write", r.BurstRequests.Writes-r.BurstRequests.Events, want)
	}
	if want := r.Objects / 7; r.BurstRequests.Events != want {
		t.Errorf("the burst's Events = %d, want %d: one for each new cluster", r.BurstRequests.Events, want)
	}
	if !slices.Equal(r.First, []string{"operator", "objects"}) {
		t.Errorf("first side per round = %v, want the operator, then the objects loader", r.First)
	}
}

// The report's targets: each is checked against its own anchor, and a
// miss is named (cmd/bench exits 1 on one).
func TestBenchTargets(t *testing.T) {
	met := func(r BenchReport, what string) bool {
		for _, tg := range r.Targets() {
			if tg.What == what {
				return tg.Met
			}
		}
		t.Fatalf("no target %q", what)
		return false
	}
	base := BenchReport{
		Operator: 10 * time.Second, LoaderSame: 10 * time.Second, Loader16: 10 * time.Second,
		Single: 100 * time.Millisecond, SingleReads: 100 * time.Millisecond, SingleLoad: 100 * time.Millisecond,
		RestartClusters: 200, RSSIdle: 9 << 20, RSS10: 8 << 20, RSSMany: 9 << 20, BinarySize: 7 << 20, Window: time.Minute,
	}
	for _, c := range []struct {
		name   string
		change func(*BenchReport)
		target string
		met    bool
	}{
		{"burst at the bare objects' pace", func(r *BenchReport) {}, "burst against the objects only at 16", true},
		{"burst 1.25× the bare objects", func(r *BenchReport) { r.Loader16 = 8 * time.Second }, "burst against the objects only at 16", true},
		{"burst 1.5× the bare objects", func(r *BenchReport) { r.Loader16 = 6667 * time.Millisecond }, "burst against the objects only at 16", false},
		{"burst 1.5× the bare objects, same requests met", func(r *BenchReport) { r.Loader16 = 6667 * time.Millisecond }, "burst against the same requests at 16", true},
		{"one cluster 1.3× the bare objects", func(r *BenchReport) { r.SingleLoad = 77 * time.Millisecond }, "one cluster against the objects only", false},
		{"one cluster 1.3× the bare objects, same requests met", func(r *BenchReport) { r.SingleLoad = 77 * time.Millisecond }, "one cluster against the same requests", true},
		{"idle RSS 10.5 MiB", func(r *BenchReport) { r.RSSIdle = 21 << 19 }, "idle RSS", false},
	} {
		r := base
		c.change(&r)
		if got := met(r, c.target); got != c.met {
			t.Errorf("%s: %q met = %v, want %v", c.name, c.target, got, c.met)
		}
	}
}

// needNode skips a test that runs Pods when there is no node (not root).
func needNode(t *testing.T) {
	t.Helper()
	if node == nil {
		t.Skip("needs the node, which needs root")
	}
}

// needNodeBeside is needNode for a test that may run beside the others so
// marked, two at a time (go test's -parallel, the 2 cores here), after
// every other test: TestCertRotation's writer must run for six minutes,
// and the tests beside it, each in a namespace of its own and with an
// operator of its own, take about as long one after the other. They count
// nothing beyond their namespace and assert no timing that the other
// tests' load could stretch.
func needNodeBeside(t *testing.T) {
	t.Helper()
	needNode(t)
	t.Parallel()
}

// nodeNamespace makes a namespace of the test's own whose Pods the node
// runs, and deletes it (and so its Pods) when the test ends.
func nodeNamespace(t *testing.T, ns string) string {
	t.Helper()
	if err := cp.CreateNodeNamespace(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := cp.Kubectl("", "delete", "namespace", ns, "--wait=false"); err != nil {
			t.Error(err)
		}
	})
	return ns
}

// isolated is what the tests that restart things start from: a namespace
// of their own, an operator of their own for it whose every request goes
// through a counting proxy (the benchmark's), and a 3-member cluster "kept"
// already Created, whose objects the restart must leave alone.
type isolated struct {
	ns      string
	counter *counter
	name    string // of the operator process
	proc    *Process
}

func newIsolated(t *testing.T, ns string) *isolated {
	t.Helper()
	iso := withOperator(t, ns)
	applyCluster(t, Cluster{Namespace: ns, Name: "kept", Size: 3})
	waitCreated(t, ns, "kept", 60*time.Second)
	return iso
}

// withOperator makes the test's namespace (deleted when it ends) and starts
// an operator of the test's own for it, at kubectl proxy through a counting
// proxy, with debug logs; it is stopped when the test ends.
func withOperator(t *testing.T, ns string) *isolated {
	t.Helper()
	if err := cp.CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cp.Kubectl("", "delete", "namespace", ns, "--wait=false") })
	c, err := newCounter(cp.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.srv.Close() })
	iso := &isolated{ns: ns, counter: c, name: operatorName(ns)}
	iso.startOperator(t)
	return iso
}

// startOperator starts the namespace's operator, through the counter.
func (iso *isolated) startOperator(t *testing.T) {
	t.Helper()
	iso.proc = startOperator(t, iso.ns, iso.counter.url)
}

// keptUIDs maps kind/name to uid for kept's objects; it fails unless all
// ten are there, so that comparing two of them means something.
func (iso *isolated) keptUIDs(t *testing.T) map[string]string {
	t.Helper()
	m := uidsIn(t, iso.ns, "kept")
	if len(m) != 10 {
		t.Fatalf("kept has %d objects, want 3 Pods, 4 Services and 3 PersistentVolumeClaims: %v", len(m), m)
	}
	return m
}

// assertOnlyCreated checks the writes the operator sent since the counter
// was reset: exactly the Pod and Services of one new 1-member cluster
// (1 Pod, 2 Services), the status of that cluster, and Events; nothing for
// kept, whose status already says Created.
func (iso *isolated) assertOnlyCreated(t *testing.T, cluster string) {
	t.Helper()
	reqs, _ := iso.counter.snapshot()
	var pods, svcs, claims int
	for _, r := range reqs {
		method, path, _ := strings.Cut(r, " ")
		path, _, _ = strings.Cut(path, "?")
		switch {
		case method == "GET":
		case method == "POST" && strings.HasSuffix(path, "/pods"):
			pods++
		case method == "POST" && strings.HasSuffix(path, "/services"):
			svcs++
		case method == "POST" && strings.HasSuffix(path, "/persistentvolumeclaims"):
			claims++
		case method == "POST" && strings.HasSuffix(path, "/events"):
		case method == "PATCH" && strings.HasSuffix(path, "/etcdclusters/"+cluster+"/status"):
		default:
			t.Errorf("unexpected write: %s", r)
		}
	}
	if pods != 1 || svcs != 2 || claims != 1 {
		t.Errorf("the operator POSTed %d Pods, %d Services and %d PersistentVolumeClaims, want 1, 2 and 1 (those of %s): %v", pods, svcs, claims, cluster, reqs)
	}
}

func uidsIn(t *testing.T, ns, cluster string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, r := range []string{"pods", "services", "persistentvolumeclaims"} {
		for _, o := range listIn(t, ns, r, ofCluster(cluster)) {
			m[r+"/"+o.name()] = o.uid()
		}
	}
	return m
}

// 2. A restarted operator lists, creates nothing, deletes nothing, and
// (the status saying Created) writes nothing for the existing cluster:
// through the counting proxy, its only writes are those of a cluster
// created after the restart.
func TestOperatorRestart(t *testing.T) {
	iso := newIsolated(t, "restart")
	before := iso.keptUIDs(t)
	cp.StopProcess(iso.name, 10*time.Second)
	iso.counter.reset()
	iso.startOperator(t)
	applyCluster(t, Cluster{Namespace: iso.ns, Name: "restart-marker", Size: 1})
	waitCreated(t, iso.ns, "restart-marker", 60*time.Second)
	if after := iso.keptUIDs(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("objects changed across the restart:\nbefore %v\nafter  %v", before, after)
	}
	reqs, _ := iso.counter.snapshot()
	if !slices.ContainsFunc(reqs, func(r string) bool {
		return strings.HasPrefix(r, "GET /apis/coreos.com/v1/namespaces/restart/etcdclusters?")
	}) {
		t.Errorf("the restarted operator did not list: %v", reqs)
	}
	iso.assertOnlyCreated(t, "restart-marker")
}

// 4. The API server restarts under the operator: it watches again and
// handles a cluster created afterwards; nothing is duplicated.
func TestAPIServerRestart(t *testing.T) {
	iso := newIsolated(t, "apiserver-restart")
	before := iso.keptUIDs(t)
	restartAPIServer(t)
	iso.counter.reset()
	applyCluster(t, Cluster{Namespace: iso.ns, Name: "after-restart", Size: 1})
	waitCreated(t, iso.ns, "after-restart", 90*time.Second)
	if after := iso.keptUIDs(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("kept's objects changed:\nbefore %v\nafter  %v", before, after)
	}
	if n := len(uidsIn(t, iso.ns, "after-restart")); n != 4 {
		t.Errorf("after-restart has %d objects, want 4: 2 Services, a PVC and a Pod", n)
	}
	iso.assertOnlyCreated(t, "after-restart")
}

// restartAPIServer restarts kube-apiserver with flags; with flags, a
// cleanup restarts it again without them, also when the test fails.
//
// After each restart it waits until the controllers work again: their
// watches broke with the API server and come back with client-go's
// backoff, which can take most of a minute; the next test must not start
// before (a new namespace would get no default ServiceAccount).
func restartAPIServer(t *testing.T, flags ...string) {
	t.Helper()
	cp.StopProcess("kube-apiserver", 5*time.Second)
	if len(flags) > 0 {
		t.Cleanup(func() {
			cp.StopProcess("kube-apiserver", 5*time.Second)
			if err := cp.StartAPIServer(); err != nil {
				t.Error(err)
				return
			}
			if err := cp.WaitControllers(); err != nil {
				t.Error(err)
			}
		})
	}
	if err := cp.StartAPIServer(flags...); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitControllers(); err != nil {
		t.Fatal(err)
	}
}

// 5. The 410 path for real. With the watch cache off, the API server serves
// watches from etcd, which refuses a revision older than its last
// compaction. While kubectl proxy is down the operator cannot watch; a
// cluster is created and etcd compacted meanwhile; when the proxy is back
// the operator's resume position has expired: it must list again, create
// the new cluster and nothing else.
func TestExpiredResourceVersionRelists(t *testing.T) {
	restartAPIServer(t, "--watch-cache=false")
	iso := newIsolated(t, "expiry")
	before := iso.keptUIDs(t)

	cp.StopProcess("kubectl-proxy", 5*time.Second)
	t.Cleanup(func() {
		if cp.exited("kubectl-proxy") {
			if err := cp.StartProxy(); err != nil {
				t.Error(err)
			}
		}
	})
	iso.counter.reset()
	applyCluster(t, Cluster{Namespace: iso.ns, Name: "during-expiry", Size: 1})
	// Compacting at revision N keeps N: one more write, so that the
	// revision right after the operator's position is gone too.
	apply(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: expiry-marker\n  namespace: expiry\n")
	compactEtcd(t)
	if err := cp.StartProxy(); err != nil {
		t.Fatal(err)
	}
	waitCreated(t, iso.ns, "during-expiry", 90*time.Second)
	if log := processLog(t, iso.name, 0); !strings.Contains(log, "watch position expired; listing again") {
		t.Errorf("the operator did not take the 410 path:\n%s", log)
	}
	if after := iso.keptUIDs(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("kept's objects changed:\nbefore %v\nafter  %v", before, after)
	}
	if n := len(uidsIn(t, iso.ns, "during-expiry")); n != 4 {
		t.Errorf("during-expiry has %d objects, want 4: 2 Services, a PVC and a Pod", n)
	}
	iso.assertOnlyCreated(t, "during-expiry")
}
