package e2e

// The operator in a Pod, as examples/deploy.yaml runs it: in-cluster
// configuration (ServiceAccount token, cluster CA, the kubernetes Service)
// and least privilege. The idea: RBAC can be tested, not only written;
// take each verb of the Role away in turn and the operator reports the
// 403 where a person looks, keeps running, and recovers once it is back.

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The operator as examples/deploy.yaml runs it, on the real node: the
// Deployment as it is (only its namespace changed) with the image the
// Dockerfile describes (static binary, scratch, USER 65532), so the Pod gets
// the real projected ServiceAccount token and cluster CA, runs as non-root
// on a read-only root filesystem, and reaches the API server through the
// kubernetes Service, exactly the RBAC of the file and nothing else.
func TestInCluster(t *testing.T) {
	needNode(t)
	ns := nodeNamespace(t, "incluster")
	manifests, err := os.ReadFile(examplePath("deploy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	deploy := strings.ReplaceAll(string(manifests), "namespace: default", "namespace: "+ns)
	start := time.Now()
	apply(t, deploy)
	pod := waitOperatorPod(t, ns)
	t.Logf("the operator's Pod %s ran %s after the apply", pod, time.Since(start).Round(time.Millisecond))
	logOf := func() string {
		logs, err := cp.PodLogs(ns, pod, "")
		if err != nil {
			t.Fatal(err)
		}
		return logs
	}
	// What the kubelet made of the Deployment's securityContext, seen on
	// the process itself.
	pid := operatorPID(t)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !regexpMatch(`(?m)^Uid:\s+65532\s+65532`, string(status)) || !regexpMatch(`(?m)^Gid:\s+65532\s+65532`, string(status)) {
		t.Errorf("the operator does not run as 65532:65532:\n%s", status)
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !regexpMatch(`(?m)^\S+ \S+ \S+ \S+ / ro[, ]`, string(mounts)) {
		t.Errorf("the operator's root filesystem is not read-only:\n%s", mounts)
	}
	if !strings.Contains(string(mounts), " /var/run/secrets/kubernetes.io/serviceaccount ") {
		t.Errorf("no ServiceAccount volume in the operator's mounts:\n%s", mounts)
	}

	applyCluster(t, Cluster{Namespace: ns, Name: "in-a", Size: 1})
	waitPhaseIn(t, ns, "in-a", "Running", 60*time.Second)
	if want := fmt.Sprintf("apiServer=https://%s:443 namespace=%s", KubernetesServiceIP, ns); !strings.Contains(logOf(), want) {
		t.Errorf("the operator did not start in-cluster (%q):\n%s", want, logOf())
	}
	err = Eventually(30*time.Second, "an Event about in-a", func() (bool, error) {
		return len(listIn(t, ns, "events", "")) > 0, nil
	})
	if err != nil {
		t.Error(err)
	}

	// One verb of the Role taken away at a time: the operator reports the
	// 403 (in the status where it concerns a cluster, in the log where it
	// concerns the Pod watch), keeps running, and recovers once the verb is
	// back. Steps that need a running cluster (a resize, an upgrade) start
	// from one made with every verb.
	const podsRule = "    resources: [pods, services]\n    verbs: [create, get, list, watch, delete]"
	const claimsRule = "    resources: [persistentvolumeclaims]\n    verbs: [create, get, list, watch, delete, patch]"
	const secretsRule = "    resources: [secrets]\n    verbs: [get, list, create, patch]"
	for _, tc := range []struct {
		name, from, to, can, want string
		logOnly                   bool // no cluster's status can say it
		// restart: the verb is used once at start and again every few
		// minutes (a watch); the operator's container is killed so that
		// the kubelet starts it again and it asks now.
		restart bool
		change  func(name string) // a spec change that needs the verb
		tls     bool              // the cluster has spec.tls
	}{
		{
			name: "no create on secrets", can: "create secrets", tls: true,
			from: secretsRule, to: "    resources: [secrets]\n    verbs: [get, list, patch]",
			want: `secrets is forbidden: User \"system:serviceaccount:incluster:etcd-operator\" cannot create resource \"secrets\"`,
		},
		{
			name: "no list on secrets", can: "list secrets", tls: true,
			from: secretsRule, to: "    resources: [secrets]\n    verbs: [get, create, patch]",
			want: `cannot list resource \"secrets\"`,
		},
		{
			// A rotation of the root credentials patches Secret NAME-root
			// (certificates renew by patch too, but not within a test).
			name: "no patch on secrets", can: "patch secrets", tls: true,
			from: secretsRule, to: "    resources: [secrets]\n    verbs: [get, list, create]",
			want: `cannot patch resource \"secrets\"`,
			change: func(name string) {
				applyCluster(t, Cluster{Namespace: ns, Name: name, Size: 1, Version: "v3.6.16", TLS: map[string]any{"credentialsRotation": "in-cluster"}})
			},
		},
		{
			name: "no create on services", can: "create services",
			from: podsRule, to: "    resources: [pods, services]\n    verbs: [get, list, watch, delete]",
			want: `services is forbidden: User \"system:serviceaccount:incluster:etcd-operator\" cannot create resource \"services\"`,
		},
		{
			// Listed once at start (the watches' cache); without it the
			// cache never fills, and each pass lists and is refused.
			name: "no list on pods and services", can: "list pods", restart: true,
			from: podsRule, to: "    resources: [pods, services]\n    verbs: [create, get, watch, delete]",
			want: `cannot list resource \"pods\"`,
		},
		{
			name: "no create on pods/proxy", can: "create pods --subresource=proxy",
			from: "    resources: [pods/proxy]\n    verbs: [create, get]", to: "    resources: [pods/proxy]\n    verbs: [get]",
			want: `cannot create resource \"pods/proxy\"`,
		},
		{
			name: "no watch on pods and services", can: "watch pods", logOnly: true, restart: true,
			from: podsRule, to: "    resources: [pods, services]\n    verbs: [create, get, list, delete]",
			want: `cannot watch resource \"pods\"`,
		},
		{
			name: "no delete on pods and services", can: "delete pods",
			from: podsRule, to: "    resources: [pods, services]\n    verbs: [create, get, list, watch]",
			want:   `cannot delete resource \"pods\"`,
			change: func(name string) { applyCluster(t, Cluster{Namespace: ns, Name: name, Size: 2, Version: "v3.6.16"}) },
		},
		{
			name: "no patch on pods", can: "patch pods",
			from: "    resources: [pods]\n    verbs: [patch]", to: "    resources: [pods]\n    verbs: [get]",
			want:   `cannot patch resource \"pods\"`,
			change: func(name string) { applyCluster(t, Cluster{Namespace: ns, Name: name, Size: 3, Version: "v3.7.3"}) },
		},
		{
			name: "no create on persistentvolumeclaims", can: "create persistentvolumeclaims",
			from: claimsRule,
			to:   "    resources: [persistentvolumeclaims]\n    verbs: [get, list, watch, delete, patch]",
			want: `cannot create resource \"persistentvolumeclaims\"`,
		},
		{
			// A scale-down deletes the removed member's claim last.
			name: "no delete on persistentvolumeclaims", can: "delete persistentvolumeclaims",
			from:   claimsRule,
			to:     "    resources: [persistentvolumeclaims]\n    verbs: [create, get, list, watch, patch]",
			want:   `cannot delete resource \"persistentvolumeclaims\"`,
			change: func(name string) { applyCluster(t, Cluster{Namespace: ns, Name: name, Size: 2, Version: "v3.6.16"}) },
		},
		{
			// Without it the claims' cache never fills, and each pass
			// lists and is refused.
			name: "no list on persistentvolumeclaims", can: "list persistentvolumeclaims", restart: true,
			from: claimsRule,
			to:   "    resources: [persistentvolumeclaims]\n    verbs: [create, get, watch, delete, patch]",
			want: `cannot list resource \"persistentvolumeclaims\"`,
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
			name := "in-" + strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "/", "-")
			if tc.change != nil {
				c := Cluster{Namespace: ns, Name: name, Size: 3, Version: "v3.6.16"}
				if tc.tls {
					c.Size, c.TLS = 1, map[string]any{}
				}
				applyCluster(t, c)
				waitPhaseIn(t, ns, name, "Running", 90*time.Second)
			}
			logFrom := len(logOf())
			apply(t, strings.Replace(deploy, tc.from, tc.to, 1))
			waitCan(t, ns, tc.can, "no")
			restarted := restarts(t, ns, pod)
			if tc.restart {
				if _, err := cp.KillMember(ns, pod); err != nil {
					t.Fatal(err)
				}
				err := Eventually(time.Minute, "the operator's container to run again", func() (bool, error) {
					return restarts(t, ns, pod) > restarted && len(PodProcesses(cp.PodUID(ns, pod))) > 0, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				restarted, logFrom = restarts(t, ns, pod), 0
			}
			if tc.change != nil {
				tc.change(name)
			} else {
				c := Cluster{Namespace: ns, Name: name, Size: 1, Version: "v3.6.16"}
				if tc.tls {
					c.TLS = map[string]any{}
				}
				applyCluster(t, c)
			}
			if tc.logOnly {
				err := Eventually(90*time.Second, "the log to say "+tc.want, func() (bool, error) {
					return strings.Contains(logOf()[logFrom:], tc.want), nil
				})
				if err != nil {
					t.Fatal(err)
				}
			} else {
				st := waitPhaseIn(t, ns, name, "Failed", 90*time.Second).status()
				msg, _ := st["message"].(string)
				if !strings.Contains(msg, "403") || !strings.Contains(strings.ReplaceAll(msg, `"`, `\"`), tc.want) {
					t.Errorf("status.message = %q, want a 403 with %q", msg, tc.want)
				}
				if !strings.Contains(logOf(), tc.want) {
					t.Errorf("the log lacks %q", tc.want)
				}
			}
			if n := restarts(t, ns, pod); n != restarted {
				t.Fatalf("the operator's container restarted %d times", n-restarted)
			}
			// Put the permission back: the retry finishes the work.
			apply(t, deploy)
			waitCan(t, ns, tc.can, "yes")
			waitPhaseIn(t, ns, name, "Running", 2*time.Minute)
		})
	}
	token, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/var/run/secrets/kubernetes.io/serviceaccount/token", operatorPID(t)))
	if err != nil || len(token) < 20 {
		t.Fatalf("the Pod's token: %v", err)
	}
	if strings.Contains(logOf(), string(token[:20])) {
		t.Error("the log contains the token")
	}
}

// waitOperatorPod waits for the Deployment's Pod to run and returns its name.
func waitOperatorPod(t *testing.T, ns string) string {
	t.Helper()
	var name string
	var last []object
	err := Eventually(90*time.Second, "the operator's Pod Running", func() (bool, error) {
		last = listIn(t, ns, "pods", "app%3Detcd-operator")
		if len(last) != 1 || last[0].status()["phase"] != "Running" {
			return false, nil
		}
		name = last[0].name()
		return true, nil
	})
	if err != nil {
		for _, p := range last {
			t.Logf("pod %s: %v", p.name(), p.status())
		}
		t.Fatal(err)
	}
	return name
}

// operatorPID finds the in-cluster operator's process (the image's
// /etcd-operator) on the host.
func operatorPID(t *testing.T) int {
	t.Helper()
	for _, pid := range pids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		// The image's entrypoint with the Deployment's args (flags; a
		// restored member's init container would run "restore").
		argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if err == nil && argv[0] == "/etcd-operator" && (len(argv) == 1 || argv[1] != "restore") {
			return pid
		}
	}
	t.Fatal("no /etcd-operator process on the node")
	return 0
}

// restarts is the restart count of a Pod's first container.
func restarts(t *testing.T, ns, pod string) int {
	t.Helper()
	var p struct {
		Status struct{ ContainerStatuses []struct{ RestartCount int } }
	}
	if err := cp.Get("/api/v1/namespaces/"+ns+"/pods/"+pod, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return 0
	}
	return p.Status.ContainerStatuses[0].RestartCount
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
