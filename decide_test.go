package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// world builds what a pass observes: member Pods and Services named
// example-N, an etcd member for each, the first the leader.
type world struct{ obs observed }

const repo = "gcr.io/etcd-development/etcd"

func newWorld(n int) *world {
	w := &world{}
	w.obs.Services = append(w.obs.Services, "example-client")
	w.obs.Etcd = etcdView{ClusterID: "42", Leader: "1", LeaderPod: "example-0", Members: []memberView{}}
	for i := range n {
		w.add(i, "3.6.16")
	}
	return w
}

// add is a started, healthy voter example-i running version.
func (w *world) add(i int, version string) *world {
	name := fmt.Sprintf("example-%d", i)
	w.obs.Pods = append(w.obs.Pods, podView{Name: name, Phase: "Running", Ready: true, Image: repo + ":v" + version, State: "new"})
	w.obs.Services = append(w.obs.Services, name)
	w.obs.Etcd.Members = append(w.obs.Etcd.Members, memberView{ID: fmt.Sprint(i + 1), Name: name, PeerHost: name, Answered: true, Version: version})
	w.obs.Etcd.Answered++
	w.obs.Etcd.AnsweredVoters++
	w.obs.Etcd.AnsweredPods = append(w.obs.Etcd.AnsweredPods, name)
	return w
}

func (w *world) pod(name string) *podView {
	for i := range w.obs.Pods {
		if w.obs.Pods[i].Name == name {
			return &w.obs.Pods[i]
		}
	}
	return nil
}

func (w *world) member(name string) *memberView {
	for i := range w.obs.Etcd.Members {
		if w.obs.Etcd.Members[i].member() == name {
			return &w.obs.Etcd.Members[i]
		}
	}
	return nil
}

// learner makes members learners, as etcd lists one that joined and is
// not promoted yet: it votes in nothing, and /readyz never calls it ready.
func (w *world) learner(names ...string) *world {
	for _, n := range names {
		w.member(n).Learner = true
		w.pod(n).Ready = false
		if w.member(n).Answered {
			w.obs.Etcd.AnsweredVoters--
		}
	}
	return w
}

// down: the member's etcd is not running (its Pod stays).
func (w *world) down(names ...string) *world {
	for _, n := range names {
		w.pod(n).Ready = false
		w.member(n).Answered, w.member(n).Version = false, ""
		w.obs.Etcd.Answered--
		if !w.member(n).Learner {
			w.obs.Etcd.AnsweredVoters--
		}
		w.obs.Etcd.AnsweredPods = slices.DeleteFunc(w.obs.Etcd.AnsweredPods, func(p string) bool { return p == n })
	}
	return w
}

// noPod: the member's Pod is gone.
func (w *world) noPod(names ...string) *world {
	for _, n := range names {
		if w.member(n).Answered {
			w.obs.Etcd.Answered--
			if !w.member(n).Learner {
				w.obs.Etcd.AnsweredVoters--
			}
		}
		w.member(n).Answered = false
		w.obs.Etcd.AnsweredPods = slices.DeleteFunc(w.obs.Etcd.AnsweredPods, func(p string) bool { return p == n })
		for i, p := range w.obs.Pods {
			if p.Name == n {
				w.obs.Pods = append(w.obs.Pods[:i], w.obs.Pods[i+1:]...)
				break
			}
		}
	}
	return w
}

// noQuorum: no member knows a leader, so nobody lists the members.
func (w *world) noQuorum() *world {
	// A member that answers still lists the members from its own store.
	if w.obs.Etcd.Answered > 0 {
		w.obs.Etcd.Listed = w.obs.Etcd.Members
	}
	w.obs.Etcd.Leader, w.obs.Etcd.LeaderPod, w.obs.Etcd.Members = "", "", nil
	return w
}

func (w *world) do(f func(w *world)) *world { f(w); return w }

// halfUpgraded: example-0 (the leader) and example-1 run v3.7.3, example-2
// still v3.6.16.
func halfUpgraded(w *world) {
	for _, n := range []string{"example-0", "example-1"} {
		w.pod(n).Image, w.member(n).Version = repo+":v3.7.3", "3.7.3"
	}
}

func in(size int, version string) input {
	return input{Name: "example", Namespace: "default", Base: "example", Repo: repo, Gen: 2, FormedID: "42",
		Spec: clusterSpec{Size: size, Version: version, Storage: storageSpec{EmptyDir: true}},
		Prev: clusterStatus{ClusterID: "42", CurrentVersion: "3.6.16", Members: []memberStatus{{Name: "example-0", Version: "3.6.16"}, {Name: "example-1", Version: "3.6.16"}, {Name: "example-2", Version: "3.6.16"}}}}
}

