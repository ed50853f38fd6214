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
// A third of the schedules make a TLS cluster (spec.tls), with faults of
// their own: a member's certificate comes due or expires, its Secret is
// deleted or holds a certificate of another CA or a key that does not
// match, the CA's Secret is lost or corrupt. With -sim.tlsbugs also
// spec.tls switched on or off (the operator does not switch a running
// cluster), credentials rotations, and the faults that show the operator's
// TLS bugs not fixed yet. The other schedules are what they were before
// TLS was modelled, seed for seed. The TLS rules: members and Pods all on
// http or all on https, certificates issued only by the CA in BASE-ca and
// trusted by the members, no Secret deleted or overwritten, BASE-root's
// user signs in as root once auth is on (and a rotation's old user is
// retired only after the overlap); liveness: auth on, every certificate
// valid and not due, or a status that says why (BadSecret).
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
	"cmp"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/ca"
)

var (
	simSeeds    = flag.Int("sim.seeds", 0, "simulation: run this many seeds (0: as many as -sim.duration allows)")
	simDuration = flag.Duration("sim.duration", 0, "simulation: run seeds for this long (default 3s, 500ms with -short)")
	simSeed     = flag.Uint64("sim.seed", 0, "simulation: replay this one seed with a trace")
	simFirst    = flag.Uint64("sim.first", 1, "simulation: the first seed")
	simKind     = flag.String("sim.kind", "", "simulation: with -sim.seed, the kind of failure to shrink and trace")
	// simTLSBugs draws what shows the TLS bugs of the operator that are
	// not fixed yet, each named where it is drawn: without it, spec.tls
	// is never switched, no credentials rotation is asked for, a member
	// Secret written with another CA's certificate keeps the cluster's
	// ca.crt, no certificate or CA fault comes (and no certificate ages)
	// before the cluster has formed, and a status that says BadSecret may
	// say Running.
	simTLSBugs = flag.Bool("sim.tlsbugs", false, "simulation: also draw the TLS faults that show operator bugs not fixed yet")
)

// livenessPasses bounds the passes (each followed by a tick) that a
// fault-free tail may take to reach the spec. The longest legitimate road
// is a 1-member cluster grown to 7 and upgraded: 6 adds of about 3 passes,
// then 7 rolling restarts of about 3 passes, with leader hand-overs.
const livenessPasses = 80

// rotationPasses are the more a tail may take once spec.tls.caRotation was
// set: a CA rotation restarts every member twice, and on emptyDir each
// restart is a replacement (remove, add, start, promote); 7 members and an
// upgrade take about 130 passes.
const rotationPasses = 80

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
	evCertDue    = "cert-due"    // the A-th member Secret's certificate comes due; B=1: has expired
	evCertLoss   = "cert-loss"   // the A-th member Secret is deleted (B=0), holds another CA's certificate (1), or a key that does not match (2)
	evCALoss     = "ca-loss"     // the CA's Secret is deleted; B=1: its key is overwritten (unreadable)
	evTLSSpec    = "tls-spec"    // spec.tls switched: removed if set, else set
	evRotate     = "rotate"      // spec.tls.credentialsRotation set to a new value
	evCARotate   = "ca-rotate"   // spec.tls.caRotation set to a new value
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
	case evCertDue:
		return fmt.Sprintf("certificate of member Secret #%d %s", e.A, map[bool]string{true: "expires", false: "comes due"}[e.B == 1])
	case evCertLoss:
		return fmt.Sprintf("member Secret #%d %s", e.A, []string{"deleted", "holds another CA's certificate", "holds a key that does not match"}[e.B])
	case evCALoss:
		return "CA Secret " + map[bool]string{true: "corrupt", false: "deleted"}[e.B == 1]
	case evTLSSpec:
		return "spec.tls switched"
	case evRotate:
		return "spec.tls.credentialsRotation set to a new value"
	case evCARotate:
		return "spec.tls.caRotation set to a new value"
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
	// TLS: the cluster is made with spec.tls, its certificates valid for
	// Lifetime; TLSEvents: the schedule has TLS events (spec.tls may be
	// set later). FixCA: the tail starts with the CA's Secret put back,
	// if it is lost or corrupt.
	TLS, TLSEvents, FixCA bool
	Lifetime              time.Duration
	Bugs                  bool // drawn with -sim.tlsbugs
}

