package e2e

// The Pods the operator writes, run by the real node, form working etcd
// clusters of 1, 3 and 5 members. The idea: a controller's output is only
// right if Kubernetes makes the intended thing of it, so the test asks
// etcd itself (member list, cluster ID, a key written and read back), not
// the objects.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The Pods the operator wrote, run by the real node (kubelet, containerd,
// CNI bridge, kube-proxy, CoreDNS) from the gcr.io/etcd-development/etcd
// image, form real etcd clusters: one cluster ID, every member started on
// its Service name (the peers found each other through cluster DNS and
// their ClusterIPs), a key written through one member read through
// another. Deleting the EtcdCluster ends the containers, through the
// garbage collector and the kubelet.
func TestMembersFormACluster(t *testing.T) {
	needNodeBeside(t)
	ns := nodeNamespace(t, "members")
	startOperator(t, ns, "")

	for _, tc := range []struct {
		name string
		size int
	}{
		{"example", 3}, // exactly the file from examples/
		{"solo", 1},
		{"quintet", 5},
	} {
		t.Run(fmt.Sprintf("%s of %d", tc.name, tc.size), func(t *testing.T) {
			start := time.Now()
			if tc.name == "example" {
				applyExample(t, ns)
			} else {
				applyCluster(t, Cluster{Namespace: ns, Name: tc.name, Size: tc.size})
			}
			waitPhaseIn(t, ns, tc.name, "Running", 60*time.Second)
			var members []string
			for i := range tc.size {
				members = append(members, fmt.Sprintf("%s-%d", tc.name, i))
			}
			waitHealthy(t, ns, members)
			t.Logf("%d members healthy %s after the apply", tc.size, time.Since(start).Round(time.Millisecond))
			// One cluster ID, and every member started (a started member
			// has a name and client URLs) with its peer URL on its Service.
			ids := map[string]bool{}
			for _, m := range members {
				var list struct {
					Header struct {
						ClusterID string `json:"cluster_id"`
					}
					Members []struct {
						Name       string
						PeerURLs   []string `json:"peerURLs"`
						ClientURLs []string `json:"clientURLs"`
					}
				}
				if err := DoJSON(nil, "POST", "http://"+cp.PodIP(ns, m)+":2379/v3/cluster/member/list", map[string]any{}, 200, &list); err != nil {
					t.Fatal(err)
				}
				ids[list.Header.ClusterID] = true
				if len(list.Members) != tc.size {
					t.Errorf("%s sees %d members, want %d", m, len(list.Members), tc.size)
				}
				for _, mm := range list.Members {
					if mm.Name == "" || len(mm.ClientURLs) == 0 || len(mm.PeerURLs) != 1 || mm.PeerURLs[0] != "http://"+mm.Name+":2380" {
						t.Errorf("%s reports member %+v: not started, or not on its Service name", m, mm)
					}
				}
			}
			if len(ids) != 1 {
				t.Errorf("members disagree on the cluster ID: %v", ids)
			}
			// The names the peers used, as cluster DNS answers them in the
			// members' namespace: each member's Service ClusterIP.
			for _, m := range members {
				addrs, err := ClusterDNS(context.Background(), m+"."+ns+".svc.cluster.local")
				if want := clusterIP(t, ns, m); err != nil || !slices.Equal(addrs, []string{want}) {
					t.Errorf("CoreDNS answers %s with %v (%v), want its ClusterIP %s", m, addrs, err, want)
				}
			}
			// Written through the first member, read through the last
			// member's ClusterIP Service (kube-proxy's rules, from the host).
			key, value := b64("/e2e/"+tc.name), b64(time.Now().String())
			if err := DoJSON(nil, "POST", "http://"+cp.PodIP(ns, members[0])+":2379/v3/kv/put", map[string]any{"key": key, "value": value}, 200, nil); err != nil {
				t.Fatal(err)
			}
			// kube-proxy programs a Service's rules a moment after its
			// endpoint turns ready (until then the ClusterIP refuses).
			last := members[len(members)-1]
			var rng struct{ Kvs []struct{ Value string } }
			var lastErr error
			err := Eventually(30*time.Second, "a read through "+last+"'s ClusterIP", func() (bool, error) {
				lastErr = DoJSON(nil, "POST", "http://"+clusterIP(t, ns, last)+":2379/v3/kv/range", map[string]any{"key": key}, 200, &rng)
				return lastErr == nil, nil
			})
			if err != nil {
				t.Fatalf("%v: %v", err, lastErr)
			}
			if len(rng.Kvs) != 1 || rng.Kvs[0].Value != value {
				t.Errorf("read %+v through %s, want the value written through %s", rng.Kvs, last, members[0])
			}
		})
	}

	t.Run("the API server's proxy reaches a member", func(t *testing.T) {
		// The operator's health checks will go this way.
		code, b, err := cp.Do("POST", "/api/v1/namespaces/"+ns+"/pods/example-0:2379/proxy/v3/cluster/member/list", []byte("{}"), "application/json")
		if err != nil || code != 200 || !strings.Contains(string(b), `"members"`) {
			t.Errorf("POST pods/example-0:2379/proxy/v3/cluster/member/list: %d %s %v", code, b, err)
		}
		// etcd's cluster version, which the operator reads while a member
		// is silent, is a GET of /version.
		var v struct{ Etcdserver, Etcdcluster string }
		code, b, err = cp.Do("GET", "/api/v1/namespaces/"+ns+"/pods/example-0:2379/proxy/version", nil, "")
		if err != nil || code != 200 || json.Unmarshal(b, &v) != nil || v.Etcdcluster != "3.6.0" || v.Etcdserver != "3.6.16" {
			t.Errorf("GET pods/example-0:2379/proxy/version: %d %s %v", code, b, err)
		}
	})

	t.Run("logs and a killed member restarting", func(t *testing.T) {
		logs, err := cp.PodLogs(ns, "solo-0", "")
		if err != nil || !strings.Contains(logs, "solo-0") {
			t.Fatalf("logs of solo-0: %v\n%.2000s", err, logs)
		}
		if _, err := cp.KillMember(ns, "solo-0"); err != nil {
			t.Fatal(err)
		}
		// restartPolicy Always: the kubelet starts etcd again in the same
		// Pod, on the same emptyDir.
		err = Eventually(90*time.Second, "solo-0 restarted", func() (bool, error) {
			var p struct {
				Status struct {
					ContainerStatuses []struct {
						RestartCount int
						Ready        bool
					}
				}
			}
			if err := cp.Get("/api/v1/namespaces/"+ns+"/pods/solo-0", &p); err != nil {
				return false, err
			}
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].RestartCount >= 1, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		waitHealthy(t, ns, []string{"solo-0"})
		var rng struct{ Kvs []struct{ Value string } }
		if err := DoJSON(nil, "POST", "http://"+cp.PodIP(ns, "solo-0")+":2379/v3/kv/range", map[string]any{"key": b64("/e2e/solo")}, 200, &rng); err != nil {
			t.Fatal(err)
		}
		if len(rng.Kvs) != 1 {
			t.Errorf("the key written before the kill is gone: %+v", rng.Kvs)
		}
	})

	t.Run("deleting the EtcdCluster ends its containers", func(t *testing.T) {
		uids := map[string]string{}
		for i := range 5 {
			m := fmt.Sprintf("quintet-%d", i)
			if uids[m] = cp.PodUID(ns, m); uids[m] == "" || len(PodProcesses(uids[m])) == 0 {
				t.Fatalf("%s runs no process before the deletion", m)
			}
		}
		if _, err := cp.Kubectl("", "delete", "etcdcluster", "-n", ns, "quintet", "--wait=false"); err != nil {
			t.Fatal(err)
		}
		running := func(members ...string) []string {
			var r []string
			for _, m := range members {
				if len(PodProcesses(cp.PodUID(ns, m))) > 0 || len(PodProcesses(uids[m])) > 0 {
					r = append(r, m)
				}
			}
			return r
		}
		err := Eventually(90*time.Second, "quintet's Pods and processes to end", func() (bool, error) {
			return len(running("quintet-0", "quintet-1", "quintet-2", "quintet-3", "quintet-4")) == 0 &&
				len(listIn(t, ns, "pods", ofCluster("quintet"))) == 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		others := []string{"example-0", "example-1", "example-2", "solo-0"}
		if got := running(others...); !slices.Equal(got, others) {
			t.Errorf("of the other clusters' members, only %v still run, want all of %v", got, others)
		}
	})
}

// waitHealthy waits until every member answers /health true on its Pod IP
// (etcd says true only with a quorum).
func waitHealthy(t *testing.T, ns string, members []string) {
	t.Helper()
	for _, m := range members {
		err := Eventually(90*time.Second, m+" healthy", func() (bool, error) {
			ip := cp.PodIP(ns, m)
			if ip == "" {
				return false, nil
			}
			var h struct{ Health string }
			return DoJSON(nil, "GET", "http://"+ip+":2379/health", nil, 200, &h) == nil && h.Health == "true", nil
		})
		if err != nil {
			var pod object
			_ = cp.Get("/api/v1/namespaces/"+ns+"/pods/"+m, &pod)
			logs, _ := cp.PodLogs(ns, m, "")
			t.Fatalf("%v; pod status %v; log:\n%.3000s", err, pod.status(), logs)
		}
	}
}

// clusterIP is a Service's ClusterIP.
func clusterIP(t *testing.T, ns, svc string) string {
	t.Helper()
	var s struct {
		Spec struct {
			ClusterIP string `json:"clusterIP"`
		}
	}
	if err := cp.Get("/api/v1/namespaces/"+ns+"/services/"+svc, &s); err != nil {
		t.Fatal(err)
	}
	return s.Spec.ClusterIP
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