func TestDecide(t *testing.T) {
	fresh := in(3, "v3.6.16")
	fresh.Prev, fresh.FormedID = clusterStatus{}, ""
	for _, tc := range []struct {
		name   string
		in     input
		obs    observed
		action string // the step's action; "" for none
		member string // the member acted on
		image  string // the step's image, if set
		phase  string
		ready  string
		// conditions: Available, Progressing, Degraded as "TFT"; "" to skip
		conds string
		msg   string // a part of the status message
	}{
		{name: "new cluster", in: fresh, obs: observed{},
			action: actBootstrap, phase: phaseCreating, ready: "0/3", conds: "FTF", msg: "created 3 members: example-0, example-1, example-2; waiting for them to start"},
		{name: "bootstrap keeps the size it started with", in: func() input { i := fresh; i.Spec.Size = 5; return i }(),
			obs:    observed{Pods: []podView{{Name: "example-0", Phase: "Pending", State: "new", InitialCluster: "example-0=http://example-0:2380,example-1=http://example-1:2380,example-2=http://example-2:2380"}}},
			action: actBootstrap, phase: phaseCreating, msg: "created 3 members"},
		{name: "bootstrapped, members not answering yet", in: fresh,
			obs:   newWorld(3).do(func(w *world) { w.obs.Etcd = etcdView{} }).do(func(w *world) { w.pod("example-1").Ready = false }).obs,
			phase: phaseCreating, conds: "FTF", msg: "waiting for the members to start and elect a leader: example-0 ready, example-1 Running"},
		{name: "healthy", in: in(3, "v3.6.16"), obs: newWorld(3).obs,
			phase: phaseRunning, ready: "3/3", conds: "TFF", msg: "3 members ready, running etcd 3.6.16"},
		{name: "one member crashed: the kubelet restarts it", in: in(3, "v3.6.16"), obs: newWorld(3).down("example-2").obs,
			phase: phaseDegraded, ready: "2/3", conds: "TFT", msg: "2 of 3 members ready; not ready: example-2 does not answer (Pod Running)"},
		{name: "quorum lost", in: in(3, "v3.6.16"), obs: newWorld(3).down("example-1", "example-2").noQuorum().obs,
			phase: phaseUnavailable, ready: "0/3", conds: "FFT", msg: "quorum lost: 1 of 3 voting members answer, 2 needed"},
		{name: "a leader election under way is not quorum lost", in: in(3, "v3.6.16"), obs: newWorld(3).down("example-0").noQuorum().obs,
			phase: phaseDegraded, conds: "FFT", msg: "no leader yet: 2 of 3 voting members answer, and etcd is electing one"},
		{name: "quorum lost, two Pods gone", in: in(3, "v3.6.16"), obs: newWorld(3).noPod("example-1", "example-2").noQuorum().obs,
			phase: phaseUnavailable, conds: "FFT", msg: "quorum lost: 1 of 3 voting members answer, 2 needed (example-0 ready, example-1 has no Pod, example-2 has no Pod)"},
		{name: "all members gone", in: in(3, "v3.6.16"), obs: newWorld(3).noPod("example-0", "example-1", "example-2").noQuorum().obs,
			phase: phaseUnavailable, conds: "FFT", msg: "all 3 members are gone and their data with them"},
		{name: "Pod deleted: its member is replaced", in: in(3, "v3.6.16"), obs: newWorld(3).noPod("example-1").obs,
			action: actRemoveMember, member: "example-1", phase: phaseReplacing, conds: "TTT", msg: "replacing member example-1 (its Pod is gone)"},
		{name: "Pod Failed: its member is replaced", in: in(3, "v3.6.16"), obs: newWorld(3).do(func(w *world) { w.pod("example-2").Phase = "Failed" }).down("example-2").obs,
			action: actRemoveMember, member: "example-2", phase: phaseReplacing, msg: "its Pod is Failed"},
		{name: "replaced member's Pod is deleted first", in: in(3, "v3.6.16"),
			obs:    newWorld(3).do(func(w *world) { w.obs.Etcd.Members = w.obs.Etcd.Members[:2] }).obs,
			action: actDeletePod, member: "example-2"},
		{name: "then its Service", in: in(3, "v3.6.16"),
			obs:    newWorld(3).noPod("example-2").do(func(w *world) { w.obs.Etcd.Members = w.obs.Etcd.Members[:2] }).obs,
			action: actDeleteSvc, member: "example-2"},
		{name: "two lost: both are removed before anything is added", in: in(5, "v3.6.16"),
			obs:    newWorld(5).noPod("example-3", "example-4").do(func(w *world) { w.obs.Etcd.Members = w.obs.Etcd.Members[:4] }).do(func(w *world) { w.obs.Services = w.obs.Services[:5] }).obs,
			action: actRemoveMember, member: "example-3"},
		{name: "a member whose Pod is being deleted is removed at once", in: in(3, "v3.6.16"), obs: newWorld(3).do(func(w *world) { w.pod("example-1").Deleting = true }).obs,
			action: actRemoveMember, member: "example-1", phase: phaseReplacing, ready: "2/3", msg: "its Pod is being deleted"},
		{name: "scale up adds a learner", in: in(5, "v3.6.16"), obs: newWorld(3).obs,
			action: actAddMember, member: "example-3", phase: phaseScaling, conds: "TTT", msg: "adding member example-3 as a learner (4 of 5 members)"},
		{name: "scale up waits for an old Pod of the same name to be gone", in: in(3, "v3.6.16"),
			obs: newWorld(2).do(func(w *world) {
				w.obs.Pods = append(w.obs.Pods, podView{Name: "example-2", Phase: "Running", Deleting: true})
			}).obs,
			phase: phaseScaling, msg: "adding member example-2 waits for its old Pod to be gone"},
		{name: "scale up while a member is down still adds (a learner cannot cost quorum)", in: in(5, "v3.6.16"), obs: newWorld(3).down("example-2").obs,
			action: actAddMember, member: "example-3"},
		{name: "an added member with no Pod gets one", in: in(5, "v3.6.16"),
			obs: newWorld(3).do(func(w *world) {
				w.obs.Etcd.Members = append(w.obs.Etcd.Members, memberView{ID: "9", PeerHost: "example-3", Learner: true})
			}).obs,
			action: actStartMember, member: "example-3", msg: "starting member example-3"},
		{name: "an added member no longer wanted is removed", in: in(3, "v3.6.16"),
			obs: newWorld(3).do(func(w *world) {
				w.obs.Etcd.Members = append(w.obs.Etcd.Members, memberView{ID: "9", PeerHost: "example-3", Learner: true})
			}).obs,
			action: actRemoveMember, member: "example-3", msg: "never started"},
		{name: "a started learner is promoted", in: in(4, "v3.6.16"),
			obs:    newWorld(4).learner("example-3").obs,
			action: actPromote, member: "example-3", ready: "3/4", msg: "promoting learner example-3"},
		{name: "a learner that does not answer is waited for", in: in(4, "v3.6.16"),
			obs:   newWorld(4).learner("example-3").down("example-3").obs,
			phase: phaseScaling, msg: "waiting for learner example-3 to start"},
		{name: "scale down removes the highest ordinal", in: in(3, "v3.6.16"), obs: newWorld(5).obs,
			action: actRemoveMember, member: "example-4", phase: phaseScaling, msg: "removing member example-4 from etcd (4 of 3 members)"},
		{name: "scale down removes an unready member first", in: in(3, "v3.6.16"), obs: newWorld(5).down("example-1").obs,
			action: actRemoveMember, member: "example-1"},
		{name: "scale down hands the leadership away before removing the leader", in: in(1, "v3.6.16"),
			obs:    newWorld(2).do(func(w *world) { w.obs.Etcd.Leader, w.obs.Etcd.LeaderPod = "2", "example-1" }).obs,
			action: actMoveLeader, member: "example-0", msg: "handing leadership from example-1 to example-0 before removing it"},
		{name: "upgrade starts with a follower", in: in(3, "v3.7.3"), obs: newWorld(3).obs,
			action: actUpgrade, member: "example-1", phase: phaseUpgrading, msg: "upgrading member example-1 to v3.7.3 (0 of 3 done)"},
		{name: "upgrade waits for the member to report the new version", in: in(3, "v3.7.3"),
			obs:   newWorld(3).do(func(w *world) { w.pod("example-1").Image = repo + ":v3.7.3" }).obs,
			phase: phaseUpgrading, msg: "waiting for member example-1 to come back and report 3.7.3 (1 of 3 done)"},
		{name: "upgrade goes on once it does", in: in(3, "v3.7.3"),
			obs:    newWorld(3).do(func(w *world) { w.pod("example-1").Image = repo + ":v3.7.3"; w.member("example-1").Version = "3.7.3" }).obs,
			action: actUpgrade, member: "example-2"},
		{name: "upgrade does the leader last", in: in(3, "v3.7.3"),
			obs: newWorld(3).do(func(w *world) {
				for _, n := range []string{"example-1", "example-2"} {
					w.pod(n).Image = repo + ":v3.7.3"
					w.member(n).Version = "3.7.3"
				}
			}).obs,
			action: actMoveLeader, member: "example-1", msg: "handing leadership from example-0 to example-1 before restarting it with v3.7.3"},
		{name: "upgrade does the leader last, once it is no longer the leader", in: in(3, "v3.7.3"),
			obs: newWorld(3).do(func(w *world) {
				for _, n := range []string{"example-1", "example-2"} {
					w.pod(n).Image = repo + ":v3.7.3"
					w.member(n).Version = "3.7.3"
				}
				w.obs.Etcd.Leader, w.obs.Etcd.LeaderPod = "2", "example-1"
			}).obs,
			action: actUpgrade, member: "example-0", msg: "(2 of 3 done)"},
		{name: "upgrade done", in: in(3, "v3.7.3"),
			obs: newWorld(3).do(func(w *world) {
				for i := range w.obs.Pods {
					w.obs.Pods[i].Image = repo + ":v3.7.3"
					w.obs.Etcd.Members[i].Version = "3.7.3"
				}
			}).obs,
			phase: phaseRunning, conds: "TFF", msg: "running etcd 3.7.3"},
		{name: "upgrade takes a member that is down first", in: in(3, "v3.7.3"), obs: newWorld(3).down("example-2").obs,
			action: actUpgrade, member: "example-2"},
		{name: "upgrade never takes a second member away", in: func() input {
			i := in(3, "v3.7.3")
			i.Prev.Members[2].Version = "3.7.3"
			return i
		}(),
			obs:   newWorld(3).do(func(w *world) { w.pod("example-2").Image = repo + ":v3.7.3" }).down("example-2").obs,
			phase: phaseUpgrading, msg: "waiting for member example-2 to come back and report 3.7.3"},
		{name: "upgrade stops at a member the kubelet cannot start", in: in(3, "v3.7.9"),
			obs: newWorld(3).do(func(w *world) {
				p := w.pod("example-1")
				p.Image, p.Waiting, p.WaitingMessage = repo+":v3.7.9", "ImagePullBackOff", "Back-off pulling image"
			}).down("example-1").obs,
			phase: phaseDegraded, conds: "TFT", msg: "upgrade stopped at member example-1: the kubelet says ImagePullBackOff: Back-off pulling image"},
		{name: "setting the version back repairs that member first", in: in(3, "v3.6.16"),
			obs: newWorld(3).do(func(w *world) {
				p := w.pod("example-1")
				p.Image, p.Waiting = repo+":v3.7.9", "ImagePullBackOff"
			}).down("example-1").obs,
			action: actUpgrade, member: "example-1"},
		{name: "with no member ready, repair gives a crash-looping member the cluster's version, not a refused one", in: in(3, "v3.8.0"),
			obs:   newWorld(3).do(func(w *world) { w.pod("example-0").Waiting = "CrashLoopBackOff" }).down("example-0", "example-1", "example-2").noQuorum().obs,
			phase: phaseUnavailable, msg: "quorum lost"},
		{name: "a cluster of two is not upgraded: a restart would cost its quorum", in: in(2, "v3.7.3"), obs: newWorld(2).obs,
			phase: phaseRunning, conds: "TFF", msg: "a cluster of 2 voting members loses its quorum while one of them restarts"},
		{name: "a skipped minor version is refused", in: in(3, "v3.8.0"), obs: newWorld(3).obs,
			phase: phaseRunning, conds: "TFF", msg: "spec.version v3.8.0 refused: etcd upgrades one minor version at a time"},
		{name: "a downgrade is refused", in: in(3, "v3.5.21"), obs: newWorld(3).obs,
			phase: phaseRunning, msg: "downgrades are not supported"},
		{name: "a tag that is not a version is refused", in: in(3, "latest"), obs: newWorld(3).obs,
			phase: phaseRunning, msg: "spec.version latest refused: not a version"},
		{name: "a patch downgrade within the minor is allowed", in: in(3, "v3.6.15"), obs: newWorld(3).obs,
			action: actUpgrade, member: "example-1"},
		{name: "resize before upgrade", in: in(5, "v3.7.3"), obs: newWorld(3).obs,
			action: actAddMember, member: "example-3"},
		{name: "client Service missing", in: in(3, "v3.6.16"), obs: newWorld(3).do(func(w *world) { w.obs.Services = w.obs.Services[1:] }).obs,
			action: actCreateClient},
		// Safety rules, each with the case that breaks it.
		{name: "a leader still reported over a lost quorum changes nothing", in: in(3, "v3.7.3"), obs: newWorld(3).down("example-1", "example-2").obs,
			phase: phaseUnavailable, conds: "FFT", msg: "quorum lost"},
		{name: "half of an even cluster is no quorum", in: in(4, "v3.6.16"), obs: newWorld(4).down("example-2", "example-3").obs,
			phase: phaseUnavailable, conds: "FFT", msg: "quorum lost"},
		{name: "learners do not make up a quorum", in: in(5, "v3.6.16"),
			obs:   newWorld(5).learner("example-3", "example-4").down("example-1", "example-2").obs,
			conds: "FFT"}, // no step, not Available
		{name: "members listed but no leader known changes nothing", in: in(3, "v3.6.16"), obs: newWorld(3).do(func(w *world) { w.obs.Etcd.Leader = "" }).obs,
			conds: "FFT"},
		{name: "scale down takes an unready leader first, handing leadership away", in: in(2, "v3.6.16"),
			obs:    newWorld(3).do(func(w *world) { w.pod("example-0").Ready = false }).obs, // the leader answers, unready
			action: actMoveLeader, member: "example-1", phase: phaseScaling},
		{name: "a learner no longer wanted is removed, not promoted", in: in(3, "v3.6.16"),
			obs:    newWorld(4).learner("example-3").obs,
			action: actRemoveMember, member: "example-3", phase: phaseScaling, msg: "removing learner example-3 for spec.size 3"},
		{name: "a member added while the version is refused runs what the cluster runs", in: in(4, "v3.8.0"),
			obs: newWorld(3).do(func(w *world) {
				w.obs.Etcd.Members = append(w.obs.Etcd.Members, memberView{ID: "9", PeerHost: "example-3", Learner: true})
			}).obs,
			action: actStartMember, member: "example-3", image: repo + ":v3.6.16"},
		{name: "a new cluster runs spec.version", in: func() input { i := fresh; i.Spec.Version = "v3.7.3"; return i }(), obs: observed{},
			action: actBootstrap, image: repo + ":v3.7.3"},
		{name: "invalid spec", in: func() input { i := in(3, "v3.6.16"); i.Invalid = "spec.size is missing"; return i }(), obs: observed{},
			phase: phaseFailed, msg: "spec.size is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, s := decide(tc.in, tc.obs)
			if s.Action != tc.action || (tc.member != "" && s.Member != tc.member) {
				t.Errorf("step = %s %s, want %s %s (status: %s)", s.Action, s.Member, tc.action, tc.member, st.Message)
			}
			if tc.image != "" && s.Image != tc.image {
				t.Errorf("step image = %s, want %s", s.Image, tc.image)
			}
			if tc.phase != "" && st.Phase != tc.phase {
				t.Errorf("phase = %s, want %s (%s)", st.Phase, tc.phase, st.Message)
			}
			if tc.ready != "" && st.Ready != tc.ready {
				t.Errorf("ready = %s, want %s", st.Ready, tc.ready)
			}
			if !strings.Contains(st.Message, tc.msg) {
				t.Errorf("message = %q, want it to contain %q", st.Message, tc.msg)
			}
			if tc.conds != "" {
				var got string
				for _, typ := range []string{condAvailable, condProgressing, condDegraded} {
					c, _ := st.condition(typ)
					got += c.Status[:1]
				}
				if got != tc.conds {
					t.Errorf("conditions Available/Progressing/Degraded = %s, want %s: %+v", got, tc.conds, st.Conditions)
				}
			}
			if st.ObservedGeneration != tc.in.Gen {
				t.Errorf("observedGeneration = %d, want %d", st.ObservedGeneration, tc.in.Gen)
			}
		})
	}
}

