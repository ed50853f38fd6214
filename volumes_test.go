// Tests of members on PersistentVolumeClaims: spec.storage, and members
// that come back on their volumes as themselves.
package main

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestParseStorage(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		want    storageSpec
		wantErr string
	}{
		{raw: ``, want: storageSpec{Size: defaultStorageSize}},
		{raw: `{}`, want: storageSpec{Size: defaultStorageSize}},
		{raw: `{"size":"20Gi","storageClassName":"fast-ssd"}`, want: storageSpec{Size: "20Gi", Class: "fast-ssd"}},
		{raw: `{"size":"500M"}`, want: storageSpec{Size: "500M"}},
		{raw: `{"emptyDir":true}`, want: storageSpec{EmptyDir: true}},
		{raw: `{"emptyDir":false,"size":"1Gi"}`, want: storageSpec{Size: "1Gi"}},
		{raw: `{"emptyDir":true,"size":"1Gi"}`, wantErr: "spec.storage.emptyDir cannot be set with spec.storage.size"},
		{raw: `{"size":"8 GiB"}`, wantErr: `spec.storage.size "8 GiB" is not a quantity`},
		{raw: `{"size":"1.5Gi"}`, wantErr: `spec.storage.size "1.5Gi" is not a quantity`},
		{raw: `{"storageClassName":"Fast_SSD"}`, wantErr: `spec.storage.storageClassName "Fast_SSD" is not a valid StorageClass name`},
		{raw: `"8Gi"`, wantErr: "spec.storage must be an object"},
	} {
		got, err := parseStorage(json.RawMessage(tc.raw))
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parseStorage(%s) = %v, %v; want error %q", tc.raw, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("parseStorage(%s) = %+v, %v; want %+v", tc.raw, got, err, tc.want)
		}
	}
}

func TestBytesOf(t *testing.T) {
	for q, want := range map[string]int64{"1Gi": 1 << 30, "8Gi": 8 << 30, "500M": 500e6, "1024": 1024, "2Ki": 2048} {
		if got, ok := bytesOf(q); !ok || got != want {
			t.Errorf("bytesOf(%q) = %d, %v; want %d", q, got, ok, want)
		}
	}
	for _, q := range []string{"", "Gi", "1.5Gi", "-1Gi", "99999999999999999Ei"} {
		if _, ok := bytesOf(q); ok {
			t.Errorf("bytesOf(%q) ok, want refused", q)
		}
	}
}

// A member on a PVC whose Pod is deleted comes back on it as the same
// member: no membership change. Every member Pod deleted at once: all come
// back, the cluster regains its quorum, and the status never says the data
// is lost.
func TestMemberBackOnItsVolume(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deleted []string
	}{
		{name: "one Pod", deleted: []string{"example-1"}},
		{name: "every Pod at once", deleted: []string{"example-0", "example-1", "example-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := startExample(t)
			waitStatus(f, "example", running(3))
			ids := f.memberIDs("default", "example")
			mark := len(f.history)
			f.mu.Lock()
			for _, p := range tc.deleted {
				f.deletePodLocked("default", p)
			}
			f.mu.Unlock()
			backAsBefore(t, f, tc.deleted, ids)
			f.mu.Lock()
			for _, ev := range f.history[mark:] {
				var ec EtcdCluster
				_ = json.Unmarshal(ev.Object, &ec)
				st := ec.status()
				if a, _ := st.condition(condAvailable); a.Reason == reasonDataLost || strings.Contains(st.Message, "data with them") {
					t.Errorf("a status on the way says %s: %s", st.Phase, st.Message)
				}
			}
			f.mu.Unlock()
			for _, p := range tc.deleted {
				cmd := strings.Join(podCommand(f.object("pods", "default", p)), " ")
				if !strings.Contains(cmd, "--initial-cluster-state=existing") {
					t.Errorf("Pod %s made again with %s; want state existing", p, cmd)
				}
			}
			f.waitFor("a MemberRestarted event", func() bool {
				return slices.ContainsFunc(f.events, func(ev map[string]any) bool { return ev["reason"] == reasonMemberRestarted })
			})
		})
	}
}

