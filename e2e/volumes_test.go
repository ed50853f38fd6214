package e2e

// Volumes on the real node: a PersistentVolumeClaim of the default
// StorageClass, provisioned by local-path-provisioner when its first Pod
// is scheduled, outlives that Pod, and goes with its directory when the
// claim is deleted (reclaim policy Delete). The idea: what a member
// writes to its claim is on the node's disk, not in the container, so a
// new Pod on the same claim finds it.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestVolumeProvisioner(t *testing.T) {
	needNode(t)
	var sc struct {
		Metadata             struct{ Annotations map[string]string }
		Provisioner          string
		VolumeBindingMode    string
		ReclaimPolicy        string
		AllowVolumeExpansion bool
	}
	if err := cp.Get("/apis/storage.k8s.io/v1/storageclasses/"+StorageClassName, &sc); err != nil {
		t.Fatal(err)
	}
	if sc.Metadata.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" || sc.Provisioner != LocalPathProvisioner ||
		sc.VolumeBindingMode != "WaitForFirstConsumer" || sc.ReclaimPolicy != "Delete" || sc.AllowVolumeExpansion {
		t.Errorf("StorageClass %s = %+v, want the default, %s, WaitForFirstConsumer, Delete, not expandable", StorageClassName, sc, LocalPathProvisioner)
	}

	// The provisioner makes a hostPath volume unless the claim (or the
	// class) asks for a local one; the kubelet mounts either.
	for _, tc := range []struct {
		ns, volumeType, source string
	}{
		{ns: "volumes-hostpath", source: "hostPath"},
		{ns: "volumes-local", volumeType: "local", source: "local"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			ns := nodeNamespace(t, tc.ns)
			token := randomToken(t)
			claim := map[string]any{
				"apiVersion": "v1", "kind": "PersistentVolumeClaim",
				"metadata": map[string]any{"name": "data", "namespace": ns},
				"spec": map[string]any{
					"accessModes": []string{"ReadWriteOnce"},
					"resources":   map[string]any{"requests": map[string]string{"storage": "64Mi"}},
				},
			}
			if tc.volumeType != "" {
				claim["metadata"].(map[string]any)["annotations"] = map[string]string{"volumeType": tc.volumeType}
			}
			applyObject(t, claim)
			claimPath := "/api/v1/namespaces/" + ns + "/persistentvolumeclaims/data"

			// Nothing is provisioned before a Pod uses the claim: the binder
			// says it waits for one, and the claim stays unbound.
			waitEvent(t, ns, "PersistentVolumeClaim", "data", "WaitForFirstConsumer")
			c := getClaim(t, claimPath)
			if c.Spec.StorageClassName != StorageClassName || c.Spec.VolumeName != "" || c.Status.Phase != "Pending" {
				t.Fatalf("claim before its first Pod: class %q, volume %q, phase %s; want %s, none, Pending", c.Spec.StorageClassName, c.Spec.VolumeName, c.Status.Phase, StorageClassName)
			}

			// The first Pod: scheduled, which picks the node; the volume made
			// there and bound; the Pod runs and writes to it.
			start := time.Now()
			applyObject(t, busyboxPod(ns, "writer", "Always", `echo "$TOKEN" > /data/token && exec sleep 3600`, token))
			waitPodPhase(t, ns, "writer", "Running", 2*time.Minute)
			t.Logf("the writer ran %s after it was created (the volume provisioned in between)", time.Since(start).Round(time.Millisecond))
			c = getClaim(t, claimPath)
			if c.Status.Phase != "Bound" || c.Spec.VolumeName == "" {
				t.Fatalf("claim with a running Pod: phase %s, volume %q; want Bound", c.Status.Phase, c.Spec.VolumeName)
			}
			pvPath := "/api/v1/persistentvolumes/" + c.Spec.VolumeName
			var pv persistentVolume
			if err := cp.Get(pvPath, &pv); err != nil {
				t.Fatal(err)
			}
			dir := pv.path(tc.source)
			if dir == "" || filepath.Dir(dir) != VolumesDir() {
				t.Fatalf("PersistentVolume %s: %s path %q, want a directory in %s; spec %+v", c.Spec.VolumeName, tc.source, dir, VolumesDir(), pv.Spec)
			}
			if pv.Spec.PersistentVolumeReclaimPolicy != "Delete" || pv.Spec.StorageClassName != StorageClassName ||
				pv.Spec.Capacity.Storage != "64Mi" || !slices.Equal(pv.nodes(), []string{NodeName}) {
				t.Errorf("PersistentVolume %s: %+v; want Delete, %s, 64Mi, on %s only", c.Spec.VolumeName, pv.Spec, StorageClassName, NodeName)
			}
			// What the Pod wrote is in that directory on this machine.
			err := Eventually(30*time.Second, "the writer's file in "+dir, func() (bool, error) {
				b, err := os.ReadFile(filepath.Join(dir, "token"))
				return err == nil && strings.TrimSpace(string(b)) == token, nil
			})
			if err != nil {
				t.Fatal(err)
			}

			// A second Pod on the same claim, after the first is gone, reads it.
			deleteAndWait(t, "/api/v1/namespaces/"+ns+"/pods/writer")
			applyObject(t, busyboxPod(ns, "reader", "Never", `cat /data/token`, ""))
			waitPodPhase(t, ns, "reader", "Succeeded", 2*time.Minute)
			logs, err := cp.PodLogs(ns, "reader", "")
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(logs) != token {
				t.Errorf("the reader read %q, want the writer's %q", logs, token)
			}
			deleteAndWait(t, "/api/v1/namespaces/"+ns+"/pods/reader")

			// Reclaim policy Delete: the claim deleted, the provisioner's
			// helper Pod removes the directory, then the volume goes.
			start = time.Now()
			deleteAndWait(t, claimPath)
			waitNotFound(t, pvPath)
			t.Logf("the volume was gone %s after the claim was deleted", time.Since(start).Round(time.Millisecond))
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the volume's directory %s is still there after its volume was deleted (%v)", dir, err)
			}
			if log := processLog(t, localPathProcess, 0); !strings.Contains(log, "Volume "+c.Spec.VolumeName+" has been deleted") {
				t.Errorf("the provisioner did not say it removed %s:\n%s", c.Spec.VolumeName, log)
			}
			// It deletes its helper Pods when they are done (other tests'
			// volumes may have helper Pods of their own meanwhile).
			for _, action := range []string{"create", "delete"} {
				helper := "helper-pod-" + action + "-" + c.Spec.VolumeName
				if !strings.Contains(processLog(t, localPathProcess, 0), "create the helper pod "+helper+" ") {
					t.Errorf("the provisioner did not run %s", helper)
				}
				waitNotFound(t, "/api/v1/namespaces/"+LocalPathNamespace+"/pods/"+helper)
			}
		})
	}
}