// A new cluster is one Event, which names its members: a burst of new
// clusters costs the API server their objects, not an Event per member.
func TestBootstrapNews(t *testing.T) {
	fresh := in(3, "v3.6.16")
	fresh.Prev, fresh.FormedID = clusterStatus{}, ""
	_, s := decide(fresh, observed{})
	if len(s.News) != 1 || s.News[0].Reason != reasonClusterCreated || !strings.Contains(s.News[0].Message, "example-0, example-1, example-2") {
		t.Errorf("bootstrap news = %+v, want one %s naming the members", s.News, reasonClusterCreated)
	}
}

// Never stuck: the states that faults which overlap can reach, each of
// which decide once left for good (issue 22's cases), and the step that
// leads out of it.
func TestNeverStuck(t *testing.T) {
	fresh := in(3, "v3.6.16")
	fresh.Prev, fresh.FormedID = clusterStatus{}, ""
	ic := func(names ...string) string {
		var peers []peer
		for _, n := range names {
			peers = append(peers, peer{n, n})
		}
		return initialCluster(peers, false)
	}
	// joining adds example-i to etcd as an unstarted learner with a Pod
	// created from the member list ic.
	joining := func(i int, ic, phase, waiting string) func(w *world) {
		return func(w *world) {
			name := fmt.Sprintf("example-%d", i)
			w.obs.Etcd.Members = append(w.obs.Etcd.Members, memberView{ID: fmt.Sprint(100 + i), PeerHost: name, Learner: true})
			w.obs.Pods = append(w.obs.Pods, podView{Name: name, Phase: phase, Waiting: waiting, Image: repo + ":v3.6.16", State: "existing", InitialCluster: ic})
			w.obs.Services = append(w.obs.Services, name)
		}
	}
	for _, tc := range []struct {
		name   string
		in     input
		obs    observed
		action string
		member string
		msg    string
	}{
		{name: "1: a joining Pod whose --initial-cluster is out of date is made again",
			in: in(5, "v3.6.16"), obs: newWorld(3).do(joining(3, ic("example-0", "example-1", "example-2", "example-3", "example-4"), "Pending", "")).obs,
			action: actDeletePod, member: "example-3", msg: "--initial-cluster is out of date"},
		{name: "1: no other membership change while a learner has not started",
			in: in(5, "v3.6.16"), obs: newWorld(4).do(joining(4, ic("example-0", "example-1", "example-2", "example-3", "example-4"), "Pending", "")).noPod("example-3").obs,
			msg: "waiting for learner example-4 to start"},
		{name: "2: a started learner whose Pod is gone is removed",
			in: in(5, "v3.6.16"), obs: newWorld(4).learner("example-3").noPod("example-3").obs,
			action: actRemoveMember, member: "example-3", msg: "its Pod is gone"},
		{name: "2: a learner whose Pod Failed is removed",
			in: in(4, "v3.6.16"), obs: newWorld(4).learner("example-3").do(func(w *world) { w.pod("example-3").Phase = "Failed" }).down("example-3").obs,
			action: actRemoveMember, member: "example-3"},
		{name: "2: a learner in a crash loop is removed",
			in: in(4, "v3.6.16"), obs: newWorld(4).learner("example-3").do(func(w *world) { w.pod("example-3").Waiting = "CrashLoopBackOff" }).down("example-3").obs,
			action: actRemoveMember, member: "example-3", msg: "CrashLoopBackOff"},
		{name: "3: a learner left with an image that does not pull gets the right one once spec.version is set back",
			in: in(4, "v3.6.16"), obs: newWorld(3).do(joining(3, ic("example-0", "example-1", "example-2", "example-3"), "Pending", "ImagePullBackOff")).do(func(w *world) { w.pod("example-3").Image = repo + ":v3.7.99" }).obs,
			action: actUpgrade, member: "example-3", msg: "giving it " + repo + ":v3.6.16"},
		{name: "3: a learner with an image that does not pull is removed: new members run what the cluster runs",
			in: in(4, "v3.7.99"), obs: newWorld(3).do(joining(3, ic("example-0", "example-1", "example-2", "example-3"), "Pending", "ImagePullBackOff")).do(func(w *world) { w.pod("example-3").Image = repo + ":v3.7.99" }).obs,
			action: actRemoveMember, member: "example-3", msg: "new members run " + repo + ":v3.6.16"},
		{name: "3: a new member in a running cluster runs what the cluster runs; the rollout brings spec.version",
			in: in(4, "v3.7.3"), obs: newWorld(3).do(func(w *world) {
				w.obs.Etcd.Members = append(w.obs.Etcd.Members, memberView{ID: "9", PeerHost: "example-3", Learner: true})
			}).obs,
			action: actStartMember, member: "example-3", msg: "starting member example-3"},
		{name: "3: a new cluster's members that cannot run spec.version say so",
			in: func() input { i := fresh; i.Spec.Version = "v3.7.99"; return i }(), obs: newWorld(3).do(func(w *world) {
				w.obs.Etcd = etcdView{}
				for i := range w.obs.Pods {
					p := &w.obs.Pods[i]
					p.Phase, p.Ready, p.Waiting, p.Image, p.InitialCluster = "Pending", false, "ImagePullBackOff", repo+":v3.7.99", ic("example-0", "example-1", "example-2")
				}
			}).obs,
			msg: "member example-0 cannot start: " + repo + ":v3.7.99 cannot run"},
		{name: "4: a new cluster's Pods that never ran are made again with the fixed version",
			in: fresh, obs: newWorld(3).do(func(w *world) {
				w.obs.Etcd = etcdView{}
				for i := range w.obs.Pods {
					p := &w.obs.Pods[i]
					p.Phase, p.Ready, p.Waiting, p.Image, p.InitialCluster = "Pending", false, "ImagePullBackOff", repo+":v3.7.99", ic("example-0", "example-1", "example-2")
				}
			}).obs,
			action: actDeletePod, member: "example-0", msg: "never ran"},
		{name: "5: a member whose Pod is stuck terminating is removed from etcd",
			in: in(3, "v3.6.16"), obs: newWorld(3).do(func(w *world) { w.pod("example-1").Deleting, w.pod("example-1").Overdue = true, true }).down("example-1").obs,
			action: actRemoveMember, member: "example-1"},
		{name: "5: a new member does not wait for a name whose Pod is stuck terminating",
			in: in(3, "v3.6.16"), obs: newWorld(2).do(func(w *world) {
				w.obs.Pods = append(w.obs.Pods, podView{Name: "example-2", Phase: "Running", Deleting: true, Overdue: true})
			}).obs,
			action: actAddMember, member: "example-3"},
		{name: "6: an election with 3 voters and a learner is no quorum lost",
			in: func() input {
				i := in(4, "v3.6.16")
				i.Prev.Members = append(i.Prev.Members, memberStatus{Name: "example-3", Learner: true})
				return i
			}(), obs: newWorld(4).learner("example-3").down("example-0").noQuorum().obs,
			msg: "no leader yet"},
		{name: "7: a formed cluster whose status is lost and whose members do not answer is not bootstrapped",
			in: fresh, obs: newWorld(3).noPod("example-2").do(func(w *world) { w.obs.Etcd = etcdView{} }).obs,
			msg: "the cluster has formed"},
		{name: "7: the first cluster ID seen is recorded where a status write cannot lose it",
			in: func() input { i := in(3, "v3.6.16"); i.FormedID = ""; return i }(), obs: newWorld(3).obs,
			action: actMarkFormed, member: "2a", msg: "3 members ready"},
		{name: "7: with the status lost and every member silent, a recorded cluster is not bootstrapped",
			in: func() input { i := fresh; i.FormedID = "42"; return i }(), obs: newWorld(3).down("example-1", "example-2").noPod("example-0").noQuorum().obs,
			msg: "quorum lost"},
		{name: "8: an upgraded member in a crash loop stops a 5-member rollout",
			in: func() input {
				i := in(5, "v3.7.3")
				i.Prev.Members[0].Version = "3.7.3"
				return i
			}(), obs: newWorld(5).do(func(w *world) {
				w.obs.Etcd.Leader, w.obs.Etcd.LeaderPod = "5", "example-4"
				w.pod("example-0").Image, w.pod("example-0").Waiting = repo+":v3.7.3", "CrashLoopBackOff"
			}).down("example-0").obs,
			msg: "upgrade stopped at member example-0"},
		{name: "9: setting the version back mid-upgrade with the old member down is no downgrade",
			in: in(3, "v3.6.16"), obs: newWorld(3).do(halfUpgraded).down("example-2").obs,
			msg: "upgrading to v3.6.16: waiting for member example-2 to come back"},
		{name: "9: ... and rolls back once it is",
			in: in(3, "v3.6.16"), obs: newWorld(3).do(halfUpgraded).obs,
			action: actUpgrade, member: "example-1"},
		{name: "10: a removed member's Service goes while its Pod terminates",
			in: in(3, "v3.6.16"), obs: newWorld(3).do(func(w *world) {
				w.obs.Pods = append(w.obs.Pods, podView{Name: "example-3", Phase: "Running", Deleting: true})
				w.obs.Services = append(w.obs.Services, "example-3")
			}).obs,
			action: actDeleteSvc, member: "example-3"},
		{name: "11: a cluster being deleted is left alone",
			in: func() input { i := in(3, "v3.6.16"); i.Deleting = true; return i }(), obs: newWorld(3).do(func(w *world) { w.obs.Services = w.obs.Services[1:] }).noPod("example-1").obs,
			msg: "being deleted"},
		{name: "12: a member whose data is gone while its Pod lives is replaced",
			in: in(3, "v3.6.16"), obs: newWorld(3).do(func(w *world) { w.pod("example-2").Waiting = "CrashLoopBackOff" }).down("example-2").obs,
			action: actRemoveMember, member: "example-2", msg: "its data is lost"},
		{name: "12: ... on an image no other member runs too, when etcd's last words say so",
			in: in(3, "v3.7.3"), obs: newWorld(3).do(func(w *world) {
				p := w.pod("example-2")
				p.Image, p.Waiting, p.DataLost = repo+":v3.7.3", "CrashLoopBackOff", "Was the raft log corrupted, truncated, or lost?"
			}).down("example-2").obs,
			action: actRemoveMember, member: "example-2", msg: "its data is lost"},
		{name: "12: ... and a learner, when etcd's last words say so",
			in: in(4, "v3.7.3"), obs: newWorld(4).learner("example-3").do(func(w *world) {
				p := w.pod("example-3")
				p.Image, p.Waiting, p.DataLost = repo+":v3.7.3", "CrashLoopBackOff", "error validating peerURLs"
			}).down("example-3").obs,
			action: actRemoveMember, member: "example-3", msg: "error validating peerURLs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, s := decide(tc.in, tc.obs)
			if s.Action != tc.action || s.Member != tc.member {
				t.Errorf("step = %s %s, want %s %s (status: %s)", s.Action, s.Member, tc.action, tc.member, st.Message)
			}
			if !strings.Contains(st.Message, tc.msg) {
				t.Errorf("message = %q, want it to contain %q", st.Message, tc.msg)
			}
		})
	}
}

