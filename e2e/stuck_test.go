package e2e

// Never stuck, on the real node: states that overlapping faults reach, and
// that the operator once never left, end at Running with every key kept.
// Cordoning the node (spec.unschedulable, as `kubectl cordon` sets it) holds
// new Pods Pending, as a full or lost node would; an image tag no registry
// has (v3.7.99: containerd's pulls go to a proxy that serves nothing) holds
// a container in ImagePullBackOff.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cordon marks the node unschedulable until uncordon or the test's end.
func cordon(t *testing.T) (uncordon func()) {
	t.Helper()
	if _, err := cp.Kubectl("", "cordon", NodeName); err != nil {
		t.Fatal(err)
	}
	done := false
	uncordon = func() {
		if !done {
			done = true
			if _, err := cp.Kubectl("", "uncordon", NodeName); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(uncordon)
	return uncordon
}

func TestNeverStuck(t *testing.T) {
	// Case 1: two of five members lost at once while new Pods cannot be
	// scheduled. Both are removed before a learner is added, and the
	// learner, held Pending, is waited for; nothing else changes under it.
	t.Run("two of five lost while new Pods stay Pending", func(t *testing.T) {
		d := startEphemeral(t, "stuck-lost", "five", 5, "v3.6.16")
		d.running(5)
		if err := d.put("/before", "two-lost"); err != nil {
			t.Fatal(err)
		}
		uncordon := cordon(t)
		d.deletePods(d.member(1), d.member(3))
		st := d.wait("a learner held Pending", 3*time.Minute, func(st e2eStatus) bool {
			return st.reason("Progressing") == "WaitingForLearner" && len(st.Members) == 4
		})
		t.Logf("while cordoned: %s", st.Message)
		uncordon()
		d.running(5)
		if v := d.get("/before"); v != "two-lost" {
			t.Errorf("the key written before reads %q", v)
		}
	})

	// Case 2: a learner loses its Pod before it is promoted. With the node
	// cordoned the learner's Pod stays Pending; deleted there, it is made
	// again, and the learner joins once the node takes Pods.
	t.Run("a learner that loses its Pod", func(t *testing.T) {
		d := startEphemeral(t, "stuck-learner", "four", 3, "v3.6.16")
		d.running(3)
		if err := d.put("/before", "learner"); err != nil {
			t.Fatal(err)
		}
		uncordon := cordon(t)
		d.apply(4, "v3.6.16")
		st := d.wait("a learner held Pending", 3*time.Minute, func(st e2eStatus) bool {
			return st.reason("Progressing") == "WaitingForLearner" && len(st.Members) == 4
		})
		t.Logf("while cordoned: %s", st.Message)
		old := d.podUID(d.member(3))
		d.deletePods(d.member(3))
		if err := Eventually(time.Minute, "the learner's Pod made again", func() (bool, error) {
			uid := d.podUID(d.member(3))
			return uid != "" && uid != old, nil
		}); err != nil {
			t.Fatal(err)
		}
		uncordon()
		d.running(4)
		if v := d.get("/before"); v != "learner" {
			t.Errorf("the key written before reads %q", v)
		}
	})

	// Case 4: a new cluster created with a version no registry has is made
	// again with the version it is given next.
	t.Run("a new cluster with a version that does not pull", func(t *testing.T) {
		d := startEphemeral(t, "stuck-new", "fresh", 3, "v3.7.99")
		err := Eventually(3*time.Minute, "every member Pod waiting for its image", func() (bool, error) {
			var pods struct {
				Items []struct {
					Status struct {
						ContainerStatuses []struct {
							State struct{ Waiting *struct{ Reason string } }
						}
					}
				}
			}
			if err := cp.Get("/api/v1/namespaces/"+d.ns+"/pods?labelSelector="+ofCluster(d.name), &pods); err != nil {
				return false, err
			}
			waiting := 0
			for _, p := range pods.Items {
				for _, c := range p.Status.ContainerStatuses {
					if w := c.State.Waiting; w != nil && (w.Reason == "ImagePullBackOff" || w.Reason == "ErrImagePull") {
						waiting++
					}
				}
			}
			return waiting == 3, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := d.status(); st.Phase != "Creating" {
			t.Errorf("with v3.7.99: phase %s, want Creating", st.Phase)
		}
		d.apply(3, "v3.6.16")
		d.running(3)
		if err := d.put("/after", "fresh"); err != nil {
			t.Fatal(err)
		}
		if v := d.get("/after"); v != "fresh" {
			t.Errorf("the key written reads %q", v)
		}
	})

	// Case 12: a member's data is wiped while its Pod lives (a disk
	// replaced). etcd exits at every restart; the kubelet keeps its last
	// words in the Pod's status (FallbackToLogsOnError), and the operator
	// replaces the member for what etcd said, not only because its image
	// runs elsewhere.
	t.Run("a member's data wiped while its Pod lives", func(t *testing.T) {
		d := startEphemeral(t, "stuck-wiped", "wiped", 3, "v3.6.16")
		d.running(3)
		if err := d.put("/before", "wiped"); err != nil {
			t.Fatal(err)
		}
		victim := d.member(2)
		uid := d.podUID(victim)
		// Stopped first: the kubelet would restart a killed etcd on the
		// data before it is gone.
		d.signal(victim, syscall.SIGSTOP)
		data := filepath.Join(NodeDir(), "kubelet", "pods", uid, "volumes", "kubernetes.io~empty-dir", "data")
		entries, err := os.ReadDir(data)
		if err != nil || len(entries) == 0 {
			t.Fatalf("the member's emptyDir %s: %d entries, %v", data, len(entries), err)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(data, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cp.KillMember(d.ns, victim); err != nil {
			t.Fatal(err)
		}
		const sign = "has already been bootstrapped"
		var said string
		if err := Eventually(3*time.Minute, "the member replaced for what etcd said", func() (bool, error) {
			msgs := d.eventMessages("MemberReplaced")
			if len(msgs) == 0 {
				return false, nil
			}
			said = msgs[0]
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(said, sign) {
			t.Errorf("MemberReplaced says %q, want etcd's words %q", said, sign)
		}
		d.running(3)
		if v := d.get("/before"); v != "wiped" {
			t.Errorf("the key written before reads %q", v)
		}
	})
}