// busyboxPod is a Pod of the helper image running script with the claim
// "data" at /data; TOKEN in its environment.
func busyboxPod(ns, name, restart, script, token string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"restartPolicy": restart,
			// sleep as PID 1 ignores SIGTERM: do not wait 30 s for it.
			"terminationGracePeriodSeconds": 1,
			"automountServiceAccountToken":  false,
			"containers": []map[string]any{{
				"name": "busybox", "image": HelperImageRef, "imagePullPolicy": "Never",
				"command":      []string{"/bin/sh", "-c", script},
				"env":          []map[string]string{{"name": "TOKEN", "value": token}},
				"volumeMounts": []map[string]string{{"name": "data", "mountPath": "/data"}},
			}},
			"volumes": []map[string]any{{"name": "data", "persistentVolumeClaim": map[string]string{"claimName": "data"}}},
		},
	}
}

type claimState struct {
	Spec   struct{ StorageClassName, VolumeName string }
	Status struct{ Phase string }
}

func getClaim(t *testing.T, path string) claimState {
	t.Helper()
	var c claimState
	if err := cp.Get(path, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

type persistentVolume struct {
	Spec struct {
		PersistentVolumeReclaimPolicy string
		StorageClassName              string
		Capacity                      struct{ Storage string }
		HostPath, Local               *struct{ Path string }
		NodeAffinity                  struct {
			Required struct {
				NodeSelectorTerms []struct {
					MatchExpressions []struct {
						Key, Operator string
						Values        []string
					}
				}
			}
		}
	}
}

// path is the volume's directory if its source is the one named.
func (pv persistentVolume) path(source string) string {
	switch {
	case source == "hostPath" && pv.Spec.HostPath != nil && pv.Spec.Local == nil:
		return pv.Spec.HostPath.Path
	case source == "local" && pv.Spec.Local != nil && pv.Spec.HostPath == nil:
		return pv.Spec.Local.Path
	}
	return ""
}

// nodes are the hostnames the volume's node affinity allows.
func (pv persistentVolume) nodes() []string {
	var out []string
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == "kubernetes.io/hostname" && e.Operator == "In" {
				out = append(out, e.Values...)
			}
		}
	}
	return out
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func applyObject(t *testing.T, obj any) {
	t.Helper()
	if err := cp.applyJSON(obj); err != nil {
		t.Fatal(err)
	}
}

// waitPodPhase waits for a Pod's phase; on a timeout it shows how the
// Pod and its claim are described, which says what they wait for.
func waitPodPhase(t *testing.T, ns, pod, phase string, timeout time.Duration) {
	t.Helper()
	err := Eventually(timeout, ns+"/"+pod+" "+phase, func() (bool, error) {
		var p struct{ Status struct{ Phase string } }
		if err := cp.Get("/api/v1/namespaces/"+ns+"/pods/"+pod, &p); err != nil {
			return false, err
		}
		if p.Status.Phase == "Failed" && phase != "Failed" {
			return false, errors.New("the Pod failed")
		}
		return p.Status.Phase == phase, nil
	})
	if err != nil {
		out, _ := cp.Kubectl("", "describe", "-n", ns, "pod/"+pod, "pvc")
		t.Fatalf("%v\n%s\n%s", err, out, processLog(t, localPathProcess, 0))
	}
}

// waitEvent waits for an Event with reason about an object.
func waitEvent(t *testing.T, ns, kind, name, reason string) {
	t.Helper()
	err := Eventually(60*time.Second, "a "+reason+" Event for "+kind+" "+name, func() (bool, error) {
		for _, e := range listIn(t, ns, "events", "") {
			obj, _ := e["involvedObject"].(map[string]any)
			if e["reason"] == reason && obj["kind"] == kind && obj["name"] == name {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// deleteAndWait deletes an object and waits until the API server no longer
// has it (its finalizers done).
func deleteAndWait(t *testing.T, path string) {
	t.Helper()
	code, b, err := cp.Do("DELETE", path, nil, "")
	if err != nil || (code != 200 && code != 202) {
		t.Fatalf("DELETE %s: %d %s %v", path, code, b, err)
	}
	waitNotFound(t, path)
}

// waitNotFound waits until the API server answers 404 for path.
func waitNotFound(t *testing.T, path string) {
	t.Helper()
	err := Eventually(2*time.Minute, path+" to be gone", func() (bool, error) {
		code, _, err := cp.Do("GET", path, nil, "")
		return code == 404, err
	})
	if err != nil {
		out, _ := cp.Kubectl("", "get", "pv,pvc,pods", "-A", "-o", "wide")
		t.Fatalf("%v\n%s\n%s", err, out, processLog(t, localPathProcess, 0))
	}
}

// The operator's members on PersistentVolumeClaims, on the real node, with
// a key written first and read after each step: a deleted member Pod comes
// back as the same member; every Pod deleted at once, all come back and
// the cluster regains its quorum with its data; a claim deleted with its
// Pod, the member is replaced on a fresh claim; the claims follow a
// resize; deleting the EtcdCluster deletes them.
func TestVolumeMembers(t *testing.T) {
	d := startDay2(t, "volume-members", "example", 3, "v3.6.16")
	d.running(3)
	if err := d.put("/before", "volumes"); err != nil {
		t.Fatal(err)
	}
	claimNames := func() []string { return names(listIn(t, d.ns, "persistentvolumeclaims", ofCluster(d.name))) }
	if got := claimNames(); !slices.Equal(got, d.members(3)) {
		t.Fatalf("claims %v, want %v", got, d.members(3))
	}
	ids := func() map[string]string {
		out := map[string]string{}
		for _, m := range d.running(len(d.members(3))).Members {
			out[m.Name] = m.ID
		}
		return out
	}
	// back waits until each Pod is a new one and the cluster is Running.
	back := func(pods []string, old map[string]string) {
		t.Helper()
		err := Eventually(3*time.Minute, "new Pods for "+strings.Join(pods, ", "), func() (bool, error) {
			for _, p := range pods {
				if uid := d.podUID(p); uid == "" || uid == old[p] {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	uids := func(pods []string) map[string]string {
		out := map[string]string{}
		for _, p := range pods {
			out[p] = d.podUID(p)
		}
		return out
	}
	check := func(t *testing.T, want map[string]string, what string) {
		t.Helper()
		if got := ids(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: member IDs %v, want %v", what, got, want)
		}
		if v := d.get("/before"); v != "volumes" {
			t.Errorf("%s: the key written first reads %q", what, v)
		}
	}

	before := ids()
	t.Run("a member Pod deleted", func(t *testing.T) {
		pods := []string{d.member(1)}
		old := uids(pods)
		start := time.Now()
		d.deletePods(pods...)
		back(pods, old)
		d.running(3)
		t.Logf("member Pod deleted -> Running 3/3 in %s", time.Since(start).Round(time.Millisecond))
		check(t, before, "after a Pod deleted")
		if n := d.events("MemberAdded") + d.events("MemberReplaced"); n != 0 {
			t.Errorf("%d MemberAdded/MemberReplaced events, want none: no membership change", n)
		}
	})
	t.Run("every member Pod deleted at once", func(t *testing.T) {
		seen := d.record()
		pods := d.members(3)
		old := uids(pods)
		start := time.Now()
		d.deletePods(pods...)
		back(pods, old)
		d.wait("Available", 4*time.Minute, func(st e2eStatus) bool { return st.cond("Available") == "True" })
		t.Logf("every member Pod deleted -> Available in %s", time.Since(start).Round(time.Millisecond))
		d.running(3)
		check(t, before, "after every Pod deleted")
		if seen(func(st e2eStatus) bool { return st.reason("Available") == "DataLost" }) {
			t.Error("a status on the way said the data was lost")
		}
		if !seen(func(st e2eStatus) bool {
			return strings.Contains(st.Message, "coming back") || st.cond("Available") == "True"
		}) {
			t.Error("no status on the way")
		}
	})
	// replacedAfter deletes member m's claim, and its Pod if withPod; then
	// the member is replaced: the n-th MemberReplaced event, only m's
	// member ID new, a fresh claim, the key still there.
	replacedAfter := func(t *testing.T, m string, withPod bool, n int) {
		t.Helper()
		prev, oldClaim := ids(), getClaimUID(t, d.ns, m)
		if _, err := cp.Kubectl("", "delete", "pvc", "-n", d.ns, "--wait=false", m); err != nil {
			t.Fatal(err)
		}
		if withPod {
			d.deletePods(m)
		}
		err := Eventually(3*time.Minute, fmt.Sprintf("MemberReplaced event %d", n), func() (bool, error) { return d.events("MemberReplaced") == n, nil })
		if err != nil {
			t.Fatal(err)
		}
		after := ids()
		for name, id := range prev {
			if name == m && id == after[name] || name != m && id != after[name] {
				t.Errorf("member %s: ID %s before, %s after; want only %s's new", name, id, after[name], m)
			}
		}
		if uid := getClaimUID(t, d.ns, m); uid == "" || uid == oldClaim {
			t.Errorf("claim %s uid %q (was %q), want a fresh claim", m, uid, oldClaim)
		}
		if v := d.get("/before"); v != "volumes" {
			t.Errorf("the key written first reads %q", v)
		}
	}
	t.Run("a claim deleted with its Pod", func(t *testing.T) { replacedAfter(t, d.member(2), true, 1) })
	// Nothing but the PVC watch tells of this one: the Pod runs on, and
	// the claim waits for it (pvc-protection) until the operator replaces
	// the member.
	t.Run("a claim deleted alone", func(t *testing.T) { replacedAfter(t, d.member(1), false, 2) })
	t.Run("scale 3 -> 5 -> 3", func(t *testing.T) {
		for _, n := range []int{5, 3} {
			d.apply(n, "")
			d.running(n)
			err := Eventually(2*time.Minute, fmt.Sprintf("%d claims", n), func() (bool, error) { return slices.Equal(claimNames(), d.members(n)), nil })
			if err != nil {
				t.Fatalf("%v: %v", err, claimNames())
			}
		}
		if v := d.get("/before"); v != "volumes" {
			t.Errorf("the key written first reads %q", v)
		}
	})
	t.Run("a larger size the StorageClass cannot give", func(t *testing.T) {
		// local-path's class does not allow volume expansion: the API
		// server refuses the claim's patch, and the status says why while
		// the cluster keeps serving.
		setSize := func(size string) {
			t.Helper()
			body := `{"spec":{"storage":{"size":` + size + `}}}`
			if _, err := cp.Kubectl("", "patch", "etcdcluster", "-n", d.ns, d.name, "--type=merge", "-p", body); err != nil {
				t.Fatal(err)
			}
		}
		setSize(`"16Gi"`)
		st := d.wait("the expansion refused", 2*time.Minute, func(st e2eStatus) bool {
			return strings.Contains(st.Message, "expanding volume") && strings.Contains(st.Message, "must support resize")
		})
		t.Logf("status: %s: %s", st.Phase, st.Message)
		if st.cond("Available") != "True" {
			t.Errorf("Available %s while the expansion is refused, want True: %+v", st.cond("Available"), st)
		}
		for _, m := range claimNames() {
			if size := claimRequest(t, d.ns, m); size != "8Gi" {
				t.Errorf("claim %s asks for %s, want 8Gi as before", m, size)
			}
		}
		setSize("null")
		d.running(3)
		if v := d.get("/before"); v != "volumes" {
			t.Errorf("the key written first reads %q", v)
		}
	})
	t.Run("the cluster deleted", func(t *testing.T) {
		if _, err := cp.Kubectl("", "delete", "etcdcluster", "-n", d.ns, "--wait=false", d.name); err != nil {
			t.Fatal(err)
		}
		err := Eventually(2*time.Minute, "no claims left", func() (bool, error) { return len(claimNames()) == 0, nil })
		if err != nil {
			t.Fatalf("%v: %v", err, claimNames())
		}
	})
}

// claimRequest is the storage PVC name asks for.
func claimRequest(t *testing.T, ns, name string) string {
	t.Helper()
	var c struct {
		Spec struct {
			Resources struct{ Requests map[string]string }
		}
	}
	if err := cp.Get("/api/v1/namespaces/"+ns+"/persistentvolumeclaims/"+name, &c); err != nil {
		t.Fatal(err)
	}
	return c.Spec.Resources.Requests["storage"]
}

// getClaimUID is the uid of PVC name, "" if there is none.
func getClaimUID(t *testing.T, ns, name string) string {
	t.Helper()
	var c struct{ Metadata struct{ UID string } }
	if err := cp.Get("/api/v1/namespaces/"+ns+"/persistentvolumeclaims/"+name, &c); err != nil {
		return ""
	}
	return c.Metadata.UID
}
