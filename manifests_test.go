// Tests of what an EtcdCluster becomes: the bounds of its spec, the names of
// its objects, and the token its members share.
package main

import (
	"encoding/json"
	"strings"
	"testing"
)

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
		ec := &EtcdCluster{Metadata: objectMeta{Name: "example", Namespace: "default", UID: uid}}
		return newClusterPlan(ec, clusterSpec{Size: 3, Version: defaultVersion}, "img")
	}
	a, b := plan("uid-1"), plan("uid-2")
	if a.Token != plan("uid-1").Token {
		t.Error("the token of one cluster changes between calls")
	}
	if a.Token == b.Token {
		t.Error("two clusters (different uids) share a token")
	}
}