// The operator killed while every member comes back on its volume: the
// next one finishes the job, with the same members.
func TestKilledWhileMembersComeBack(t *testing.T) {
	f, op := startExample(t)
	waitStatus(f, "example", running(3))
	ids := f.memberIDs("default", "example")
	hung := make(chan struct{})
	var once sync.Once
	f.setFault(func(r request) (int, string, string) {
		if r.Method == "POST" && r.Path == "/api/v1/namespaces/default/pods" && f.countExact("POST", r.Path) >= 2 {
			once.Do(func() { close(hung) })
			<-r.Ctx.Done() // the second Pod's create never returns
		}
		return 0, "", ""
	})
	f.mu.Lock()
	for _, p := range membersOf(3) {
		f.deletePodLocked("default", p)
	}
	f.mu.Unlock()
	<-hung
	op.stop()
	f.setFault(nil)
	startOperator(t, f)
	backAsBefore(t, f, membersOf(3), ids)
}

// backAsBefore waits until the deleted Pods are made again and example is
// Running 3/3, then checks that its members are those it had (ids) and
// that etcd saw no membership change.
func backAsBefore(t *testing.T, f *fakeAPI, deleted []string, ids []uint64) {
	t.Helper()
	f.waitFor("the Pods made again, Running 3/3", func() bool {
		for _, p := range deleted {
			if f.objects["pods/default/"+p] == nil {
				return false
			}
		}
		return running(3).ok(statusOf(f.clusters["default/example"]))
	})
	if got := f.memberIDs("default", "example"); !slices.Equal(got, ids) {
		t.Errorf("member IDs %v, want the same as before, %v", got, ids)
	}
	if log := f.membershipLog(); len(log) != 0 {
		t.Errorf("membership changes %v, want none", log)
	}
}

// The PVCs follow the size: one per member, a removed member's deleted,
// and a name reused only with a fresh one.
func TestVolumesFollowResize(t *testing.T) {
	f, _ := startExample(t)
	waitStatus(f, "example", running(3))
	for _, n := range []int{5, 3} {
		f.putCluster("default", "example", size(n))
		waitStatus(f, "example", statusCheck{"Running at " + string(rune('0'+n)), func(st clusterStatus) bool { return running(n).ok(st) && len(st.Members) == n }})
		f.waitFor("one PVC per member", func() bool {
			f.mu.Unlock()
			defer f.mu.Lock()
			return slices.Equal(f.objectNames("persistentvolumeclaims"), membersOf(n))
		})
	}
}

// memberIDs are the IDs of a cluster's etcd members, sorted.
func (f *fakeAPI) memberIDs(ns, base string) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []uint64
	for _, m := range f.etcds[ns+"/"+base].Members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// withClaims gives every member of w a bound PVC of size.
func withClaims(size string) func(w *world) {
	return func(w *world) {
		for _, p := range w.obs.Pods {
			w.obs.Claims = append(w.obs.Claims, claimView{Name: p.Name, Phase: "Bound", Size: size})
		}
	}
}

// onVolumes is in() with members on 8Gi PVCs.
func onVolumes(size int) input {
	i := in(size, "v3.6.16")
	i.Spec.Storage = storageSpec{Size: defaultStorageSize}
	return i
}