// A step that joins a member carries etcd's member list as
// --initial-cluster, the new member included.
func TestStartMemberInitialCluster(t *testing.T) {
	w := newWorld(3)
	w.obs.Etcd.Members = append(w.obs.Etcd.Members, memberView{ID: "9", PeerHost: "example-3", Learner: true})
	_, s := decide(in(4, "v3.6.16"), w.obs)
	want := "example-0=http://example-0:2380,example-1=http://example-1:2380,example-2=http://example-2:2380,example-3=http://example-3:2380"
	if s.Action != actStartMember || s.InitialCluster != want || s.Image != repo+":v3.6.16" {
		t.Errorf("step = %+v, want StartMember with --initial-cluster=%s", s, want)
	}
}

// A condition keeps its lastTransitionTime while its status stays.
func TestConditionTransitionTime(t *testing.T) {
	i := in(3, "v3.6.16")
	st, _ := decide(i, newWorld(3).obs)
	for _, c := range st.Conditions {
		if c.LastTransitionTime != "" {
			t.Fatalf("decide stamped a time itself: %+v", c)
		}
	}
	for j := range st.Conditions {
		st.Conditions[j].LastTransitionTime = "2026-01-01T00:00:00Z"
	}
	i.Prev = st
	again, _ := decide(i, newWorld(3).down("example-1").obs)
	for _, c := range again.Conditions {
		keep := c.Type == condAvailable || c.Type == condProgressing
		if keep != (c.LastTransitionTime != "") {
			t.Errorf("%s: lastTransitionTime %q; want it kept only while the status is unchanged", c.Type, c.LastTransitionTime)
		}
	}
}

