// Never stuck, never unsafe: a deterministic simulation of the operator.
//
// In the spirit of FoundationDB's and TigerBeetle's simulators, the whole
// world of one EtcdCluster runs in one goroutine from one seed: etcd's
// membership, the kubelet, the operator's passes (the real decide, with
// act and the status write of main.go; simmodel_test.go), and a schedule
// that interleaves them with faults (Pods deleted, etcd killed, data
// wiped, a node cordoned or lost, evictions, the operator killed between
// any two requests, status writes lost, the whole status lost) and spec
// changes (sizes 1-7, a minor up and back, versions that must be refused
// or cannot run).
//
// After every step the safety rules are checked; after the schedule, a
// fault-free tail checks liveness: the cluster reaches its spec within
// livenessPasses passes, or its status says why it cannot. A failure is
// shrunk to the shortest schedule that still shows it, and reported with
// its seed; -sim.seed replays one seed with a trace.
//
//	go test -run TestSimulation                      # a few seconds
//	go test -run TestSimulation -sim.duration 1h     # hours
//	go test -run TestSimulation -sim.seeds 100000
//	go test -run TestSimulation -sim.seed 42 -v      # replay one, traced
package main

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	simSeeds    = flag.Int("sim.seeds", 0, "simulation: run this many seeds (0: as many as -sim.duration allows)")
	simDuration = flag.Duration("sim.duration", 0, "simulation: run seeds for this long (default 3s, 500ms with -short)")
	simSeed     = flag.Uint64("sim.seed", 0, "simulation: replay this one seed with a trace")
	simFirst    = flag.Uint64("sim.first", 1, "simulation: the first seed")
	simKind     = flag.String("sim.kind", "", "simulation: with -sim.seed, the kind of failure to shrink and trace")
)

// livenessPasses bounds the passes (each followed by a tick) that a
// fault-free tail may take to reach the spec. The longest legitimate road
// is a 1-member cluster grown to 7 and upgraded: 6 adds of about 3 passes,
// then 7 rolling restarts of about 3 passes, with leader hand-overs.
const livenessPasses = 80

// simFailure is a violated rule. Kind names the rule (and, for liveness,
// what was stuck), so that shrinking keeps the same failure.
type simFailure struct {
	Kind, Detail string
	At           int // the schedule entry after which it showed; len(events) for the tail
}

// ---- the schedule ----

const (
	evPass       = "pass"        // A >= 0: the operator dies before its (A+1)-th request; B=1: status writes lost
	evTick       = "tick"        // time moves on
	evDelete     = "delete"      // delete B Pods from the A-th (by name, among those not being deleted)
	evKill       = "kill"        // kill B etcd processes from the A-th running one; the kubelet restarts them
	evWipe       = "wipe"        // lose the A-th data-holding Pod's data while the Pod lives
	evCordon     = "cordon"      // new Pods stay Pending
	evUncordon   = "uncordon"    //
	evStrand     = "strand"      // the A-th Pod's node is lost: deleted, Terminating forever
	evEvict      = "evict"       // the A-th running Pod is evicted: Failed, its data gone (kept on a PVC)
	evClaim      = "claim"       // delete the A-th claim (among those not being deleted); B=1: its watch event comes late
	evStatusLoss = "status-loss" // the status is lost: in.Prev is empty
	evSize       = "size"        // spec.size = A
	evVersion    = "version"     // spec.version = V
)

type simEvent struct {
	Kind string
	A, B int
	V    string
}

func (e simEvent) String() string {
	switch e.Kind {
	case evPass:
		s := "pass"
		if e.A >= 0 {
			s += fmt.Sprintf(" (operator dies before request %d)", e.A+1)
		}
		if e.B == 1 {
			s += " (status writes lost)"
		}
		return s
	case evDelete, evKill:
		return fmt.Sprintf("%s %d from #%d", e.Kind, e.B, e.A)
	case evWipe, evStrand, evEvict:
		return fmt.Sprintf("%s #%d", e.Kind, e.A)
	case evClaim:
		return fmt.Sprintf("delete claim #%d%s", e.A, map[bool]string{true: " (seen late)"}[e.B == 1])
	case evSize:
		return fmt.Sprintf("spec.size %d", e.A)
	case evVersion:
		return "spec.version " + e.V
	}
	return e.Kind
}

type simSchedule struct {
	Size    int
	Version string
	Volumes bool // members on PVCs, not emptyDir
	Events  []simEvent
	// Fix: the tail starts with spec.version set to one that runs, if it
	// names one that cannot, as a user does who reads the status.
	Fix bool
}

func (sc simSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "create: spec.size %d, spec.version %s, %s\n", sc.Size, sc.Version, map[bool]string{true: "members on PVCs", false: "members on emptyDir"}[sc.Volumes])
	for i, e := range sc.Events {
		fmt.Fprintf(&b, "  %3d %s\n", i, e)
	}
	if sc.Fix {
		b.WriteString("  then: spec.version set to one that runs, if it names one that cannot\n")
	}
	b.WriteString("  then: uncordon, and passes and ticks without faults\n")
	return b.String()
}

