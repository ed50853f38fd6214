package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The operator as a Pod runs it: no -master, the in-cluster API server over
// HTTPS verified against the cluster CA, a real ServiceAccount token from
// the TokenRequest API, and exactly the RBAC of examples/deploy.yaml. The
// ServiceAccount files are bind-mounted at the path the kubelet uses, in a
// mount namespace of the operator's own; the operator has no test switch.
func TestInCluster(t *testing.T) {
	needRoot(t)
	const ns = "incluster"
	manifests, err := os.ReadFile(examplePath("deploy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	deploy := strings.ReplaceAll(string(manifests), "namespace: default", "namespace: "+ns)
	if err := cp.CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	apply(t, deploy)

	saDir := t.TempDir()
	ca, err := os.ReadFile(cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	token1 := boundToken(t, ns, "token-one")
	for name, content := range map[string]string{"ca.crt": string(ca), "token": token1, "namespace": ns} {
		if err := os.WriteFile(filepath.Join(saDir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	apiPort := strings.TrimPrefix(cp.APIServerURL, "https://127.0.0.1:")
	const mountSA = `mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && mount --bind "$1" /run/secrets/kubernetes.io/serviceaccount && exec "$2"`
	proc, err := cp.StartProcess("etcd-operator-incluster",
		[]string{"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=" + apiPort},
		"unshare", "--mount", "--propagation=private", "sh", "-c", mountSA, "sh", saDir, operatorBin)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.StopProcess("etcd-operator-incluster", 10*time.Second)
	logOf := func() string { return processLog(t, "etcd-operator-incluster", 0) }

	apply(t, strings.Replace(clusterYAML("in-a", 1), "metadata:\n", "metadata:\n  namespace: "+ns+"\n", 1))
	waitPhaseIn(t, ns, "in-a", "Created", 60*time.Second)
	if want := fmt.Sprintf("apiServer=https://127.0.0.1:%s namespace=%s", apiPort, ns); !strings.Contains(logOf(), want) {
		t.Errorf("the operator did not start in-cluster (%q):\n%s", want, logOf())
	}
	err = Eventually(30*time.Second, "an Event about in-a", func() (bool, error) {
		return len(listIn(t, ns, "events", "")) > 0, nil
	})
	if err != nil {
		t.Error(err)
	}

	t.Run("token rotation", func(t *testing.T) {
		token2 := boundToken(t, ns, "token-two")
		// The kubelet swaps the file atomically; so do we.
		tmp := filepath.Join(saDir, ".token.new")
		if err := os.WriteFile(tmp, []byte(token2), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(saDir, "token")); err != nil {
			t.Fatal(err)
		}
		// Revoke the first token: it was bound to a Secret.
		if _, err := cp.Kubectl("", "delete", "secret", "-n", ns, "token-one"); err != nil {
			t.Fatal(err)
		}
		err := Eventually(30*time.Second, "the first token to be rejected", func() (bool, error) {
			code, _, err := cp.DoAs(token1, "GET", "/api", nil, "")
			return code == 401, err
		})
		if err != nil {
			t.Fatal(err)
		}
		apply(t, strings.Replace(clusterYAML("in-b", 1), "metadata:\n", "metadata:\n  namespace: "+ns+"\n", 1))
		waitPhaseIn(t, ns, "in-b", "Created", 60*time.Second)
	})

	for _, tc := range []struct {
		name, from, to, can, want string
	}{
		{
			name: "no create on services", can: "create services",
			from: "    resources: [pods, services]\n    verbs: [create, get]",
			to:   "    resources: [pods, services]\n    verbs: [get]",
			want: `services is forbidden: User \"system:serviceaccount:incluster:etcd-operator\" cannot create resource \"services\"`,
		},
		{
			name: "no update on finalizers", can: "update etcdclusters.coreos.com --subresource=finalizers",
			from: "    resources: [etcdclusters/finalizers]\n    verbs: [update]",
			to:   "    resources: [etcdclusters/finalizers]\n    verbs: [get]",
			want: "cannot set blockOwnerDeletion",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(deploy, tc.from) {
				t.Fatalf("examples/deploy.yaml has no %q", tc.from)
			}
			apply(t, strings.Replace(deploy, tc.from, tc.to, 1))
			waitCan(t, ns, tc.can, "no")
			name := "in-" + strings.ReplaceAll(tc.name, " ", "-")
			apply(t, strings.Replace(clusterYAML(name, 1), "metadata:\n", "metadata:\n  namespace: "+ns+"\n", 1))
			st := waitPhaseIn(t, ns, name, "Failed", 60*time.Second).status()
			msg, _ := st["message"].(string)
			if !strings.Contains(msg, "403") || !strings.Contains(strings.ReplaceAll(msg, `"`, `\"`), tc.want) {
				t.Errorf("status.message = %q, want a 403 with %q", msg, tc.want)
			}
			if !strings.Contains(logOf(), tc.want) {
				t.Errorf("the log lacks %q", tc.want)
			}
			select {
			case <-proc.Done():
				t.Fatal("the operator exited")
			default:
			}
			// Put the permission back: the retry creates the cluster.
			apply(t, deploy)
			waitCan(t, ns, tc.can, "yes")
			waitPhaseIn(t, ns, name, "Created", 90*time.Second)
		})
	}
	if strings.Contains(logOf(), token1[:20]) {
		t.Error("the log contains the token")
	}
}

// boundToken makes a Secret and a ServiceAccount token bound to it: deleting
// the Secret revokes the token.
func boundToken(t *testing.T, ns, secret string) string {
	t.Helper()
	apply(t, fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\n", secret, ns))
	var s object
	if err := cp.Get("/api/v1/namespaces/"+ns+"/secrets/"+secret, &s); err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"spec": map[string]any{
			"expirationSeconds": 3600,
			"boundObjectRef":    map[string]any{"apiVersion": "v1", "kind": "Secret", "name": secret, "uid": s.uid()},
		},
	})
	code, b, err := cp.Do("POST", "/api/v1/namespaces/"+ns+"/serviceaccounts/etcd-operator/token", req, "application/json")
	if err != nil || code != 201 {
		t.Fatalf("TokenRequest: %d %s %v", code, b, err)
	}
	var tr struct{ Status struct{ Token string } }
	if err := json.Unmarshal(b, &tr); err != nil || tr.Status.Token == "" {
		t.Fatalf("TokenRequest answer: %s", b)
	}
	return tr.Status.Token
}

// waitCan waits until RBAC says answer to "can the operator do this".
func waitCan(t *testing.T, ns, verbResource, answer string) {
	t.Helper()
	args := append([]string{"auth", "can-i"}, strings.Fields(verbResource)...)
	args = append(args, "-n", ns, "--as=system:serviceaccount:"+ns+":etcd-operator")
	err := Eventually(30*time.Second, "RBAC to answer "+answer+" to "+verbResource, func() (bool, error) {
		out, _ := cp.Kubectl("", args...)
		return strings.TrimSpace(out) == answer, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