// What decide does for members on PVCs: the Pod of a member whose volume
// is there comes back before anything needs a quorum; a member whose
// volume goes is replaced; a stale volume is deleted and never reused.
func TestDecideVolumes(t *testing.T) {
	claim := func(name string, f func(c *claimView)) func(w *world) {
		return func(w *world) {
			for i := range w.obs.Claims {
				if w.obs.Claims[i].Name == name {
					f(&w.obs.Claims[i])
				}
			}
		}
	}
	grown := onVolumes(3)
	grown.Spec.Storage.Size = "20Gi"
	downgraded := onVolumes(3) // a version refused: the cluster runs 3.6
	downgraded.Spec.Version = "v3.5.21"
	crashLoops := func(name string) func(w *world) {
		return func(w *world) { w.pod(name).Waiting = "CrashLoopBackOff" }
	}
	going := func(name string) func(w *world) { return claim(name, func(c *claimView) { c.Deleting = true }) }
	fresh := onVolumes(1) // a new cluster
	fresh.Prev, fresh.FormedID = clusterStatus{}, ""
	pendingOnGoingClaim := observed{Services: []string{"example-0", "example-client"},
		Pods:   []podView{{Name: "example-0", Phase: "Pending", Image: repo + ":v3.6.16", Claim: "example-0", State: "new"}},
		Claims: []claimView{{Name: "example-0", Phase: "Bound", Size: "8Gi", Deleting: true}}}
	for _, tc := range []struct {
		name   string
		in     input
		obs    observed
		action string
		member string
		phase  string
		reason string // of Available, if set
		says   string // in the status message, if set
		image  string // the step's image, if set
	}{
		{name: "healthy", in: onVolumes(3), obs: newWorld(3).do(withClaims("8Gi")).obs, phase: phaseRunning},
		{name: "a Pod deleted: made again on its volume", in: onVolumes(3), obs: newWorld(3).do(withClaims("8Gi")).noPod("example-1").obs,
			action: actRestartMember, member: "example-1", phase: phaseReplacing},
		{name: "every Pod deleted: the first made again, not data lost", in: onVolumes(3), obs: newWorld(3).do(withClaims("8Gi")).noPod("example-0", "example-1", "example-2").noQuorum().obs,
			action: actRestartMember, member: "example-0", phase: phaseReplacing},
		{name: "every Pod deleted and one claim going: the others come back first", in: onVolumes(3),
			obs: newWorld(3).do(withClaims("8Gi")).noPod("example-0", "example-1", "example-2").noQuorum().
				do(claim("example-0", func(c *claimView) { c.Deleting = true })).obs,
			action: actRestartMember, member: "example-1", phase: phaseReplacing},
		{name: "every Pod back, no quorum yet: coming back", in: onVolumes(3), obs: newWorld(3).do(withClaims("8Gi")).down("example-0", "example-1", "example-2").noQuorum().obs,
			phase: phaseUnavailable, reason: reasonQuorumLost, says: "The members are coming back"},
		{name: "a Pod Failed (evicted): deleted, to be made again", in: onVolumes(3),
			obs:    newWorld(3).do(withClaims("8Gi")).down("example-2").do(func(w *world) { w.pod("example-2").Phase = "Failed" }).obs,
			action: actDeletePod, member: "example-2", phase: phaseReplacing},
		{name: "a Pod being deleted: it comes back, nothing removed", in: onVolumes(3),
			obs:   newWorld(3).do(withClaims("8Gi")).down("example-2").do(func(w *world) { w.pod("example-2").Deleting = true }).obs,
			phase: phaseDegraded},
		{name: "a volume claim being deleted: the member is replaced", in: onVolumes(3),
			obs:    newWorld(3).do(withClaims("8Gi")).do(claim("example-1", func(c *claimView) { c.Deleting = true })).obs,
			action: actRemoveMember, member: "example-1", phase: phaseReplacing},
		{name: "a Pod made again on a claim deleted meanwhile: the member is replaced", in: onVolumes(3),
			obs: newWorld(3).do(withClaims("8Gi")).down("example-1").do(func(w *world) {
				w.pod("example-1").Claim, w.pod("example-1").Phase = "example-1", "Pending"
				w.obs.Claims = slices.DeleteFunc(w.obs.Claims, func(c claimView) bool { return c.Name == "example-1" })
			}).obs,
			action: actRemoveMember, member: "example-1", phase: phaseReplacing},
		{name: "a member crash-looping on its volume with an image that runs elsewhere: replaced (its data is damaged)", in: onVolumes(3),
			obs:    newWorld(3).do(withClaims("8Gi")).down("example-2").do(crashLoops("example-2")).obs,
			action: actRemoveMember, member: "example-2", phase: phaseReplacing},
		{name: "a claim going while another member is lost: the lost one is replaced first", in: onVolumes(3),
			obs: newWorld(3).do(withClaims("8Gi")).do(going("example-1")).down("example-2").do(func(w *world) {
				w.pod("example-2").Deleting, w.pod("example-2").Overdue = true, true // its node is gone
			}).obs,
			action: actRemoveMember, member: "example-2", phase: phaseReplacing},
		{name: "the only voter's claim going, spec.size 2: a member is added first", in: onVolumes(2),
			obs:    newWorld(1).do(withClaims("8Gi")).do(going("example-0")).obs,
			action: actAddMember, member: "example-1", phase: phaseScaling},
		{name: "the only voter's claim going: the status says to add members first", in: onVolumes(1),
			obs:   newWorld(1).do(withClaims("8Gi")).do(going("example-0")).obs,
			phase: phaseDegraded, says: "raise spec.size"},
		{name: "a learner Pending on a claim being deleted: removed", in: onVolumes(4), obs: newWorld(3).do(withClaims("8Gi")).do(func(w *world) {
			w.obs.Etcd.Members = append(w.obs.Etcd.Members, memberView{ID: "9", PeerHost: "example-3", Learner: true})
			w.obs.Pods = append(w.obs.Pods, podView{Name: "example-3", Phase: "Pending", Image: repo + ":v3.6.16", Claim: "example-3", State: "existing"})
			w.obs.Services = append(w.obs.Services, "example-3")
			w.obs.Claims = append(w.obs.Claims, claimView{Name: "example-3", Phase: "Bound", Size: "8Gi", Deleting: true})
		}).obs, action: actRemoveMember, member: "example-3", phase: phaseScaling},
		{name: "every Pod deleted, spec.version a refused downgrade: made again on the version the cluster runs", in: downgraded,
			obs:    newWorld(3).do(withClaims("8Gi")).noPod("example-0", "example-1", "example-2").noQuorum().obs,
			action: actRestartMember, member: "example-0", phase: phaseReplacing, image: repo + ":v3.6.16"},
		{name: "no member answers: the status counts no voters it cannot know", in: onVolumes(3), obs: newWorld(3).do(withClaims("8Gi")).down("example-0", "example-1", "example-2").noQuorum().obs,
			phase: phaseUnavailable, reason: reasonQuorumLost, says: "quorum lost: no member answers"},
		{name: "a new cluster's Pod Pending on a claim being deleted: deleted, to make both again", in: fresh, obs: pendingOnGoingClaim,
			action: actDeletePod, member: "example-0", phase: phaseCreating},
		{name: "a new cluster's claim still being deleted: the Pod waits", in: fresh, obs: observed{Services: pendingOnGoingClaim.Services, Claims: pendingOnGoingClaim.Claims},
			phase: phaseCreating, says: "waits for its old volume claim"},
		{name: "a removed member's claim: deleted", in: onVolumes(2), obs: newWorld(2).do(withClaims("8Gi")).do(func(w *world) {
			w.obs.Claims = append(w.obs.Claims, claimView{Name: "example-2", Phase: "Bound", Size: "8Gi"})
		}).obs, action: actDeleteClaim, member: "example-2", phase: phaseScaling},
		{name: "a name whose old claim is going: the new member waits", in: onVolumes(3), obs: newWorld(2).do(withClaims("8Gi")).do(func(w *world) {
			w.obs.Claims = append(w.obs.Claims, claimView{Name: "example-2", Phase: "Bound", Size: "8Gi", Deleting: true})
		}).obs, phase: phaseScaling},
		{name: "a new member gets a volume claim", in: onVolumes(4), obs: newWorld(3).do(withClaims("8Gi")).do(func(w *world) {
			w.obs.Etcd.Members = append(w.obs.Etcd.Members, memberView{ID: "9", PeerHost: "example-3", Learner: true})
		}).obs, action: actStartMember, member: "example-3", phase: phaseScaling},
		{name: "a larger size: the volumes grow", in: grown, obs: newWorld(3).do(withClaims("8Gi")).obs, action: actExpandVolume, member: "example-0", phase: phaseExpanding},
		{name: "a smaller size: nothing shrinks", in: onVolumes(3), obs: newWorld(3).do(withClaims("20Gi")).obs, phase: phaseRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, s := decide(tc.in, tc.obs)
			if s.Action != tc.action || s.Member != tc.member || st.Phase != tc.phase {
				t.Errorf("step %q %q, phase %s (%s); want %q %q, phase %s", s.Action, s.Member, st.Phase, st.Message, tc.action, tc.member, tc.phase)
			}
			if a, _ := st.condition(condAvailable); tc.reason != "" && a.Reason != tc.reason {
				t.Errorf("Available reason %s (%s), want %s", a.Reason, a.Message, tc.reason)
			}
			if !strings.Contains(st.Message, tc.says) {
				t.Errorf("status message %q, want it to say %q", st.Message, tc.says)
			}
			if tc.image != "" && s.Image != tc.image {
				t.Errorf("step image %q, want %q", s.Image, tc.image)
			}
			if a, _ := st.condition(condAvailable); a.Reason == reasonDataLost {
				t.Errorf("status says the data is lost: %s", st.Message)
			}
			if tc.action == actStartMember && !slices.ContainsFunc(s.Create, func(o object) bool { return o.Resource == "persistentvolumeclaims" && o.Name == tc.member }) {
				t.Errorf("StartMember creates %v, want a PVC %s among them", s.Create, tc.member)
			}
		})
	}
}