func (sc simSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "create: spec.size %d, spec.version %s, %s", sc.Size, sc.Version, map[bool]string{true: "members on PVCs", false: "members on emptyDir"}[sc.Volumes])
	switch {
	case sc.TLS:
		fmt.Fprintf(&b, ", spec.tls (certificates for %v)", sc.Lifetime)
	case sc.TLSEvents:
		fmt.Fprintf(&b, ", no spec.tls (when set: certificates for %v)", sc.Lifetime)
	}
	if sc.Bugs {
		b.WriteString(" (-sim.tlsbugs)")
	}
	b.WriteString("\n")
	for i, e := range sc.Events {
		fmt.Fprintf(&b, "  %3d %s\n", i, e)
	}
	if sc.Fix {
		b.WriteString("  then: spec.version set to one that runs, if it names one that cannot\n")
	}
	if sc.FixCA {
		b.WriteString("  then: the CA's Secret put back, if it is lost or corrupt\n")
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
	// TLS draws from a stream of its own: a schedule without TLS is the
	// one this seed always drew.
	rt := rand.New(rand.NewPCG(seed, 0x7157157))
	switch w := rt.IntN(12); {
	case w < 4:
		sc.TLS, sc.TLSEvents = true, true
	case w < 5:
		sc.TLSEvents = true // spec.tls set later, or never
	}
	if sc.TLSEvents {
		sc.Bugs = *simTLSBugs
		// Certificates that last 90 days never come due in a schedule;
		// those of a minute or two come due in most.
		sc.Lifetime = []time.Duration{defaultCertLifetime, time.Minute, 2 * time.Minute}[rt.IntN(3)]
		sc.FixCA = rt.IntN(2) == 0
	}
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
		if sc.TLSEvents {
			var t simEvent
			switch w := rt.IntN(200); {
			case w < 8:
				t = simEvent{Kind: evCertDue, A: rt.IntN(7), B: rt.IntN(2)}
			case w < 14:
				t = simEvent{Kind: evCertLoss, A: rt.IntN(7), B: rt.IntN(3)}
			case w < 16:
				t = simEvent{Kind: evCALoss, B: rt.IntN(2)}
			case w < 19 && sc.Bugs:
				t = simEvent{Kind: evRotate}
			case (w < 20 || w < 25 && !sc.TLS) && sc.Bugs:
				t = simEvent{Kind: evTLSSpec}
			case w >= 197:
				// From values no other event takes, so that the
				// schedules of every other draw stay as they were.
				t = simEvent{Kind: evCARotate}
			}
			if t.Kind != "" && (!faulty(t.Kind) || rt.IntN(calm) == 0) {
				e = t
			}
		}
		sc.Events = append(sc.Events, e)
	}
	return sc
}

// faulty: an event that takes something away (a Pod, a process, data, a
// node, the status).
func faulty(kind string) bool {
	switch kind {
	case evDelete, evKill, evWipe, evCordon, evStrand, evEvict, evStatusLoss, evClaim, evCertDue, evCertLoss, evCALoss:
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
	case evCertDue:
		// Before the cluster formed, only with -sim.tlsbugs: the
		// operator renews no certificate before then.
		if names := slices.Sorted(maps.Keys(m.leaves)); len(names) > 0 && (m.formed || m.tlsBugs) {
			m.certDue(names[e.A%len(names)], e.B == 1)
		}
	case evCertLoss:
		if names := slices.Sorted(maps.Keys(m.leaves)); len(names) > 0 && (m.formed || m.tlsBugs || e.B == 0) {
			m.certLoss(names[e.A%len(names)], e.B)
		}
	case evCALoss:
		// Before the cluster formed, only with -sim.tlsbugs: a CA made
		// again then keeps the old CA's certificates in the members'
		// Secrets.
		if m.ca.Gen != 0 && !m.ca.Lost && (m.formed || m.tlsBugs) {
			m.ca.Lost, m.ca.Corrupt = e.B == 0, e.B == 1
		}
	case evTLSSpec:
		if m.spec.TLS == nil {
			m.spec.TLS = m.tlsSpec
		} else {
			m.spec.TLS = nil
		}
		m.gen++
	case evRotate, evCARotate:
		if m.spec.TLS != nil {
			t := *m.spec.TLS
			m.rotations++
			if e.Kind == evRotate {
				t.CredentialsRotation = fmt.Sprintf("rotation-%d", m.rotations)
			} else {
				t.CARotation = fmt.Sprintf("ca-%d", m.rotations)
			}
			m.spec.TLS, m.tlsSpec = &t, &t
			m.gen++
		}
	}
}