// genSchedule draws a schedule from seed.
func genSchedule(seed uint64) simSchedule {
	r := rand.New(rand.NewPCG(seed, 0x5eed5eed))
	sc := simSchedule{Size: []int{1, 2, 3, 3, 3, 4, 5, 5, 6, 7}[r.IntN(10)], Version: simV36}
	if r.IntN(20) == 0 {
		sc.Version = simNoImage
	}
	sc.Events = []simEvent{{Kind: evPass, A: -1}, {Kind: evTick}, {Kind: evPass, A: -1}}
	// Each schedule has its own rate of faults: every fault drawn below,
	// one in three, or one in ten (the others become ticks). At the full
	// rate most schedules end with a quorum's data gone, where the status
	// must say so; at the lower rates most must end at the spec.
	calm := []int{1, 3, 10}[r.IntN(3)]
	sc.Fix = r.IntN(2) == 0
	sc.Volumes = r.IntN(2) == 0
	n := 20 + r.IntN(100)
	for len(sc.Events) < n {
		var e simEvent
		switch w := r.IntN(100); {
		case w < 33:
			e = simEvent{Kind: evPass, A: -1}
			if r.IntN(8) == 0 {
				e.A = r.IntN(6)
			}
			if r.IntN(20) == 0 {
				e.B = 1
			}
		case w < 66:
			e = simEvent{Kind: evTick}
		case w < 71:
			e = simEvent{Kind: evDelete, A: r.IntN(7), B: 1 + r.IntN(2)}
		case w < 76:
			e = simEvent{Kind: evKill, A: r.IntN(7), B: 1 + r.IntN(2)}
		case w < 78:
			e = simEvent{Kind: evWipe, A: r.IntN(7)}
		case w < 80:
			e = simEvent{Kind: evCordon}
		case w < 83:
			e = simEvent{Kind: evUncordon}
		case w < 84:
			e = simEvent{Kind: evStrand, A: r.IntN(7)}
		case w < 86:
			e = simEvent{Kind: evEvict, A: r.IntN(7)}
		case w < 87:
			e = simEvent{Kind: evStatusLoss}
		case w < 88 && sc.Volumes:
			e = simEvent{Kind: evClaim, A: r.IntN(7), B: r.IntN(2)}
		case w < 94:
			e = simEvent{Kind: evSize, A: 1 + r.IntN(7)}
		default:
			e = simEvent{Kind: evVersion, V: []string{simV36, simV36, simV37, simV37, simV37, simRefused, simNoImage, simBrokenV}[r.IntN(8)]}
		}
		if faulty(e.Kind) && r.IntN(calm) != 0 {
			e = simEvent{Kind: evTick}
		}
		sc.Events = append(sc.Events, e)
	}
	return sc
}

// faulty: an event that takes something away (a Pod, a process, data, a
// node, the status).
func faulty(kind string) bool {
	switch kind {
	case evDelete, evKill, evWipe, evCordon, evStrand, evEvict, evStatusLoss, evClaim:
		return true
	}
	return false
}

// pick chooses up to n Pods from the idx-th of those ok accepts, by name.
func (m *model) pick(idx, n int, ok func(p *simPod) bool) []*simPod {
	var all []*simPod
	for _, name := range m.podNames() {
		if p := m.pods[name]; ok(p) {
			all = append(all, p)
		}
	}
	var out []*simPod
	for i := range min(n, len(all)) {
		out = append(out, all[(idx+i)%len(all)])
	}
	return out
}

