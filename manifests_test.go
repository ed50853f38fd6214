// Tests of what an EtcdCluster becomes: the bounds of its spec, the names of
// its objects, the token its members share, and the objects themselves,
// compared with golden files in testdata/manifests that show a reader
// exactly what the API server receives. After a deliberate change to the
// manifests, `go test -run TestManifests -update` rewrites the files, and
// the diff of the commit shows the change as it reaches Kubernetes.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/manifests with the manifests as built now")

// goldenCluster is the EtcdCluster of the golden files. Its uid is the one
// the fake API server gives the first cluster it holds, so that the files
// are what the operator sends in TestCreatesCluster.
func goldenCluster() *EtcdCluster {
	return &EtcdCluster{
		Metadata: objectMeta{Name: "example", Namespace: "default", UID: "00000001-aaaa-bbbb-cccc-000000000001", Generation: 1},
		Spec:     json.RawMessage(`{"size":3,"version":"v3.6.16"}`),
	}
}

// manifests builds the objects of ec, by the name of their golden file: a
// member Pod of a new cluster, a member joining a running cluster (its
// --initial-cluster as etcd lists the members once it is added), a member
// Service and the client Service. It is the one place where the tests
// build manifests.
func manifests(t *testing.T, ec *EtcdCluster) map[string][]byte {
	t.Helper()
	spec, err := parseSpec(ec.Spec)
	if err != nil {
		t.Fatal(err)
	}
	p := newClusterPlan(ec.Metadata, repo+":"+spec.Version)
	var peers []peer
	for i := range spec.Size {
		peers = append(peers, peer{memberName(p.Base, i), memberName(p.Base, i)})
	}
	tlsPlan := p
	tlsPlan.TLS = &tlsSpec{CertificateLifetime: defaultCertLifetime, CALifetime: defaultCALifetime}
	return map[string][]byte{
		"member-pod-tls.json": tlsPlan.memberPod(peers[0].Name, initialCluster(peers, true)),
		"member-pod.json":     p.memberPod(peers[0].Name, initialCluster(peers, false)),
		"joining-pod.json":    p.joiningPod(peers[1].Name, initialCluster(peers, false)),
		"member-service.json": p.memberService(peers[0].Name),
		"client-service.json": p.clientService(),
	}
}

// The manifests are as the golden files say, byte for byte once indented.
func TestManifests(t *testing.T) {
	dir := filepath.Join("testdata", "manifests")
	built := manifests(t, goldenCluster())
	for _, name := range slices.Sorted(maps.Keys(built)) {
		t.Run(name, func(t *testing.T) {
			var got bytes.Buffer
			if err := json.Indent(&got, built[name], "", "  "); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, built[name])
			}
			got.WriteByte('\n')
			file := filepath.Join(dir, name)
			if *update {
				if err := os.WriteFile(file, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (go test -run TestManifests -update writes it)", err)
			}
			if line, g, w := firstDifference(got.String(), string(want)); line > 0 {
				t.Errorf("%s differs from %s at line %d:\n got: %s\nwant: %s\n(go test -run TestManifests -update rewrites it)", name, file, line, g, w)
			}
		})
	}
	// A golden file of an object no longer built would mislead a reader.
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, file := range files {
		if built[filepath.Base(file)] == nil {
			t.Errorf("%s shows no manifest the operator builds", file)
		}
	}
}

// firstDifference returns the first line (from 1) where a and b differ, and
// that line of each; 0 when they are equal.
func firstDifference(a, b string) (int, string, string) {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y || i >= len(al) || i >= len(bl) {
			return i + 1, x, y
		}
	}
	return 0, "", ""
}

// parseSpec accepts exactly the sizes 1 to 7, whole numbers, and a version
// that is an image tag (the default when none is given).
func TestParseSpecBounds(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want clusterSpec // zero: refused
	}{
		{`{"size":0}`, clusterSpec{}},
		{`{"size":1}`, clusterSpec{Size: 1, Version: defaultVersion, Storage: storageSpec{Size: defaultStorageSize}}},
		{`{"size":7}`, clusterSpec{Size: 7, Version: defaultVersion, Storage: storageSpec{Size: defaultStorageSize}}},
		{`{"size":8}`, clusterSpec{}},
		{`{"size":3,"version":"v3.7.3"}`, clusterSpec{Size: 3, Version: "v3.7.3", Storage: storageSpec{Size: defaultStorageSize}}},
		{`{"size":3,"version":null}`, clusterSpec{Size: 3, Version: defaultVersion, Storage: storageSpec{Size: defaultStorageSize}}},
		{`{"size":3,"version":""}`, clusterSpec{}},
		{`{"size":3,"version":"-x"}`, clusterSpec{}},
		{`{"size":3,"version":"` + strings.Repeat("a", 128) + `"}`, clusterSpec{Size: 3, Version: strings.Repeat("a", 128), Storage: storageSpec{Size: defaultStorageSize}}},
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
	// token is the --initial-cluster-token of a member of the cluster
	// named example with the uid.
	token := func(uid string) string {
		t.Helper()
		ec := goldenCluster()
		ec.Metadata.UID = uid
		var pod struct {
			Spec struct{ Containers []struct{ Command []string } }
		}
		if err := json.Unmarshal(manifests(t, ec)["member-pod.json"], &pod); err != nil || len(pod.Spec.Containers) != 1 {
			t.Fatalf("member Pod: %v, %+v", err, pod)
		}
		for _, arg := range pod.Spec.Containers[0].Command {
			if v, ok := strings.CutPrefix(arg, "--initial-cluster-token="); ok {
				return v
			}
		}
		t.Fatal("no --initial-cluster-token in the member Pod's command")
		return ""
	}
	a, b := token("uid-1"), token("uid-2")
	if a != token("uid-1") {
		t.Error("the token of one cluster changes between calls")
	}
	if a == b {
		t.Error("two clusters (different uids) share a token")
	}
}