// TestCurrentVersion: status.currentVersion is never higher than what a
// member that will come back last ran, as etcd's own cluster version.
func TestCurrentVersion(t *testing.T) {
	lost := in(3, "v3.7.99")
	lost.Prev = clusterStatus{} // the status was lost
	pullFails := func(w *world) {
		w.pod("example-2").Image, w.pod("example-2").Waiting = repo+":v3.7.99", "ImagePullBackOff"
	}
	for _, tc := range []struct {
		name string
		in   input
		obs  observed
		want string
	}{
		{"every member answers: the lowest", in(3, "v3.7.3"), newWorld(3).do(halfUpgraded).obs, "3.6.16"},
		{"a member down keeps its last reported version", in(3, "v3.7.3"), newWorld(3).do(halfUpgraded).down("example-2").obs, "3.6.16"},
		{"status lost, a silent member on an image that never pulled: etcd's cluster version",
			lost, newWorld(3).do(halfUpgraded).do(pullFails).down("example-2").do(func(w *world) { w.obs.Etcd.ClusterVersion = "3.6.0" }).obs, "3.6.0"},
		{"the cluster version lowers only the minor",
			lost, newWorld(3).do(halfUpgraded).do(func(w *world) { w.pod("example-2").Image = repo + ":v3.7.3" }).do(pullFails).down("example-2").do(func(w *world) { w.obs.Etcd.ClusterVersion = "3.7.0" }).obs, "3.7.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, _ := decide(tc.in, tc.obs); st.CurrentVersion != tc.want {
				t.Errorf("currentVersion %q, want %q", st.CurrentVersion, tc.want)
			}
		})
	}
	// Every member upgraded, before etcd raises its cluster version: the
	// data's version is still the old one (a member that crashes now can
	// go back to it), and the pass looks again until etcd has raised it.
	upgraded := newWorld(3).do(func(w *world) {
		for _, n := range membersOf(3) {
			w.pod(n).Image, w.member(n).Version = repo+":v3.7.3", "3.7.3"
		}
		w.obs.Etcd.ClusterVersion = "3.6.0"
	}).obs
	st, s := decide(in(3, "v3.7.3"), upgraded)
	if st.CurrentVersion != "3.6.0" || st.Phase != phaseRunning || s.Again != pollAgain {
		t.Errorf("all upgraded, cluster version 3.6: currentVersion %q, %s, look again in %v; want 3.6.0, Running, in %v", st.CurrentVersion, st.Phase, s.Again, pollAgain)
	}
	upgraded.Etcd.ClusterVersion = "3.7.0"
	if st, s := decide(in(3, "v3.7.3"), upgraded); st.CurrentVersion != "3.7.3" || s.Again != 0 {
		t.Errorf("cluster version raised: currentVersion %q, look again in %v; want 3.7.3, not again", st.CurrentVersion, s.Again)
	}
}