// apply runs one schedule entry.
func (m *model) apply(e simEvent) {
	alive := func(p *simPod) bool { return !p.Deleting && p.Phase != "Failed" }
	switch e.Kind {
	case evPass:
		m.pass(e.A, e.B == 1)
	case evTick:
		m.tick()
	case evDelete:
		for _, p := range m.pick(e.A, e.B, func(p *simPod) bool { return !p.Deleting }) {
			m.deletePod(p)
		}
	case evKill:
		for _, p := range m.pick(e.A, e.B, func(p *simPod) bool { return p.Up }) {
			m.kill(p)
		}
	case evWipe:
		for _, p := range m.pick(e.A, 1, func(p *simPod) bool { return alive(p) && (p.Data != 0 || p.staleData) }) {
			m.wipe(p)
		}
	case evCordon:
		m.cordoned = true
	case evUncordon:
		m.cordoned = false
	case evStrand:
		for _, p := range m.pick(e.A, 1, alive) {
			m.strand(p)
		}
	case evEvict:
		for _, p := range m.pick(e.A, 1, func(p *simPod) bool { return alive(p) && p.Phase == "Running" }) {
			m.evict(p)
		}
	case evClaim:
		var names []string
		for _, n := range m.claimNames() {
			if !m.claims[n].Deleting {
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			m.deleteClaim(names[e.A%len(names)], e.B == 1)
		}
	case evStatusLoss:
		m.status, m.statusLost = clusterStatus{}, true
	case evSize:
		m.spec.Size = e.A
		m.gen++
	case evVersion:
		m.spec.Version = e.V
		m.gen++
		if m.runnable(e.V) {
			m.accepted[e.V] = true
		}
	}
}

// ---- the safety rules ----

// simTruth is the model's own view at the moment of an observation.
type simTruth struct {
	leader                  bool
	voters, healthy, others int // voters, healthy voters, and members that are not voters
	available               bool
	allHealthy              bool // a leader, and every member healthy
	allWell                 bool // allHealthy, all voters, spec.size of them
	answers                 map[string]bool
}

// healthy: a voter that runs, is Ready (etcd's /readyz, as the kubelet
// last probed it) and has a leader; a learner that runs.
func (m *model) healthy(mb *simMember) bool {
	if !m.running(mb) {
		return false
	}
	return mb.Learner || m.pods[mb.Host].Ready && m.leaderID() != 0
}

func (m *model) truth() simTruth {
	t := simTruth{leader: m.leaderID() != 0, answers: map[string]bool{}}
	if m.etcd == nil {
		return t
	}
	t.allHealthy = t.leader
	for _, mb := range m.etcd.Members {
		if mb.Learner {
			t.others++
		} else {
			t.voters++
			if m.healthy(mb) {
				t.healthy++
			}
		}
		t.allHealthy = t.allHealthy && m.healthy(mb)
		t.answers[mb.Host] = m.running(mb)
	}
	t.available = t.leader && t.healthy >= quorum(t.voters)
	t.allWell = t.allHealthy && t.others == 0 && t.voters == m.spec.Size
	return t
}

func condOf(st clusterStatus, typ string) condition {
	c, _ := st.condition(typ)
	return c
}

// checkStatus: the status tells the truth, as the model knows it at the
// observation the status was decided from.
func (m *model) checkStatus(st clusterStatus, t simTruth) {
	ready := 0
	for _, ms := range st.Members {
		if !ms.Ready {
			continue
		}
		ready++
		switch {
		case !t.leader:
			m.failf("status-ready-lie", "member %s called ready while etcd has no leader", ms.Name)
		case !t.answers[ms.Name]:
			m.failf("status-ready-lie", "member %s called ready but its etcd does not answer", ms.Name)
		case m.etcd.byHost(ms.Name).Learner:
			m.failf("status-ready-lie", "learner %s called ready", ms.Name)
		}
	}
	var r, n int
	if _, err := fmt.Sscanf(st.Ready, "%d/%d", &r, &n); err != nil || r != st.ReadyMembers || ready != st.ReadyMembers || r > n {
		m.failf("status-count", "READY %q, readyMembers %d, %d members called ready", st.Ready, st.ReadyMembers, ready)
	}
	if avail := condOf(st, condAvailable).Status == "True"; avail != t.available {
		m.failf("status-available", "Available %v (%s), but etcd has leader=%v and %d of %d voters healthy",
			avail, condOf(st, condAvailable).Reason, t.leader, t.healthy, t.voters)
	}
	switch deg := condOf(st, condDegraded); {
	case deg.Status == "False" && st.Phase == phaseCreating && (!m.formed || m.statusLost):
		// A cluster being created is not degraded (and without its
		// status, the operator cannot tell one that formed).
	case deg.Status == "False" && !(t.allHealthy && t.healthy >= m.spec.Size):
		m.failf("status-degraded-false", "Degraded False (%s, phase %s), but %d of %d voters healthy for spec.size %d, all healthy=%v",
			deg.Reason, st.Phase, t.healthy, t.voters, m.spec.Size, t.allHealthy)
	case deg.Status == "True" && t.allWell && len(m.pods) == m.spec.Size:
		m.failf("status-degraded-true", "Degraded True (%s: %s) while every one of the %d members is a healthy voter", deg.Reason, deg.Message, t.voters)
	}
	if st.Phase == phaseRunning && !t.allWell {
		m.failf("status-running", "phase Running, but %d of %d voters healthy, %d learners or unstarted, spec.size %d",
			t.healthy, t.voters, t.others, m.spec.Size)
	}
	// A message that counts members counts those etcd has: voters, and
	// the quorum of them.
	var answer, size, need int
	if m.etcd != nil {
		if _, err := fmt.Sscanf(st.Message, "quorum lost: %d of %d voting members answer, %d needed", &answer, &size, &need); err == nil && (size != t.voters || need != quorum(t.voters)) {
			m.failf("status-quorum-message", "%q, but etcd has %d voters (quorum %d)", excerptOf(st.Message), t.voters, quorum(t.voters))
		}
		if _, err := fmt.Sscanf(st.Message, "no leader yet: %d of %d voting members answer", &answer, &size); err == nil && (size != t.voters || answer > size) {
			m.failf("status-quorum-message", "%q, but etcd has %d voters", excerptOf(st.Message), t.voters)
		}
	}
	// The cluster's version is no higher than that of a member that will
	// come back: with its data, on its Pod's image if that can run, else on
	// the version it ran last. Minors only: etcd's cluster version is
	// major.minor.
	if cur := st.CurrentVersion; cur != "" && m.etcd != nil {
		for _, mb := range m.etcd.Members {
			p := m.pods[mb.Host]
			if p == nil || p.Data != mb.ID || p.Deleting || p.Phase == "Failed" {
				continue
			}
			v := m.ran[mb.ID]
			if img := tagOf(p.Image); !unpullable(p.Image) && m.acceptable(img) {
				v = strings.TrimPrefix(img, "v")
			}
			if minorOf(v) < minorOf(cur) {
				m.failf("status-version", "currentVersion %s, but member %s runs %s (%s)", cur, mb.Host, v, m.memberState(mb))
			}
		}
	}
}

func excerptOf(s string) string { return s[:min(len(s), 70)] }

// checkStep: the step about to be taken is safe.
func (m *model) checkStep(s step) {
	c := m.etcd
	if c == nil {
		return
	}
	t := m.truth()
	switch s.Action {
	case actRemoveMember:
		mb := c.byID(parseID(s.ID))
		if mb == nil || mb.Learner {
			return
		}
		h := t.healthy
		if m.healthy(mb) {
			h--
		}
		if t.healthy >= quorum(t.voters) && h < quorum(t.voters-1) {
			m.failf("quorum", "removing voter %s leaves %d healthy of %d voters", mb.Host, h, t.voters-1)
		}
	case actUpgrade:
		mb := c.byHost(s.Member)
		p := m.pods[s.Member]
		if mb == nil || mb.Learner || !m.healthy(mb) || p == nil || p.Image == s.Image {
			return
		}
		if t.healthy >= quorum(t.voters) && t.healthy-1 < quorum(t.voters) {
			m.failf("quorum", "restarting voter %s for %s leaves %d healthy of %d voters", mb.Host, tagOf(s.Image), t.healthy-1, t.voters)
		}
		// A rolling upgrade stops while a voter is down: restarting
		// another one costs the cluster a second member. (One that runs but
		// has not been probed Ready yet, a learner just promoted, is not
		// down.)
		for _, o := range c.Members {
			if o != mb && !o.Learner && !m.running(o) {
				m.failf("upgrade-while-unhealthy", "restarting healthy voter %s for %s while voter %s is down (%s)", mb.Host, tagOf(s.Image), o.Host, m.memberState(o))
			}
		}
	case actAddMember:
		if c.byHost(s.Member) != nil {
			return
		}
		for _, o := range c.Members {
			if o.Learner {
				m.failf("two-changes", "adding %s while %s is a learner", s.Member, o.Host)
			}
		}
	case actDeletePod:
		if mb := c.byHost(s.Member); mb != nil && m.pods[s.Member] != nil && m.pods[s.Member].Data == mb.ID && m.healthy(mb) {
			m.failf("deleted-healthy", "deleting the Pod of healthy member %s", s.Member)
		}
	case actDeleteClaim:
		// A member's data must go only with the member: its claim is
		// deleted once etcd no longer lists it.
		if mb := c.byHost(s.Member); mb != nil {
			m.failf("deleted-member-claim", "deleting claim %s of member %s, which etcd lists (%s)", s.Member, mb.Host, m.memberState(mb))
		}
	}
}

func parseID(s string) uint64 {
	var id uint64
	fmt.Sscan(s, &id)
	return id
}

// memberState describes a member's Pod, for reports and failure kinds.
func (m *model) memberState(mb *simMember) string {
	p := m.pods[mb.Host]
	switch {
	case p == nil:
		return "no-pod"
	case p.Data != mb.ID && p.Up:
		return "other-member"
	}
	return strings.TrimPrefix(m.podState(p), p.Name+":"+tagOf(p.Image)+":")
}

// ---- liveness ----

type simProblem struct{ class, detail, member string }

// goal lists what keeps the cluster from its spec; none when it is there:
// spec.size healthy voters, all on spec.version (or, when that is refused,
// one version that could run when it was set), no other Pods (but those
// stuck Terminating) or Services, and a status that says Running, N/N,
// Available.
func (m *model) goal() []simProblem {
	var out []simProblem
	add := func(class, format string, args ...any) {
		out = append(out, simProblem{class: class, detail: fmt.Sprintf(format, args...)})
	}
	addMember := func(mb *simMember, class, format string, args ...any) {
		add(class, format, args...)
		out[len(out)-1].member = mb.Host
	}
	c := m.etcd
	if c == nil {
		return []simProblem{{class: "no-cluster", detail: "no etcd cluster, spec.version " + m.spec.Version}}
	}
	if m.leaderID() == 0 {
		add("no-leader", "etcd has no leader")
	}
	for _, mb := range c.Members {
		switch {
		case !mb.started():
			addMember(mb, "unstarted:"+m.memberState(mb), "member %s never started: %s", mb.Host, m.memberState(mb))
		case mb.Learner:
			addMember(mb, "learner:"+m.memberState(mb), "learner %s: %s", mb.Host, m.memberState(mb))
		case !m.healthy(mb):
			addMember(mb, "unhealthy:"+m.memberState(mb), "voter %s: %s", mb.Host, m.memberState(mb))
		}
	}
	if len(c.Members) != m.spec.Size {
		add("size", "%d members for spec.size %d", len(c.Members), m.spec.Size)
	}
	var tags []string // the members' image tags, sorted, once each
	for _, mb := range c.Members {
		if p := m.pods[mb.Host]; p != nil && !slices.Contains(tags, tagOf(p.Image)) {
			tags = append(tags, tagOf(p.Image))
		}
	}
	slices.Sort(tags)
	switch v := m.spec.Version; {
	case m.runnable(v):
		for _, t := range tags {
			if t != v {
				add("version", "a member runs %s, spec.version is %s", t, v)
				break
			}
		}
	case !m.acceptable(v):
		if len(tags) > 1 {
			add("version-mixed", "spec.version %s is refused and the members run %d versions", v, len(tags))
		}
		for _, t := range tags {
			if !m.accepted[t] {
				add("version-unaccepted", "spec.version %s is refused, and a member runs %s, never an accepted spec.version", v, t)
				break
			}
		}
	default:
		add("spec-cannot-run", "spec.version %s cannot run", v)
	}
	members := map[string]bool{simBase + "-client": true}
	for _, mb := range c.Members {
		members[mb.Host] = true
		if !m.svcs[mb.Host] {
			add("missing-service", "member %s has no Service", mb.Host)
		}
	}
	for _, n := range m.podNames() {
		if !members[n] && !m.pods[n].Stuck {
			add("leftover-pod", "Pod %s is no member's (%s)", n, m.podState(m.pods[n]))
		}
	}
	// A Pod stuck Terminating is no leftover (only a force delete ends
	// it), but the Service of a member removed is.
	for _, n := range m.svcNames() {
		if !members[n] {
			add("leftover-service", "Service %s is no member's", n)
		}
	}
	if !m.svcs[simBase+"-client"] {
		add("missing-service", "no client Service")
	}
	if m.volumes {
		for _, mb := range c.Members {
			if cl := m.claims[mb.Host]; cl == nil || cl.Deleting || cl.Data != mb.ID {
				addMember(mb, "member-claim", "member %s has no claim with its data", mb.Host)
			}
		}
		// A claim held by a Pod stuck Terminating goes only with it.
		for _, n := range m.claimNames() {
			if p := m.pods[n]; !members[n] && !(p != nil && p.Stuck) {
				add("leftover-claim", "claim %s is no member's", n)
			}
		}
	}
	st := m.status
	if st.Phase != phaseRunning || st.Ready != fmt.Sprintf("%d/%d", m.spec.Size, m.spec.Size) || condOf(st, condAvailable).Status != "True" {
		add("status", "status %s %s Available=%s: %s", st.Phase, st.Ready, condOf(st, condAvailable).Status, st.Message)
	}
	return out
}

// excused reports whether the status rightly says why the spec cannot be
// reached: the quorum or the data is gone for good, or spec.version
// cannot run here.
func (m *model) excused(problems []simProblem) bool {
	prog := condOf(m.status, condProgressing).Reason
	// onlyVersion: every problem is the version, the status, or a member
	// down on a version that cannot run (with no leader only because of
	// such members).
	onlyVersion := true
	for _, p := range problems {
		switch {
		case slices.Contains([]string{"version", "version-mixed", "version-unaccepted", "spec-cannot-run", "status"}, p.class):
		case p.class == "no-leader" && m.etcd != nil && m.runningVoters()+m.downOnBadVersion() >= quorum(m.etcd.voters()):
		case m.versionDown(p):
		default:
			onlyVersion = false
		}
	}
	switch prog {
	case "QuorumLost":
		return !m.quorumCanReturn()
	case "DataLost":
		// Gone for good: every voter's data, or so much of it that a
		// quorum can never come back.
		return m.formed && (m.etcd == nil || !m.quorumCanReturn())
	case "VersionRefused":
		return !m.runnable(m.spec.Version) && onlyVersion
	case "UpgradeStalled":
		// A member that crashes on the new version looks the same to the
		// operator whether the release or the member's data is bad: it
		// stops the rollout and asks for the version to be set back,
		// which repairs either (a member with bad data is then replaced).
		return !m.runnable(m.spec.Version) && onlyVersion || m.upgradedCrashLoops()
	case "PodStuck":
		// A Pod stuck terminating blocks a new cluster until someone
		// deletes it by force; the status says so.
		return slices.ContainsFunc(slices.Collect(maps.Values(m.pods)), func(p *simPod) bool { return p.Stuck })
	case "VersionCannotRun":
		// New members cannot run spec.version: nothing can be repaired
		// until it changes, and the status says so.
		return !m.runnable(m.spec.Version)
	case "UpgradeNeedsMembers":
		return m.spec.Size < 3 && onlyVersion
	case "WaitingForQuorum":
		// A member to replace whose removal would cost quorum, while the
		// voters down are so on a version that cannot run: setting
		// spec.version back repairs them first, and the status names them.
		if c := m.etcd; c != nil && !m.runnable(m.spec.Version) && m.downOnBadVersion() > 0 {
			down := 0
			for _, mb := range c.Members {
				if !mb.Learner && !m.healthy(mb) && m.pods[mb.Host] != nil && !m.runnable(tagOf(m.pods[mb.Host].Image)) {
					down++
					if !strings.Contains(m.status.Message, mb.Host) {
						return false
					}
				}
			}
			if down > 0 {
				return true
			}
		}
		// The only voter's claim is being deleted: it cannot be removed,
		// and the status asks for more members first.
		if c := m.etcd; c != nil && c.voters() == 1 && len(c.Members) >= m.spec.Size {
			for _, mb := range c.Members {
				if cl := m.claims[mb.Host]; !mb.Learner && cl != nil && cl.Deleting {
					return strings.Contains(m.status.Message, "raise spec.size")
				}
			}
		}
	}
	return false
}

// upgradedCrashLoops: every member down is in a crash loop on the image
// spec.version names, while others run an older one.
func (m *model) upgradedCrashLoops() bool {
	target, n := repo+":"+m.spec.Version, 0
	for _, p := range m.pods {
		switch {
		case p.Up || p.Deleting:
		case p.Image == target && p.Waiting == "CrashLoopBackOff":
			n++
		default:
			return false
		}
	}
	return n > 0
}

// versionDown: a member down (a voter, a learner, one never started)
// whose Pod has an image that cannot run: what an upgrade that stalled
// leaves.
func (m *model) versionDown(p simProblem) bool {
	if p.member == "" || m.etcd == nil {
		return false
	}
	for _, mb := range m.etcd.Members {
		if pod := m.pods[mb.Host]; pod != nil && p.member == mb.Host {
			return !m.runnable(tagOf(pod.Image))
		}
	}
	return false
}

// downOnBadVersion counts the voters down on an image that cannot run.
func (m *model) downOnBadVersion() int {
	n := 0
	for _, mb := range m.etcd.Members {
		if p := m.pods[mb.Host]; p != nil && !mb.Learner && !m.running(mb) && !m.runnable(tagOf(p.Image)) {
			n++
		}
	}
	return n
}

// specWhy says why spec.version cannot run: "" when it can.
func (m *model) specWhy() string {
	img := repo + ":" + m.spec.Version
	switch {
	case unpullable(img):
		return "unpullable"
	case brokenImage(img):
		return "broken"
	case !m.acceptable(m.spec.Version):
		return "refused"
	}
	return ""
}

// quorumCanReturn: a quorum of voters still has its data in a Pod that
// can run it: its image runs, or spec.version does (and the operator can
// set it).
func (m *model) quorumCanReturn() bool {
	if m.etcd == nil {
		return false
	}
	n := 0
	for _, mb := range m.etcd.Members {
		p := m.pods[mb.Host]
		if !mb.Learner && p != nil && p.Data == mb.ID && !p.Deleting && p.Phase != "Failed" &&
			(m.runnable(tagOf(p.Image)) || m.runnable(m.spec.Version)) {
			n++
			continue
		}
		// On a volume, a member's Pod is made again (or its image set
		// back) as long as its claim holds its data.
		if c := m.claims[mb.Host]; !mb.Learner && c != nil && c.Data == mb.ID && !c.Deleting && !c.Lost &&
			(p == nil || !p.Stuck) && (p == nil || m.runnable(tagOf(p.Image)) || m.runnable(m.spec.Version)) {
			n++
		}
	}
	return n >= quorum(m.etcd.voters())
}

// ---- running and shrinking ----

// simRun runs a schedule and its fault-free tail. It returns the
// failures, the first of each kind, and how many tail passes reaching the
// spec took (-1: not reached, and the status says why, with reason why).
func simRun(seed uint64, sc simSchedule, trace func(string, ...any)) (fails []*simFailure, passes int, why string) {
	m := newModel(seed, clusterSpec{Size: sc.Size, Version: sc.Version}, sc.Volumes)
	m.trace = trace
	for i, e := range sc.Events {
		m.at = i
		m.tracef("== %d %s", i, e)
		m.apply(e)
		if e.Kind != evPass {
			m.tracef("   %s", m.summary())
		}
	}
	m.at = len(sc.Events)
	m.tracef("== tail: uncordon, no faults (lines that repeat the one before are left out)")
	m.cordoned, m.quiet = false, true
	if sc.Fix && m.specWhy() != "" {
		for _, v := range []string{simV37, simV36} {
			if m.runnable(v) {
				m.tracef("== tail: spec.version %s", v)
				m.apply(simEvent{Kind: evVersion, V: v})
				break
			}
		}
	}
	var problems []simProblem
	for p := 1; p <= livenessPasses; p++ {
		m.pass(-1, false)
		if problems = m.goal(); len(problems) == 0 {
			m.tracef("spec reached after %d passes: %s", p, m.summary())
			return m.fails, p, ""
		}
		m.tick()
		m.traceOnce("summary", "   "+m.summary())
	}
	if m.excused(problems) {
		m.tracef("spec not reached, and the status says why: %s", m.status.Message)
		return m.fails, -1, condOf(m.status, condProgressing).Reason
	}
	var details []string
	for _, p := range problems {
		details = append(details, p.detail)
	}
	prog := condOf(m.status, condProgressing)
	// The kind says what is stuck, and whether spec.version can run: a
	// learner stuck on a bad image while spec.version still names it is
	// not the same failure as one left so after spec.version was set back.
	kind := "stuck/" + prog.Reason + "/" + rootOf(problems)
	if m.specWhy() != "" {
		kind += "(bad spec.version)"
	}
	m.failf(kind, "after %d fault-free passes: %s; status %s %s Progressing=%s: %s\n    model: %s",
		livenessPasses, strings.Join(details, "; "), m.status.Phase, m.status.Ready, prog.Reason, m.status.Message, m.summary())
	return m.fails, 0, ""
}

// rootOf names what keeps the cluster from its spec, for the kind of a
// liveness failure: the worst state of a member's Pod, else the first
// problem other than the version or the status, else the first.
func rootOf(problems []simProblem) string {
	rank := func(state string) int {
		for i, prefix := range []string{"stuck-terminating", "no-pod", "failed", "crashloop", "ImagePullBackOff", "pending", "terminating", "other-member", "up"} {
			if strings.HasPrefix(state, prefix) {
				return 100 - i
			}
		}
		return 0
	}
	root, best := problems[0].class, -1
	for _, p := range problems {
		if !slices.Contains([]string{"spec-cannot-run", "version", "status"}, p.class) {
			root = p.class // a leftover rather than the version
			break
		}
	}
	for _, p := range problems {
		if p.member == "" {
			continue
		}
		_, state, _ := strings.Cut(p.class, ":")
		if r := rank(state); r > best {
			root, best = state, r
		}
	}
	return root
}

// failedWith returns the failure of a kind, if any.
func failedWith(fails []*simFailure, kind string) *simFailure {
	for _, f := range fails {
		if f.Kind == kind {
			return f
		}
	}
	return nil
}

// shrink drops schedule entries one at a time while the same kind of
// failure persists, until no single entry can go, or the deadline (if not
// zero) passes: then the shortest schedule so far is returned, and done
// is false.
func shrink(seed uint64, sc simSchedule, kind string, deadline time.Time) (short simSchedule, done bool) {
	for changed := true; changed; {
		changed = false
		for i := len(sc.Events) - 1; i >= 0; i-- {
			if !deadline.IsZero() && time.Now().After(deadline) {
				return sc, false
			}
			try := sc
			try.Events = slices.Delete(slices.Clone(sc.Events), i, i+1)
			if fails, _, _ := simRun(seed, try, nil); failedWith(fails, kind) != nil {
				sc, changed = try, true
			}
		}
	}
	return sc, true
}

// ---- the test ----

func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		replay(t, *simSeed)
		return
	}
	budget := *simDuration
	if budget == 0 {
		budget = 3 * time.Second
		if testing.Short() {
			budget = 500 * time.Millisecond
		}
	}
	type finding struct {
		seed  uint64
		fail  *simFailure
		count int
	}
	found := map[string]*finding{}
	var kinds []string
	start := time.Now()
	runs, failed, maxPasses := 0, 0, 0
	excused := map[string]int{}
	for seed := *simFirst; ; seed++ {
		if *simSeeds > 0 && runs >= *simSeeds || *simSeeds == 0 && time.Since(start) > budget {
			break
		}
		runs++
		fails, passes, why := simRun(seed, genSchedule(seed), nil)
		maxPasses = max(maxPasses, passes)
		if passes < 0 {
			excused[why]++
		}
		if len(fails) > 0 {
			failed++
		}
		for _, f := range fails {
			if found[f.Kind] == nil {
				found[f.Kind] = &finding{seed: seed, fail: f}
				kinds = append(kinds, f.Kind)
			}
			found[f.Kind].count++
		}
	}
	elapsed := time.Since(start)
	reached := runs
	var whys []string
	for _, why := range slices.Sorted(maps.Keys(excused)) {
		reached -= excused[why]
		whys = append(whys, fmt.Sprintf("%s %d", why, excused[why]))
	}
	t.Logf("seeds %d to %d: %d schedules in %v (%.0f/s); %d failed, %d kinds of failure; %d reached the spec, the longest tail in %d passes (bound %d); the others ended with a status that says why (%s)",
		*simFirst, *simFirst+uint64(runs)-1, runs, elapsed.Round(time.Millisecond), float64(runs)/elapsed.Seconds(), failed, len(found), reached, maxPasses, livenessPasses, strings.Join(whys, ", "))
	// Shrinking takes at most as long again as the run: a schedule that
	// is not the shortest yet still shows the failure, and -sim.seed
	// shrinks it to the end.
	slices.Sort(kinds)
	deadline := time.Now().Add(max(elapsed, time.Second))
	for _, k := range kinds {
		f := found[k]
		sc, done := shrink(f.seed, genSchedule(f.seed), k, deadline)
		fails, _, _ := simRun(f.seed, sc, nil)
		short := failedWith(fails, k)
		shortest := "shortest schedule"
		if !done {
			shortest = "shorter schedule (out of time to shrink; -sim.seed shrinks it to the end)"
		}
		t.Errorf("%s (%d of %d schedules): seed %d; replay with -sim.seed %d -sim.kind %s -v\n  at entry %d: %s\n%s (%d entries):\n%s",
			k, f.count, runs, f.seed, f.seed, k, short.At, short.Detail, shortest, len(sc.Events), sc)
	}
}

