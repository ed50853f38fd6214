package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// The Pods the operator wrote, run as written by the node agent, form real
// etcd clusters: one cluster ID, every member started, a key written through
// one member read through another. Deleting the EtcdCluster ends the
// processes, through the garbage collector and the agent.
func TestMembersFormACluster(t *testing.T) {
	needRoot(t)
	const ns = "members"
	if err := cp.CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	agent, err := StartAgent(cp, ns, "eopt", "10.213.7")
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("agent errors: %v", agent.Errors())
		}
	}()
	if _, err := cp.StartProcess("etcd-operator-members", nil, operatorBin, "-master="+cp.ProxyURL, "-namespace="+ns); err != nil {
		t.Fatal(err)
	}
	defer cp.StopProcess("etcd-operator-members", 10*time.Second)

	example, err := os.ReadFile(examplePath("etcd-cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		size int
		yaml string
	}{
		{"example", 3, string(example)}, // exactly the file from examples/
		{"solo", 1, clusterYAML("solo", 1)},
		{"quintet", 5, clusterYAML("quintet", 5)},
	} {
		t.Run(fmt.Sprintf("%s of %d", tc.name, tc.size), func(t *testing.T) {
			if _, err := cp.Kubectl(tc.yaml, "apply", "-n", ns, "-f", "-"); err != nil {
				t.Fatal(err)
			}
			waitPhaseIn(t, ns, tc.name, "Created", 60*time.Second)
			var members []string
			for i := range tc.size {
				members = append(members, fmt.Sprintf("%s-%d", tc.name, i))
			}
			// Every member healthy: etcd answers /health true only with a quorum.
			for _, m := range members {
				err := Eventually(60*time.Second, m+" healthy", func() (bool, error) {
					ip := agent.PodIP(m)
					if ip == "" {
						return false, nil
					}
					var h struct{ Health string }
					return getJSON("http://"+ip+":2379/health", &h) == nil && h.Health == "true", nil
				})
				if err != nil {
					t.Fatalf("%v; agent errors: %v", err, agent.Errors())
				}
			}
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
				if err := postJSON("http://"+agent.PodIP(m)+":2379/v3/cluster/member/list", map[string]any{}, &list); err != nil {
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
			// Written through the first member, read through the last.
			key, value := b64("/e2e/"+tc.name), b64(time.Now().String())
			if err := postJSON("http://"+agent.PodIP(members[0])+":2379/v3/kv/put", map[string]any{"key": key, "value": value}, nil); err != nil {
				t.Fatal(err)
			}
			var rng struct{ Kvs []struct{ Value string } }
			if err := postJSON("http://"+agent.PodIP(members[len(members)-1])+":2379/v3/kv/range", map[string]any{"key": key}, &rng); err != nil {
				t.Fatal(err)
			}
			if len(rng.Kvs) != 1 || rng.Kvs[0].Value != value {
				t.Errorf("read %+v through %s, want the value written through %s", rng.Kvs, members[len(members)-1], members[0])
			}
		})
	}

	t.Run("deleting the EtcdCluster ends its processes", func(t *testing.T) {
		if _, err := cp.Kubectl("", "delete", "etcdcluster", "-n", ns, "quintet", "--wait=false"); err != nil {
			t.Fatal(err)
		}
		err := Eventually(90*time.Second, "quintet's processes to end", func() (bool, error) {
			for _, p := range agent.Running() {
				if strings.HasPrefix(p, "quintet-") {
					return false, nil
				}
			}
			return len(listIn(t, ns, "pods", ofCluster("quintet"))) == 0, nil
		})
		if err != nil {
			t.Fatalf("%v; still running: %v", err, agent.Running())
		}
		if got := len(agent.Running()); got != 4 {
			t.Errorf("%d processes left, want the 4 of example and solo", got)
		}
	})
	if errs := agent.Errors(); len(errs) > 0 {
		t.Errorf("agent errors: %v", errs)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func getJSON(url string, v any) error {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func postJSON(url string, body, v any) error {
	b, _ := json.Marshal(body)
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