// certDue ages a member's certificate (in its Secret, and in its Pod's
// files if they hold the same one) so that it is due now, or has just
// expired.
func (m *model) certDue(member string, expired bool) {
	l := m.leaves[member]
	now, life := simTime(m.now), l.NotAfter.Sub(l.NotBefore)
	nb := now.Add(-life*2/3 - time.Second)
	if expired {
		nb = now.Add(-life - time.Second)
	}
	age := func(f *simLeaf) { f.NotBefore, f.NotAfter = nb, nb.Add(life) }
	if p := m.pods[member]; p != nil && p.files != nil && p.files.Serial == l.Serial {
		age(p.files)
	}
	age(l)
}

// certLoss: someone deletes a member's Secret (the Pod's files stay as
// they are), or writes into it a certificate of another CA, or a key
// that is not the certificate's.
func (m *model) certLoss(member string, how int) {
	l := m.leaves[member]
	switch how {
	case 0:
		delete(m.leaves, member)
		return
	case 1:
		// Another CA's certificate; its ca.crt too only with -sim.tlsbugs
		// (etcd trusts the CA it read when it started, and a renewal
		// restarts nothing).
		now, trust := simTime(m.now), l.Trust
		if m.tlsBugs {
			trust = simForeignTrust
		}
		l = &simLeaf{CA: simForeignCA, Trust: trust, NotBefore: now, NotAfter: now.Add(24 * time.Hour)}
	case 2:
		c := *l
		c.BadKey = true
		l = &c
	}
	m.serials++
	l.Serial = m.serials
	m.leaves[member] = l
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
	case deg.Status == "True" && deg.Reason == reasonBadSecret && !m.ca.ok():
		// The CA is gone: no certificate can be renewed.
	case deg.Status == "True" && t.allWell && len(m.pods) == m.spec.Size:
		m.failf("status-degraded-true", "Degraded True (%s: %s) while every one of the %d members is a healthy voter", deg.Reason, deg.Message, t.voters)
	}
	if st.Phase == phaseRunning && !t.allWell && !(condOf(st, condProgressing).Reason == reasonBadSecret && !m.tlsBugs) {
		// (A cluster whose CA is lost says the phase it had before,
		// Running too: only with -sim.tlsbugs is that a failure.)
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

// checkSchemes: after a step, the members and their Pods are all on http
// or all on https: the operator does not switch a running cluster, and a
// member on the other scheme than its peers cannot talk to them.
func (m *model) checkSchemes() {
	var on, off []string
	add := func(tls bool, what string) {
		if tls {
			on = append(on, what)
		} else {
			off = append(off, what)
		}
	}
	if m.etcd != nil {
		for _, mb := range m.etcd.Members {
			add(mb.HTTPS, "member "+mb.Host)
		}
	}
	for _, n := range m.podNames() {
		if p := m.pods[n]; !p.Deleting {
			add(p.TLS, "Pod "+n)
		}
	}
	if len(on) > 0 && len(off) > 0 {
		m.failf("mixed-scheme", "on https: %s; on http: %s", strings.Join(on, ", "), strings.Join(off, ", "))
	}
}

// checkCredentials: after a step, the user and password in Secret
// BASE-root sign in to etcd with the role root, once authentication is
// on: the Secret is how clients, the operator among them, get in.
func (m *model) checkCredentials() {
	c := m.etcd
	if c == nil || !c.Auth.Enabled || m.root == nil {
		return
	}
	name := cmp.Or(m.root["username"], rootUser)
	if u := c.Auth.user(name); u == nil || u.Password != m.root["password"] || !u.Root {
		m.failf("credentials", "Secret %s holds user %s, who cannot sign in to etcd as root (user %v)", rootSecret(simBase), name, u)
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
	case p.Up && (p.TLS || mb.HTTPS) && m.cutOff(p, mb) != "":
		return "cut-off(" + m.cutOff(p, mb) + ")"
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
	// TLS: a cluster that runs TLS has its CA, authentication on, and
	// for every member a certificate of the CA its members trust, valid
	// and not due, in its Secret and in its Pod's files; its status says
	// so. One that runs the other way than spec.tls says stays so, and
	// its status says why.
	runsTLS := slices.ContainsFunc(c.Members, func(mb *simMember) bool { return mb.HTTPS })
	if runsTLS != (m.spec.TLS != nil) && condOf(m.status, condProgressing).Reason != reasonTLSSwitchUnsupported {
		add("tls-switch", "the members run %s, spec.tls says %s, and the status does not say why (%s)", scheme(runsTLS), scheme(m.spec.TLS != nil), condOf(m.status, condProgressing).Reason)
	}
	if runsTLS {
		now := simTime(m.now)
		if !m.ca.ok() {
			add("ca", "the CA's Secret is %s", map[bool]string{true: "lost", false: "corrupt"}[m.ca.Lost])
		}
		if r := c.Auth.user(rootUser); !c.Auth.Enabled {
			add("auth", "etcd's authentication is off (user root %v)", r)
		}
		if creds := m.tlsView().Creds; m.spec.TLS != nil && (creds.Rotation != m.spec.TLS.CredentialsRotation || creds.NextUser != "" || creds.PreviousUser != "") {
			add("rotation", "spec.tls.credentialsRotation %q, Secret %s answers %q (next user %q, previous user %q)", m.spec.TLS.CredentialsRotation, rootSecret(simBase), creds.Rotation, creds.NextUser, creds.PreviousUser)
		}
		if m.ca.Next != 0 || m.ca.Previous != 0 || m.spec.TLS != nil && m.ca.Rotation != m.spec.TLS.CARotation {
			add("ca-rotation", "Secret %s answers spec.tls.caRotation %q (next CA %d, previous %d), spec.tls is %+v", caSecret(simBase), m.ca.Rotation, m.ca.Next, m.ca.Previous, m.spec.TLS)
		}
		if st := m.status.TLS; st == nil || st.Auth != "enabled" {
			add("auth-status", "status.tls %+v", st)
		}
		// (A renewed certificate reaches the Pod's files at the next
		// tick; until then an expired one cuts the member off, which
		// the member's health shows.)
		for _, mb := range c.Members {
			l := m.leaves[mb.Host]
			switch {
			case l == nil:
				addMember(mb, "certificate", "member %s has no Secret", mb.Host)
			case l.BadKey || l.CA != c.CA || !l.Trust.has(c.CA) || now.After(l.NotAfter):
				addMember(mb, "certificate", "member %s's Secret holds a certificate it cannot use (CA %d, its ca.crt %s, trusted %d, bad key %v, expired %v)", mb.Host, l.CA, l.Trust, c.CA, l.BadKey, now.After(l.NotAfter))
			case l.Trust != trustOf(c.CA):
				addMember(mb, "ca-rotation", "member %s's Secret has a ca.crt of CAs %s, not CA %d alone", mb.Host, l.Trust, c.CA)
			case m.pods[mb.Host] != nil && m.pods[mb.Host].trust != trustOf(c.CA):
				addMember(mb, "ca-rotation", "member %s trusts CAs %s, not CA %d alone", mb.Host, m.pods[mb.Host].trust, c.CA)
			case l.due(now):
				addMember(mb, "certificate", "member %s's certificate is due", mb.Host)
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
		case slices.Contains([]string{"version", "version-mixed", "version-unaccepted", "spec-cannot-run", "status", "tls-switch"}, p.class):
		case p.class == "no-leader" && m.etcd != nil && m.runningVoters()+m.downOnBadVersion() >= quorum(m.etcd.voters()):
		case m.versionDown(p):
		case p.class == "ca-rotation" && (m.spec.Size < 3 || m.downOnBadVersion() > 0):
			// A CA rotation waits for members as the upgrade does, and
			// for every voter to be healthy.
		default:
			onlyVersion = false
		}
	}
	switch prog {
	case reasonBadSecret:
		// The CA is gone or unreadable: the operator can neither issue
		// nor renew, and must not make a CA the members do not trust.
		return !m.ca.ok()
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
	case reasonRotationNeedsMembers:
		// A member restarted for the new CA would cost the quorum of
		// fewer than 3 voters: the status asks for more.
		return m.spec.Size < 3 && !slices.ContainsFunc(problems, func(p simProblem) bool { return p.class != "ca-rotation" && p.class != "status" })
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
	fails, passes, why, _ = simRunTLS(seed, sc, trace)
	return fails, passes, why
}

// simTLSStats is what a run did with TLS: whether its cluster ran TLS at
// the end, and how many certificates the operator renewed.
type simTLSStats struct {
	on       bool
	renewals int
	retired  int // CAs retired: CA rotations done
}

// simRunTLS is simRun, with what the run did with TLS.
func simRunTLS(seed uint64, sc simSchedule, trace func(string, ...any)) (fails []*simFailure, passes int, why string, stats simTLSStats) {
	var tls *tlsSpec
	if sc.TLSEvents {
		tls = &tlsSpec{CertificateLifetime: sc.Lifetime, CALifetime: defaultCALifetime, CredentialsOverlap: 20 * time.Second}
	}
	spec := clusterSpec{Size: sc.Size, Version: sc.Version}
	if sc.TLS {
		spec.TLS = tls
	}
	m := newTLSModel(seed, spec, sc.Volumes, tls)
	m.trace, m.tlsBugs = trace, sc.Bugs
	for i, e := range sc.Events {
		m.at = i
		m.tracef("== %d %s", i, e)
		m.apply(e)
		if e.Kind != evPass && m.trace != nil {
			m.tracef("   %s", m.summary())
		}
	}
	m.at = len(sc.Events)
	m.tracef("== tail: uncordon, no faults (lines that repeat the one before are left out)")
	m.cordoned, m.quiet = false, true
	if sc.FixCA && m.ca.Gen != 0 && (m.ca.Lost || m.ca.Corrupt) {
		m.tracef("== tail: the CA's Secret put back")
		m.ca.Lost, m.ca.Corrupt = false, false
	}
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
	defer func() {
		stats = simTLSStats{on: m.etcd != nil && slices.ContainsFunc(m.etcd.Members, func(mb *simMember) bool { return mb.HTTPS }), renewals: m.renewals, retired: m.retiredCAs}
	}()
	bound := livenessPasses
	if m.spec.TLS != nil && m.spec.TLS.CARotation != "" {
		bound += rotationPasses
	}
	for p := 1; p <= bound; p++ {
		m.pass(-1, false)
		if problems = m.goal(); len(problems) == 0 {
			if m.trace != nil {
				m.tracef("spec reached after %d passes: %s", p, m.summary())
			}
			return m.fails, p, "", stats
		}
		m.tick()
		if m.trace != nil {
			m.traceOnce("summary", "   "+m.summary())
		}
	}
	if m.excused(problems) {
		m.tracef("spec not reached, and the status says why: %s", m.status.Message)
		return m.fails, -1, condOf(m.status, condProgressing).Reason, stats
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
		bound, strings.Join(details, "; "), m.status.Phase, m.status.Ready, prog.Reason, m.status.Message, m.summary())
	return m.fails, 0, "", stats
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
	tlsRuns, tlsReached, renewals, retired := 0, 0, 0, 0
	for seed := *simFirst; ; seed++ {
		if *simSeeds > 0 && runs >= *simSeeds || *simSeeds == 0 && time.Since(start) > budget {
			break
		}
		runs++
		fails, passes, why, ts := simRunTLS(seed, genSchedule(seed), nil)
		maxPasses = max(maxPasses, passes)
		if ts.on {
			tlsRuns++
			if passes > 0 {
				tlsReached++
			}
		}
		renewals += ts.renewals
		retired += ts.retired
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
	t.Logf("seeds %d to %d: %d schedules in %v (%.0f/s); %d failed, %d kinds of failure; %d reached the spec, the longest tail in %d passes (bound %d, %d more after spec.tls.caRotation); the others ended with a status that says why (%s); %d ended on TLS, %d of them at the spec with authentication on and every certificate valid, %d certificates renewed, %d CA rotations done",
		*simFirst, *simFirst+uint64(runs)-1, runs, elapsed.Round(time.Millisecond), float64(runs)/elapsed.Seconds(), failed, len(found), reached, maxPasses, livenessPasses, rotationPasses, strings.Join(whys, ", "), tlsRuns, tlsReached, renewals, retired)
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
		t.Errorf("%s (%d of %d schedules): seed %d; replay with -sim.seed %d -sim.kind %s%s -v\n  at entry %d: %s\n%s (%d entries):\n%s",
			k, f.count, runs, f.seed, f.seed, k, map[bool]string{true: " -sim.tlsbugs"}[*simTLSBugs], short.At, short.Detail, shortest, len(sc.Events), sc)
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
	// formed is a 3-member cluster, all healthy, its status written; with
	// tls, on TLS with authentication on.
	formed := func(volumes, tls bool) *model {
		spec := clusterSpec{Size: 3, Version: simV36}
		if tls {
			spec.TLS = &tlsSpec{CertificateLifetime: time.Hour, CALifetime: defaultCALifetime, CredentialsOverlap: time.Minute}
		}
		m := newModel(1, spec, volumes)
		for _, e := range []simEvent{{Kind: evPass, A: -1}, {Kind: evTick}, {Kind: evPass, A: -1}} {
			m.apply(e)
		}
		if len(m.fails) > 0 || m.status.Phase != phaseRunning || len(m.goal()) > 0 || tls != m.etcd.Auth.Enabled {
			t.Fatalf("the cluster did not form: %s; %v; %v", m.summary(), m.fails, m.goal())
		}
		return m
	}
	leaf := func(member string, c *ca.CA) *secretToMake {
		return &secretToMake{Kind: secretLeaf, Name: memberSecret(member), CA: c, JWT: simJWT, Leaf: ca.Leaf{CommonName: member, Lifetime: time.Hour}}
	}
	id := func(m *model, host string) string { return fmt.Sprint(m.etcd.byHost(host).ID) }
	for _, tc := range []struct {
		name         string
		check        func(m *model)
		want         []string
		volumes, tls bool
	}{
		{"restarting a voter while another is down", func(m *model) {
			m.kill(m.pods["sim-1"])
			m.checkStep(step{Action: actUpgrade, Member: "sim-0", Image: repo + ":" + simV37})
		}, []string{"quorum", "upgrade-while-unhealthy"}, false, false},
		{"removing a healthy voter while another is down", func(m *model) {
			m.kill(m.pods["sim-1"])
			m.checkStep(step{Action: actRemoveMember, Member: "sim-0", ID: id(m, "sim-0")})
		}, []string{"quorum"}, false, false},
		{"adding a member while a learner exists", func(m *model) {
			if err := m.addMember("sim-3", false); err != nil {
				t.Fatal(err)
			}
			m.checkStep(step{Action: actAddMember, Member: "sim-4"})
		}, []string{"two-changes"}, false, false},
		{"deleting a healthy member's Pod", func(m *model) {
			m.checkStep(step{Action: actDeletePod, Member: "sim-2"})
		}, []string{"deleted-healthy"}, false, false},
		{"deleting the claim of a member etcd lists", func(m *model) {
			m.kill(m.pods["sim-2"])
			m.checkStep(step{Action: actDeleteClaim, Member: "sim-2"})
		}, []string{"deleted-member-claim"}, true, false},
		{"a bootstrap Pod after the cluster formed", func(m *model) {
			m.deletePod(m.pods["sim-2"])
			m.tick()
			plan := newClusterPlan(objectMeta{Name: simBase, Namespace: "default", UID: "sim-uid"}, repo+":"+simV36)
			ic := initialCluster([]peer{{"sim-0", "sim-0"}, {"sim-1", "sim-1"}, {"sim-2", "sim-2"}}, false)
			m.act(m.input(), m.observe(m.status.CurrentVersion), step{Action: actBootstrap, Members: []string{"sim-0", "sim-1", "sim-2"},
				Create: []object{{Resource: "pods", Name: "sim-2", Body: plan.memberPod("sim-2", ic)}}})
		}, []string{"bootstrap-again"}, false, false},
		{"a status that was true before a quorum was lost", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			m.kill(m.pods["sim-0"])
			m.kill(m.pods["sim-1"])
			m.checkStatus(st, m.truth())
		}, []string{"status-ready-lie", "status-available", "status-degraded-false", "status-running"}, false, false},
		{"a READY column that does not count the ready members", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			st.Ready = "2/3"
			m.checkStatus(st, m.truth())
		}, []string{"status-count"}, false, false},
		{"a quorum message that counts other members", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			st.Message = "quorum lost: 1 of 5 voting members answer, 3 needed"
			m.checkStatus(st, m.truth())
		}, []string{"status-quorum-message"}, false, false},
		{"a version above a member's", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			st.CurrentVersion = "3.7.3"
			m.checkStatus(st, m.truth())
		}, []string{"status-version"}, false, false},
		{"degraded while all is well", func(m *model) {
			st, _ := decide(m.input(), m.observe(m.status.CurrentVersion))
			for i, c := range st.Conditions {
				if c.Type == condDegraded {
					st.Conditions[i].Status = "True"
				}
			}
			m.checkStatus(st, m.truth())
		}, []string{"status-degraded-true"}, false, false},
		{"a certificate of a CA that is not the cluster's", func(m *model) {
			m.act(m.input(), m.observe(m.status.CurrentVersion), step{Action: actRenewCertificate, Member: "sim-0", Renew: leaf("sim-0", simCA(m.ca.Gen+1))})
		}, []string{"leaf-wrong-ca", "foreign-ca"}, false, true},
		{"a certificate issued while the CA is lost", func(m *model) {
			m.ca.Lost = true
			m.act(m.input(), m.observe(m.status.CurrentVersion), step{Action: actRenewCertificate, Member: "sim-0", Renew: leaf("sim-0", simCA(m.ca.Gen))})
		}, []string{"leaf-wrong-ca"}, false, true},
		{"a new CA whose certificates the members do not trust", func(m *model) {
			m.ca.Lost = true
			m.act(m.input(), m.observe(m.status.CurrentVersion), step{Action: actCreateCA, Create: []object{{Resource: "secrets", Name: caSecret(simBase), Secret: &secretToMake{Kind: secretCA, Name: caSecret(simBase)}}}})
			m.act(m.input(), m.observe(m.status.CurrentVersion), step{Action: actRenewCertificate, Member: "sim-1", Renew: leaf("sim-1", simCA(m.ca.Gen))})
		}, []string{"foreign-ca"}, false, true},
		{"a Secret deleted", func(m *model) {
			m.act(m.input(), m.observe(m.status.CurrentVersion), step{Action: "DeleteSecret", Member: caSecret(simBase), Delete: "secrets"})
		}, []string{"secret-deleted"}, false, true},
		{"the CA's Secret overwritten", func(m *model) {
			m.act(m.input(), m.observe(m.status.CurrentVersion), step{Action: actRenewCertificate, Member: "sim-0", Renew: &secretToMake{Kind: secretCA, Name: caSecret(simBase)}})
		}, []string{"secret-overwritten"}, false, true},
		{"a member added on http to a cluster on https", func(m *model) {
			obs := m.observe(m.status.CurrentVersion)
			m.act(m.input(), obs, step{Action: actAddMember, Member: "sim-3", Etcd: &etcdRequest{Pod: obs.Etcd.LeaderPod, Path: "/v3/cluster/member/add",
				Body: map[string]any{"peerURLs": []string{peerURL("sim-3", false)}, "isLearner": true}}})
			m.checkSchemes()
		}, []string{"mixed-scheme"}, false, true},
		{"a Pod on https for a member on http", func(m *model) {
			m.deletePod(m.pods["sim-2"])
			m.tick()
			m.tick()
			plan := newClusterPlan(objectMeta{Name: simBase, Namespace: "default", UID: "sim-uid"}, repo+":"+simV36)
			plan.TLS = &tlsSpec{CertificateLifetime: time.Hour, CALifetime: defaultCALifetime}
			m.act(m.input(), m.observe(m.status.CurrentVersion), step{Action: actRestartMember, Member: "sim-2",
				Create: []object{{Resource: "pods", Name: "sim-2", Body: plan.joiningPod("sim-2", m.etcd.Initial)}}})
			m.checkSchemes()
		}, []string{"mixed-scheme"}, true, false},
		{"user root with a password that is not the Secret's", func(m *model) {
			m.etcd.Auth = simAuth{}
			obs := m.observe(m.status.CurrentVersion)
			m.act(m.input(), obs, step{Action: actAddRootUser, Etcd: &etcdRequest{Pod: obs.Etcd.LeaderPod, Path: "/v3/auth/user/add", Body: map[string]string{"name": rootUser, "password": "not it"}}})
		}, []string{"root-password"}, false, true},
		{"a Secret whose password is not etcd's", func(m *model) {
			m.root["password"] = "another"
			m.checkCredentials()
		}, []string{"credentials"}, false, true},
		{"a user retired before the overlap is over", func(m *model) {
			m.root[keyPreviousUser], m.root[keyRotatedAt] = rootUser, stamp(simTime(m.now))
			obs := m.observe(m.status.CurrentVersion)
			m.act(m.input(), obs, step{Action: actRetireUser, Etcd: &etcdRequest{Pod: obs.Etcd.LeaderPod, Path: "/v3/auth/user/changepw", Body: map[string]string{"name": rootUser}, RandomPassword: true}})
		}, []string{"retired-early"}, false, true},
		{"a cluster on TLS with authentication off, or a certificate due, is not at its spec", func(m *model) {
			m.etcd.Auth.Enabled = false
			m.certDue("sim-1", false)
			var got []string
			for _, p := range m.goal() {
				got = append(got, p.class)
			}
			if !slices.Contains(got, "auth") || !slices.Contains(got, "certificate") {
				m.failf("goal", "goal %q", got)
			}
			m.failf("checked", "")
		}, []string{"checked"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := formed(tc.volumes, tc.tls)
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
			if slices.Contains(got, "goal") {
				t.Error(m.fails[0].Detail)
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
		renewed int // certificates renewed, at least
	}{
		{"create", simSchedule{Size: 3, Version: simV36}, false, 0},
		{"grow from 1 to 7 and upgrade", simSchedule{Size: 1, Version: simV36, Events: []simEvent{pass, tick, pass,
			{Kind: evSize, A: 7}, {Kind: evVersion, V: simV37}}}, false, 0},
		{"shrink from 7 to 3", simSchedule{Size: 7, Version: simV36, Events: []simEvent{pass, tick, pass, {Kind: evSize, A: 3}}}, false, 0},
		{"a refused version keeps the cluster as it is", simSchedule{Size: 3, Version: simV36, Events: []simEvent{pass, tick, pass,
			{Kind: evVersion, V: simRefused}}}, false, 0},
		{"two of three Pods deleted: the quorum is lost for good", simSchedule{Size: 3, Version: simV36, Events: []simEvent{pass, tick, pass,
			{Kind: evDelete, A: 0, B: 2}}}, true, 0},
		{"a TLS cluster, its certificates renewed as they come due", simSchedule{Size: 3, Version: simV36, TLS: true, TLSEvents: true, Lifetime: time.Minute,
			Events: slices.Concat([]simEvent{pass, tick, pass}, slices.Repeat([]simEvent{tick, tick, pass}, 30))}, false, 3 * 60 / 19},
		{"a TLS cluster grown from 1 to 5 and upgraded", simSchedule{Size: 1, Version: simV36, TLS: true, TLSEvents: true, Lifetime: 2 * time.Minute, Events: []simEvent{pass, tick, pass,
			{Kind: evSize, A: 5}, {Kind: evVersion, V: simV37}}}, false, 0},
		{"certificates expired, due, of another CA, with a wrong key, deleted", simSchedule{Size: 3, Version: simV36, TLS: true, TLSEvents: true, Lifetime: defaultCertLifetime, Events: []simEvent{pass, tick, pass,
			{Kind: evCertDue, A: 0, B: 1}, pass, {Kind: evCertDue, A: 1}, pass, {Kind: evCertLoss, A: 2, B: 1}, tick, pass, {Kind: evCertLoss, A: 0, B: 2}, tick,
			{Kind: evKill, A: 0, B: 1}, tick, pass, {Kind: evCertLoss, A: 1}, tick, pass}}, false, 4},
		{"a quorum of certificates expired, renewed", simSchedule{Size: 3, Version: simV36, TLS: true, TLSEvents: true, Lifetime: defaultCertLifetime, Events: []simEvent{pass, tick, pass,
			{Kind: evCertDue, A: 0, B: 1}, {Kind: evCertDue, A: 1, B: 1}, {Kind: evCertDue, A: 2, B: 1}, tick}}, false, 3},
		{"the root credentials rotated twice", simSchedule{Size: 3, Version: simV36, TLS: true, TLSEvents: true, Lifetime: time.Minute, Events: slices.Concat([]simEvent{pass, tick, pass,
			{Kind: evRotate}, pass}, slices.Repeat([]simEvent{tick, pass}, 12), []simEvent{{Kind: evRotate}})}, false, 0},
		{"the CA lost: the status says so", simSchedule{Size: 3, Version: simV36, TLS: true, TLSEvents: true, Lifetime: time.Minute, Events: []simEvent{pass, tick, pass,
			{Kind: evCALoss}}}, true, 0},
		{"the CA corrupt, then put back", simSchedule{Size: 3, Version: simV36, TLS: true, TLSEvents: true, Lifetime: time.Minute, FixCA: true, Events: []simEvent{pass, tick, pass,
			{Kind: evCALoss, B: 1}, {Kind: evSize, A: 5}, tick, pass}}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fails, passes, _, stats := simRunTLS(1, tc.sc, nil)
			for _, f := range fails {
				t.Errorf("%s: %s", f.Kind, f.Detail)
			}
			if excused := passes < 0; excused != tc.excused {
				t.Errorf("excused %v after %d passes, want %v", excused, passes, tc.excused)
			}
			if stats.on != tc.sc.TLS {
				t.Errorf("the cluster ended on TLS: %v", stats.on)
			}
			if stats.renewals < tc.renewed {
				t.Errorf("%d certificates renewed, want %d or more", stats.renewals, tc.renewed)
			}
		})
	}
}