// replay runs one seed with a trace; when it fails, the shortest schedule
// for its first failure (or the -sim.kind one) is traced too.
func replay(t *testing.T, seed uint64) {
	sc := genSchedule(seed)
	t.Logf("seed %d, schedule:\n%s", seed, sc)
	fails, passes, _ := simRun(seed, sc, t.Logf)
	if len(fails) == 0 {
		t.Logf("seed %d passes (tail: %d passes)", seed, passes)
		return
	}
	for _, f := range fails {
		t.Logf("failure %s at entry %d: %s", f.Kind, f.At, f.Detail)
	}
	kind := fails[0].Kind
	if *simKind != "" {
		kind = *simKind
	}
	if failedWith(fails, kind) == nil {
		t.Fatalf("seed %d has no failure of kind %s", seed, kind)
	}
	short, _ := shrink(seed, sc, kind, time.Time{})
	t.Logf("---- trace of the shortest schedule for %s ----\n%s", kind, short)
	sfails, _, _ := simRun(seed, short, t.Logf)
	f := failedWith(sfails, kind)
	t.Errorf("seed %d: %s at entry %d: %s", seed, kind, f.At, f.Detail)
}

// TestSimulationChecks shows that each safety rule and each status check
// fails when it should: an unsafe step, or a status that stopped being
// true, is reported with its kind.
func TestSimulationChecks(t *testing.T) {
	// formed is a 3-member cluster, all healthy, its status written.
	formed := func(volumes bool) *model {
		m := newModel(1, clusterSpec{Size: 3, Version: simV36}, volumes)
		for _, e := range []simEvent{{Kind: evPass, A: -1}, {Kind: evTick}, {Kind: evPass, A: -1}} {
			m.apply(e)
		}
		if len(m.fails) > 0 || m.status.Phase != phaseRunning {
			t.Fatalf("the cluster did not form: %s; %v", m.summary(), m.fails)
		}
		return m
	}
	id := func(m *model, host string) string { return fmt.Sprint(m.etcd.byHost(host).ID) }
	for _, tc := range []struct {
		name    string
		check   func(m *model)
		want    []string
		volumes bool
	}{
		{"restarting a voter while another is down", func(m *model) {
			m.kill(m.pods["sim-1"])
			m.checkStep(step{Action: actUpgrade, Member: "sim-0", Image: repo + ":" + simV37})
		}, []string{"quorum", "upgrade-while-unhealthy"}, false},
		{"removing a healthy voter while another is down", func(m *model) {
			m.kill(m.pods["sim-1"])
			m.checkStep(step{Action: actRemoveMember, Member: "sim-0", ID: id(m, "sim-0")})
		}, []string{"quorum"}, false},
		{"adding a member while a learner exists", func(m *model) {
			if err := m.addMember("sim-3"); err != nil {
				t.Fatal(err)
			}
			m.checkStep(step{Action: actAddMember, Member: "sim-4"})
		}, []string{"two-changes"}, false},
		{"deleting a healthy member's Pod", func(m *model) {
			m.checkStep(step{Action: actDeletePod, Member: "sim-2"})
		}, []string{"deleted-healthy"}, false},
		{"deleting the claim of a member etcd lists", func(m *model) {
			m.kill(m.pods["sim-2"])
			m.checkStep(step{Action: actDeleteClaim, Member: "sim-2"})
		}, []string{"deleted-member-claim"}, true},
		{"a bootstrap Pod after the cluster formed", func(m *model) {
			m.deletePod(m.pods["sim-2"])
			m.tick()
			m.act(m.input(), m.observe(m.status.CurrentVersion), step{Action: actBootstrap, Members: []string{"sim-0", "sim-1", "sim-2"}})
		}, []string{"bootstrap-again"}, false},
		{"a status that was true before a quorum was lost", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			m.kill(m.pods["sim-0"])
			m.kill(m.pods["sim-1"])
			m.checkStatus(st, m.truth())
		}, []string{"status-ready-lie", "status-available", "status-degraded-false", "status-running"}, false},
		{"a READY column that does not count the ready members", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			st.Ready = "2/3"
			m.checkStatus(st, m.truth())
		}, []string{"status-count"}, false},
		{"a quorum message that counts other members", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			st.Message = "quorum lost: 1 of 5 voting members answer, 3 needed"
			m.checkStatus(st, m.truth())
		}, []string{"status-quorum-message"}, false},
		{"a version above a member's", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			st.CurrentVersion = "3.7.3"
			m.checkStatus(st, m.truth())
		}, []string{"status-version"}, false},
		{"degraded while all is well", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			for i, c := range st.Conditions {
				if c.Type == condDegraded {
					st.Conditions[i].Status = "True"
				}
			}
			m.checkStatus(st, m.truth())
		}, []string{"status-degraded-true"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := formed(tc.volumes)
			tc.check(m)
			var got []string
			for _, f := range m.fails {
				got = append(got, f.Kind)
			}
			for _, k := range tc.want {
				if !slices.Contains(got, k) {
					t.Errorf("got failures %q, want %s among them", got, k)
				}
			}
		})
	}
}

// TestSimulationDeterministic: a seed is a run, step for step.
func TestSimulationDeterministic(t *testing.T) {
	for _, seed := range []uint64{3, 7, 41} {
		var a, b strings.Builder
		simRun(seed, genSchedule(seed), func(format string, args ...any) { fmt.Fprintf(&a, format+"\n", args...) })
		simRun(seed, genSchedule(seed), func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) })
		if a.String() != b.String() {
			t.Errorf("seed %d: two runs differ", seed)
		}
	}
}

// TestSimulationLiveness: without faults the spec is reached within the
// bound, and a quorum lost for good is excused when the status says so.
func TestSimulationLiveness(t *testing.T) {
	pass, tick := simEvent{Kind: evPass, A: -1}, simEvent{Kind: evTick}
	for _, tc := range []struct {
		name    string
		sc      simSchedule
		excused bool
	}{
		{"create", simSchedule{Size: 3, Version: simV36}, false},
		{"grow from 1 to 7 and upgrade", simSchedule{Size: 1, Version: simV36, Events: []simEvent{pass, tick, pass,
			{Kind: evSize, A: 7}, {Kind: evVersion, V: simV37}}}, false},
		{"shrink from 7 to 3", simSchedule{Size: 7, Version: simV36, Events: []simEvent{pass, tick, pass, {Kind: evSize, A: 3}}}, false},
		{"a refused version keeps the cluster as it is", simSchedule{Size: 3, Version: simV36, Events: []simEvent{pass, tick, pass,
			{Kind: evVersion, V: simRefused}}}, false},
		{"two of three Pods deleted: the quorum is lost for good", simSchedule{Size: 3, Version: simV36, Events: []simEvent{pass, tick, pass,
			{Kind: evDelete, A: 0, B: 2}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fails, passes, _ := simRun(1, tc.sc, nil)
			for _, f := range fails {
				t.Errorf("%s: %s", f.Kind, f.Detail)
			}
			if excused := passes < 0; excused != tc.excused {
				t.Errorf("excused %v after %d passes, want %v", excused, passes, tc.excused)
			}
		})
	}
}
