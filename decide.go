// Decide: what the cluster needs next, as a pure function.
//
// An operator is observe -> decide -> act. main.go observes (the member
// Pods and Services through the API server, etcd itself through the Pods'
// proxy subresource) and acts; this file only decides. decide takes the
// EtcdCluster's spec, the status it last wrote and what was observed, and
// returns the status to report and one next step. It reads no clock and
// sends no request, so a table test can cover every case, and a pass that
// dies after any request is simply followed by another pass that observes
// what the first one left and decides again.
//
// The rules that keep etcd safe live here, in one place:
//
//   - One membership change at a time. A new member joins as a learner (a
//     non-voting member that cannot change the quorum), gets its Service
//     and Pod, and only then is promoted; etcd refuses to promote one that
//     has not caught up, and the operator tries again later.
//   - Never a step that can cost quorum. Removing a voter, or restarting one
//     for an upgrade, happens only if the voters left healthy still form a
//     majority. With quorum lost, nothing is changed at all.
//   - Every step is found again from what exists. A member added to etcd
//     whose Pod was never created shows in etcd's member list unstarted
//     (with no name): its Pod is created, never a second member. A Pod whose
//     member was removed is deleted.
//
// The order is: bootstrap; repair (replace a member whose Pod is gone);
// resize; upgrade. Repair first, because a cluster one member short
// tolerates one failure less; resize before upgrade, because a rolling
// upgrade of a full-sized cluster never takes more than one member away.
package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// podView is what a pass saw of one member Pod.
type podView struct {
	Name     string
	Phase    string // Pending, Running, Succeeded or Failed
	Ready    bool   // the Pod's Ready condition: etcd's /readyz passes
	Deleting bool   // metadata.deletionTimestamp is set
	Image    string
	// Waiting is the kubelet's reason for a container that is not running
	// (ImagePullBackOff, CrashLoopBackOff, ...), with its message.
	Waiting, WaitingMessage string
	Restarts                int
	// InitialCluster and State are the etcd flags the Pod was created
	// with: they tell a bootstrap Pod (state "new") from a joining one.
	InitialCluster, State string
}

// memberView is one etcd member as the leader's member list shows it,
// with what the member itself answered.
type memberView struct {
	ID       string // 64-bit member ID, as the JSON gateway writes it: decimal
	Name     string // empty until the member has started
	PeerHost string // host of its peer URL: the member's Pod and Service name
	Learner  bool
	Answered bool   // it answered /v3/maintenance/status
	Version  string // etcd's version, as it reported it (3.6.16)
}

// etcdView is what etcd said during one pass.
type etcdView struct {
	ClusterID string // from any member that answered
	Leader    string // member ID of the leader, if any member knows one
	// Members is the leader's member list; nil when no leader answered.
	Members []memberView
	// Answered counts the members that answered at all; AnsweredVoters
	// those of them that vote (learners do not).
	Answered, AnsweredVoters int
	// LeaderPod is the leader's Pod: where membership changes are sent.
	LeaderPod string
	// AnsweredPods are the Pods whose etcd answered; nil when none was
	// asked (no Pod running).
	AnsweredPods []string
}

// observed is everything a pass saw of one cluster.
type observed struct {
	Pods          []podView
	Services      []string // member and client Services that exist
	Etcd          etcdView
	ClientService bool
}

// Actions a step can take. Each is one request, or a short idempotent
// sequence of creates.
const (
	actNone         = ""
	actBootstrap    = "Bootstrap"    // create the missing Services, then Pods, of a new cluster
	actCreateClient = "CreateClient" // create the client Service
	actAddMember    = "AddMember"    // add a learner to etcd
	actStartMember  = "StartMember"  // create the Service and Pod of a member etcd knows
	actPromote      = "Promote"      // make a learner a voter
	actRemoveMember = "RemoveMember" // remove a member from etcd
	actDeletePod    = "DeletePod"
	actDeleteSvc    = "DeleteService"
	actUpgrade      = "Upgrade"    // change a member Pod's image in place
	actMoveLeader   = "MoveLeader" // hand leadership to another member first
)

// step is decide's answer: one action, and when to look again.
type step struct {
	Action string
	Member string // Pod and Service name of the member acted on
	ID     string // its etcd member ID, for Promote, RemoveMember and MoveLeader (the new leader)
	Image  string // for StartMember, Bootstrap and Upgrade
	// Members lists what Bootstrap creates; InitialCluster is the
	// --initial-cluster a StartMember Pod gets.
	Members        []string
	InitialCluster string
	// Again asks for another pass after this long even if no event comes:
	// used only while waiting for something no Kubernetes object shows
	// (a learner catching up, a member reporting its new version).
	Again time.Duration
	// Last ends the pass once the action succeeds: what it leads to
	// (Pods starting) comes as events, and another look now would only
	// read what was just written.
	Last bool
	// Event, when set, is recorded once the action succeeds.
	EventType, EventReason, EventMessage string
}

// Phases of an EtcdCluster: one word for `kubectl get`.
const (
	phaseCreating    = "Creating"    // bootstrapping, not yet answering
	phaseRunning     = "Running"     // available, every member ready, nothing to do
	phaseScaling     = "Scaling"     // adding or removing a member for spec.size
	phaseReplacing   = "Replacing"   // replacing a member whose Pod is gone
	phaseUpgrading   = "Upgrading"   // rolling to spec.version
	phaseDegraded    = "Degraded"    // available, but a member is missing or unready
	phaseUnavailable = "Unavailable" // quorum lost, or every member gone
	phaseFailed      = "Failed"      // someone has to act: the message says what
)

// Condition types and reasons (API conventions: CamelCase reasons,
// a message for people).
const (
	condAvailable   = "Available"
	condProgressing = "Progressing"
	condDegraded    = "Degraded"
)

// pollAgain is how soon a pass that waits on etcd alone looks again.
const pollAgain = 2 * time.Second

// input is what decide needs besides what was observed.
type input struct {
	Name    string // the EtcdCluster's name, for messages
	Spec    clusterSpec
	Prev    clusterStatus
	Gen     int64
	Repo    string // image repository: the tag is spec.version
	Base    string // baseName of the EtcdCluster
	Token   string
	Invalid string // a parse error of the spec, if any
}

// decide returns the status to report and the next step.
func decide(in input, obs observed) (clusterStatus, step) {
	d := decision{in: in, obs: obs, pods: map[string]*podView{}, svcs: map[string]bool{}}
	for i := range obs.Pods {
		d.pods[obs.Pods[i].Name] = &obs.Pods[i]
	}
	for _, s := range obs.Services {
		d.svcs[s] = true
	}
	d.st = clusterStatus{
		ClusterID:          firstOf(obs.Etcd.ClusterID, in.Prev.ClusterID),
		ObservedGeneration: in.Gen,
	}
	s := d.run()
	d.finish()
	return d.st, s
}

type decision struct {
	in   input
	obs  observed
	pods map[string]*podView
	svcs map[string]bool
	st   clusterStatus

	available, progressing, degraded    bool
	availReason, progReason, degrReason string
	availMsg, progMsg, degrMsg          string
}

func (d *decision) run() step {
	in := d.in
	if in.Invalid != "" {
		d.st.Phase, d.st.Message = phaseFailed, in.Invalid
		d.st.Members, d.st.CurrentVersion = d.in.Prev.Members, d.in.Prev.CurrentVersion
		d.setAvailable(len(d.obs.Etcd.Members) > 0 && d.quorumOK(), "InvalidSpec", in.Invalid)
		d.setProgressing(false, "InvalidSpec", in.Invalid)
		return step{}
	}
	if d.st.ClusterID == "" {
		return d.bootstrap()
	}
	return d.operate()
}

// bootstrap creates a new cluster: every Service, then every Pod, with
// --initial-cluster-state=new, and waits until a member answers.
func (d *decision) bootstrap() step {
	names := d.bootstrapMembers()
	var missing []string
	for _, m := range names {
		if !d.svcs[m] || d.pods[m] == nil {
			missing = append(missing, m)
		}
	}
	if !d.svcs[d.in.Base+"-client"] {
		missing = append(missing, d.in.Base+"-client")
	}
	d.st.Members = nil
	for _, m := range names {
		d.st.Members = append(d.st.Members, memberStatus{Name: m})
	}
	d.setAvailable(false, "NotStarted", "etcd has not answered yet")
	d.setDegraded(false, "Creating", "")
	if len(missing) > 0 {
		// The status written after the step already says what comes next,
		// so the pass ends there: the Pods' events start the next one.
		msg := fmt.Sprintf("created %d members: %s; waiting for them to start and elect a leader", len(names), strings.Join(names, ", ")) + d.namesNote()
		d.st.Phase, d.st.Message = phaseCreating, msg
		d.setProgressing(true, "WaitingForMembers", msg)
		event := fmt.Sprintf("creating %d members: %s; clients will use Service %s-client", len(names), strings.Join(names, ", "), d.in.Base) + d.namesNote()
		return step{Action: actBootstrap, Members: names, Image: d.image(), Last: true,
			EventType: eventNormal, EventReason: reasonClusterCreated, EventMessage: event}
	}
	msg := fmt.Sprintf("waiting for the members to start and elect a leader: %s", d.podSummary(names)) + d.namesNote()
	d.st.Phase, d.st.Message = phaseCreating, msg
	d.setProgressing(true, "WaitingForMembers", msg)
	// Pods turning Ready wake the operator (the Pod watch). Once one is
	// Ready etcd should answer: look again until it does.
	for _, m := range names {
		if p := d.pods[m]; p != nil && p.Ready {
			return step{Again: pollAgain}
		}
	}
	return step{}
}

// namesNote explains object names that are not the EtcdCluster's own.
func (d *decision) namesNote() string {
	if d.in.Base == d.in.Name {
		return ""
	}
	return fmt.Sprintf(" (object names shortened to %s-*, because the name is not a short DNS-1035 label)", d.in.Base)
}

// bootstrapMembers are the members of the cluster being created: those in
// the --initial-cluster of a Pod already made for it (so that a spec.size
// changed halfway changes nothing), else spec.size new names.
func (d *decision) bootstrapMembers() []string {
	for _, p := range d.obs.Pods {
		if p.State == "new" && p.InitialCluster != "" {
			var names []string
			for _, part := range strings.Split(p.InitialCluster, ",") {
				if name, _, ok := strings.Cut(part, "="); ok {
					names = append(names, name)
				}
			}
			return names
		}
	}
	names := make([]string, d.in.Spec.Size)
	for i := range names {
		names[i] = memberName(d.in.Base, i)
	}
	return names
}

func memberName(base string, ordinal int) string { return fmt.Sprintf("%s-%d", base, ordinal) }

// ordinal is the number at the end of a member name, -1 if none.
func ordinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil {
		return -1
	}
	return n
}

// member is a member's name: its etcd name once started, its peer host before.
func (m memberView) member() string { return firstOf(m.Name, m.PeerHost) }

// healthy: a voter is healthy when its Pod is Ready (etcd's /readyz, which
// includes a linearizable read) and it answered the operator; a learner,
// which /readyz never calls ready, when it answered.
func (d *decision) healthy(m memberView) bool {
	p := d.pods[m.member()]
	if p == nil || p.Deleting || !m.Answered {
		return false
	}
	return m.Learner || p.Ready
}

func quorum(voters int) int { return voters/2 + 1 }

// voters counts the voting members and the healthy ones among them.
func (d *decision) voters() (all, healthy int) {
	for _, m := range d.obs.Etcd.Members {
		if !m.Learner {
			all++
			if d.healthy(m) {
				healthy++
			}
		}
	}
	return all, healthy
}

func (d *decision) quorumOK() bool {
	v, h := d.voters()
	return d.obs.Etcd.Leader != "" && v > 0 && h >= quorum(v)
}

// withoutOK reports whether the cluster keeps a healthy quorum while member
// m is away (removed, or restarting for an upgrade).
func (d *decision) withoutOK(m memberView, removed bool) bool {
	if m.Learner {
		return true
	}
	v, h := d.voters()
	if d.healthy(m) {
		h--
	}
	if removed {
		v--
	}
	return h >= quorum(v)
}

// operate runs a cluster that exists: report its health, then repair,
// resize and upgrade, one step at a time.
func (d *decision) operate() step {
	etcd := d.obs.Etcd
	d.reportMembers()
	size := d.in.Spec.Size
	if etcd.Members == nil {
		return d.unavailable()
	}
	if !d.quorumOK() {
		return d.unavailable()
	}
	d.setAvailable(true, "QuorumReady", "")
	members := etcd.Members
	known := map[string]bool{}
	for _, m := range members {
		known[m.member()] = true
	}

	// Leftovers of a removed member: its Pod, then its Service.
	for _, p := range d.obs.Pods {
		if !known[p.Name] && !p.Deleting {
			return d.progress(phaseScaling, "RemovingMember", fmt.Sprintf("deleting Pod %s: its member was removed from etcd", p.Name),
				step{Action: actDeletePod, Member: p.Name})
		}
	}
	for _, s := range d.obs.Services {
		if s != d.in.Base+"-client" && !known[s] && d.pods[s] == nil {
			return d.progress(phaseScaling, "RemovingMember", fmt.Sprintf("deleting Service %s: its member was removed from etcd", s),
				step{Action: actDeleteSvc, Member: s})
		}
	}
	if !d.svcs[d.in.Base+"-client"] {
		return d.progress(phaseReplacing, "CreatingClientService", fmt.Sprintf("creating the client Service %s-client", d.in.Base),
			step{Action: actCreateClient})
	}

	// A member etcd knows but that never started: remove it if the cluster
	// is to shrink, else give it its Service and Pod.
	for _, m := range members {
		if m.Name != "" {
			continue
		}
		if p := d.pods[m.PeerHost]; p != nil {
			continue // created; etcd has not seen it start yet
		}
		if len(members) > size {
			return d.progress(phaseScaling, "RemovingMember", fmt.Sprintf("removing member %s, which never started, for spec.size %d", m.PeerHost, size),
				step{Action: actRemoveMember, Member: m.PeerHost, ID: m.ID})
		}
		return d.progress(d.phaseFor(m.PeerHost), "StartingMember", fmt.Sprintf("starting member %s (Service and Pod) to join the cluster as a learner", m.PeerHost),
			step{Action: actStartMember, Member: m.PeerHost, Image: d.image(), InitialCluster: initialClusterOf(members)})
	}

	// Repair: a started member whose Pod is gone, or Failed, is removed from
	// etcd; the resize below adds a fresh one under the same name. Only when
	// the cluster is full-sized, so that replacements go one at a time.
	if len(members) >= size {
		for _, m := range members {
			p := d.pods[m.member()]
			gone := p == nil || p.Phase == "Failed" || p.Phase == "Succeeded"
			if !gone {
				continue
			}
			why := "its Pod is gone"
			if p != nil {
				why = "its Pod is " + p.Phase
			}
			if !d.withoutOK(m, true) {
				return d.wait(phaseDegraded, "WaitingForQuorum", fmt.Sprintf("member %s must be replaced (%s), but removing it now could cost quorum", m.member(), why))
			}
			return d.progress(phaseReplacing, "ReplacingMember", fmt.Sprintf("replacing member %s (%s): removing it from etcd first", m.member(), why),
				step{Action: actRemoveMember, Member: m.member(), ID: m.ID,
					EventType: eventWarning, EventReason: reasonMemberReplaced, EventMessage: fmt.Sprintf("member %s is replaced: %s; it is removed from etcd and a new member with empty data joins under the same name", m.member(), why)})
		}
	}

	// A Pod being deleted (by someone else) takes its member away: wait for
	// it to go, then replace the member.
	for _, m := range members {
		if p := d.pods[m.member()]; p != nil && p.Deleting {
			return d.wait(phaseDegraded, "WaitingForPodDeletion", fmt.Sprintf("Pod %s is being deleted; its member is replaced once it is gone", p.Name))
		}
	}

	// A learner with a Pod is promoted; etcd refuses until it has caught up.
	for _, m := range members {
		if m.Learner {
			if len(members) > size {
				return d.progress(phaseScaling, "RemovingMember", fmt.Sprintf("removing learner %s for spec.size %d", m.member(), size),
					step{Action: actRemoveMember, Member: m.member(), ID: m.ID})
			}
			if !m.Answered {
				return d.wait(d.phaseFor(m.member()), "WaitingForLearner", fmt.Sprintf("waiting for learner %s to start: %s", m.member(), d.describe(m)))
			}
			s := step{Action: actPromote, Member: m.member(), ID: m.ID, Again: pollAgain}
			return d.progress(d.phaseFor(m.member()), "PromotingLearner", fmt.Sprintf("promoting learner %s to a voting member once it has caught up with the leader", m.member()), s)
		}
	}

	switch {
	case len(members) < size:
		name := d.nextName(members)
		if d.pods[name] != nil {
			// The Pod of a member removed before (it is being deleted):
			// the new member takes its name once it is gone.
			return d.wait(d.phaseFor(name), "WaitingForPodDeletion", fmt.Sprintf("adding member %s waits for its old Pod to be gone", name))
		}
		return d.progress(d.phaseFor(name), "AddingMember", fmt.Sprintf("adding member %s as a learner (%d of %d members)", name, len(members)+1, size),
			step{Action: actAddMember, Member: name,
				EventType: eventNormal, EventReason: reasonMemberAdded, EventMessage: fmt.Sprintf("member %s added to etcd as a learner", name)})
	case len(members) > size:
		m := d.toRemove(members)
		if !d.withoutOK(m, true) {
			return d.wait(phaseScaling, "WaitingForQuorum", fmt.Sprintf("spec.size is %d, but removing member %s now could cost quorum", size, m.member()))
		}
		if s, ok := d.leaderAway(m, phaseScaling, "removing it"); ok {
			return s
		}
		return d.progress(phaseScaling, "RemovingMember", fmt.Sprintf("removing member %s from etcd (%d of %d members)", m.member(), len(members)-1, size),
			step{Action: actRemoveMember, Member: m.member(), ID: m.ID,
				EventType: eventNormal, EventReason: reasonMemberRemoved, EventMessage: fmt.Sprintf("member %s removed from etcd for spec.size %d", m.member(), size)})
	}
	return d.upgrade()
}

// phaseFor is Replacing when a member name comes back after a removal for
// repair, Scaling otherwise.
func (d *decision) phaseFor(name string) string {
	if ordinal(name) >= 0 && ordinal(name) < d.in.Spec.Size && d.in.Prev.Phase == phaseReplacing {
		return phaseReplacing
	}
	return phaseScaling
}

// nextName is the lowest member name not in use, so that names stay
// base-0 ... base-(size-1) whatever was added and removed.
func (d *decision) nextName(members []memberView) string {
	used := map[string]bool{}
	for _, m := range members {
		used[m.member()] = true
	}
	for i := 0; ; i++ {
		if n := memberName(d.in.Base, i); !used[n] {
			return n
		}
	}
}

// toRemove picks the member to remove when shrinking: one that is not
// healthy first, then the highest ordinal, so that names stay
// NAME-0 ... NAME-(size-1).
func (d *decision) toRemove(members []memberView) memberView {
	best := -1
	score := func(m memberView) int {
		s := ordinal(m.member())
		if !d.healthy(m) {
			s += 1 << 20
		}
		return s
	}
	for i, m := range members {
		if best < 0 || score(m) > score(members[best]) {
			best = i
		}
	}
	return members[best]
}

// leaderAway returns a MoveLeader step when m, about to be removed or
// restarted, is the leader and a healthy voter can take over: a handed-over
// leadership costs clients no election timeout.
func (d *decision) leaderAway(m memberView, phase, why string) (step, bool) {
	if m.ID != d.obs.Etcd.Leader {
		return step{}, false
	}
	for _, o := range d.obs.Etcd.Members {
		if o.ID != m.ID && !o.Learner && d.healthy(o) {
			msg := fmt.Sprintf("handing leadership from %s to %s before %s", m.member(), o.member(), why)
			return d.progress(phase, "MovingLeader", msg, step{Action: actMoveLeader, Member: o.member(), ID: o.ID, Again: pollAgain}), true
		}
	}
	return step{}, false
}

// initialClusterOf is --initial-cluster for a joining member: every member
// etcd has, by name and peer URL.
func initialClusterOf(members []memberView) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = fmt.Sprintf("%s=http://%s:%d", m.member(), m.PeerHost, peerPort)
	}
	return strings.Join(parts, ",")
}

// upgrade rolls the members to spec.version one at a time, the leader last.
func (d *decision) upgrade() step {
	target := d.in.Repo + ":" + d.in.Spec.Version
	if reason := d.versionRefused(); reason != "" {
		d.st.Phase, d.st.Message = d.steadyPhase(), reason
		d.setProgressing(false, "VersionRefused", reason)
		return step{}
	}
	want := strings.TrimPrefix(d.in.Spec.Version, "v")
	members := d.obs.Etcd.Members
	var todo []memberView
	for _, m := range members {
		p := d.pods[m.member()]
		if p == nil {
			return d.wait(phaseDegraded, "WaitingForMember", fmt.Sprintf("member %s has no Pod", m.member()))
		}
		if p.Image != target {
			todo = append(todo, m)
			continue
		}
		if d.healthy(m) && (m.Version == want || !isVersion(d.in.Spec.Version)) {
			continue
		}
		if d.prevVersion(m.member()) == want {
			continue // upgraded before, and down since: the kubelet's to restart
		}
		// Patched, not back yet. A kubelet that cannot run the image
		// stops the rollout here; the rest of the cluster is untouched.
		if stalled(p) {
			msg := fmt.Sprintf("upgrade stopped at member %s: the kubelet says %s: %s; the other members keep running; set spec.version back to repair it", m.member(), p.Waiting, p.WaitingMessage)
			d.st.Phase, d.st.Message = phaseDegraded, msg
			d.setProgressing(false, "UpgradeStalled", msg)
			d.setDegraded(true, "UpgradeStalled", msg)
			return step{}
		}
		return d.wait(phaseUpgrading, "Upgrading", fmt.Sprintf("upgrading to %s: waiting for member %s to come back and report %s (%d of %d done)", d.in.Spec.Version, m.member(), want, len(members)-len(todo)-1, len(members)))
	}
	if len(todo) == 0 {
		return d.steady()
	}
	// Members the kubelet could not restart go first (setting spec.version
	// back repairs them); then the others by name, the leader last.
	slices.SortStableFunc(todo, func(a, b memberView) int {
		rank := func(m memberView) int {
			switch {
			case !d.healthy(m):
				return 0
			case m.ID == d.obs.Etcd.Leader:
				return 2
			}
			return 1
		}
		if r := rank(a) - rank(b); r != 0 {
			return r
		}
		return ordinal(a.member()) - ordinal(b.member())
	})
	m := todo[0]
	if v, _ := d.voters(); v < 3 && d.healthy(m) {
		msg := fmt.Sprintf("spec.version %s waits: a cluster of %d voting members loses its quorum while one of them restarts; set spec.size to 3 or more to upgrade it without downtime", d.in.Spec.Version, v)
		d.st.Phase, d.st.Message = d.steadyPhase(), msg
		d.setProgressing(false, "UpgradeNeedsMembers", msg)
		return step{}
	}
	if !d.withoutOK(m, false) {
		return d.wait(phaseDegraded, "WaitingForHealth", fmt.Sprintf("upgrading to %s waits: restarting member %s now could cost quorum", d.in.Spec.Version, m.member()))
	}
	if s, ok := d.leaderAway(m, phaseUpgrading, "restarting it with "+d.in.Spec.Version); ok {
		return s
	}
	msg := fmt.Sprintf("upgrading member %s to %s (%d of %d done)", m.member(), d.in.Spec.Version, len(members)-len(todo), len(members))
	return d.progress(phaseUpgrading, "Upgrading", msg, step{Action: actUpgrade, Member: m.member(), Image: target,
		EventType: eventNormal, EventReason: reasonMemberUpgraded, EventMessage: fmt.Sprintf("member %s: image changed to %s; the kubelet restarts it with its data", m.member(), target)})
}

// prevVersion is the version the last status reported for a member.
func (d *decision) prevVersion(name string) string {
	for _, m := range d.in.Prev.Members {
		if m.Name == name {
			return m.Version
		}
	}
	return ""
}

// stalled reports a container the kubelet cannot (re)start by itself soon.
func stalled(p *podView) bool {
	switch p.Waiting {
	case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerError", "CreateContainerConfigError", "CrashLoopBackOff":
		return true
	}
	return false
}

// versionRefused says why spec.version cannot be rolled out, if it cannot:
// etcd upgrades one minor version at a time and this operator does not
// downgrade.
func (d *decision) versionRefused() string {
	cur := d.st.CurrentVersion
	if cur == "" {
		return ""
	}
	target := d.in.Spec.Version
	tv, ok := parseVersion(target)
	cv, _ := parseVersion(cur)
	if !ok {
		// A tag that is no version (a digest-like or "latest") cannot be
		// checked; it is refused unless every member already runs it.
		for _, p := range d.obs.Pods {
			if p.Image != d.in.Repo+":"+target {
				return fmt.Sprintf("spec.version %s refused: not a version like v%d.%d.%d, so the upgrade cannot be checked; the cluster keeps running %s", target, cv[0], cv[1], cv[2], cur)
			}
		}
		return ""
	}
	switch {
	case tv[0] != cv[0] || tv[1] > cv[1]+1:
		return fmt.Sprintf("spec.version %s refused: etcd upgrades one minor version at a time, and the cluster runs %s; go to v%d.%d.x first", target, cur, cv[0], cv[1]+1)
	case tv[1] < cv[1]:
		return fmt.Sprintf("spec.version %s refused: the cluster runs %s, and downgrades are not supported by this operator", target, cur)
	}
	return ""
}

// parseVersion reads v3.6.16 or 3.6.16.
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func isVersion(s string) bool { _, ok := parseVersion(s); return ok }

// image is the image of a new member: spec.version, unless that version is
// refused, when new members run what the cluster runs.
func (d *decision) image() string {
	if d.st.CurrentVersion != "" && d.versionRefused() != "" {
		for _, p := range d.obs.Pods {
			if p.Ready {
				return p.Image
			}
		}
	}
	return d.in.Repo + ":" + d.in.Spec.Version
}

// steady reports a cluster with nothing to do: Running, or Degraded while
// the kubelet restarts a member (restartPolicy Always keeps its data).
func (d *decision) steady() step {
	d.setProgressing(false, "Idle", "")
	var unready []string
	for _, m := range d.obs.Etcd.Members {
		if !d.healthy(m) {
			unready = append(unready, d.describe(m))
		}
	}
	if len(unready) > 0 {
		msg := fmt.Sprintf("%d of %d members ready; not ready: %s; the kubelet restarts a crashed member in its Pod, with its data", d.st.ReadyMembers, len(d.obs.Etcd.Members), strings.Join(unready, "; "))
		d.st.Phase, d.st.Message = phaseDegraded, msg
		d.setDegraded(true, "MemberUnready", msg)
		return step{}
	}
	d.st.Phase = phaseRunning
	d.st.Message = fmt.Sprintf("%d members ready, running etcd %s; clients use Service %s-client", len(d.obs.Etcd.Members), d.st.CurrentVersion, d.in.Base) + d.namesNote()
	d.setDegraded(false, "AllMembersReady", "")
	return step{}
}

func (d *decision) steadyPhase() string {
	if d.st.ReadyMembers < len(d.obs.Etcd.Members) {
		return phaseDegraded
	}
	return phaseRunning
}

// unavailable reports a cluster without a quorum. Nothing is changed: with
// data on emptyDir, etcd cannot rebuild a quorum from fewer members, and a
// membership change needs the quorum it lacks.
func (d *decision) unavailable() step {
	size := max(len(d.obs.Etcd.Members), len(d.in.Prev.Members), 1)
	answering := d.obs.Etcd.Answered
	var msg, reason string
	switch {
	case d.obs.Etcd.AnsweredVoters >= quorum(size) && len(d.obs.Pods) > 0:
		// Enough members answer, but none knows a leader: an election is
		// under way (a leader died or stepped down). Look again soon.
		msg = fmt.Sprintf("no leader yet: %d of %d members answer, and etcd is electing one (%s)", answering, size, d.podSummary(d.memberNames()))
		d.st.Phase, d.st.Message = phaseDegraded, msg
		d.setAvailable(false, "NoLeader", msg)
		d.setProgressing(false, "NoLeader", "no membership change without a leader")
		d.setDegraded(true, "NoLeader", msg)
		return step{Again: pollAgain}
	case len(d.obs.Pods) == 0:
		reason = "DataLost"
		msg = fmt.Sprintf("all %d members are gone and their data with them (emptyDir): etcd cannot recover by itself. Delete this EtcdCluster and create it again, then restore your data from a backup (etcdctl snapshot restore)", size)
	default:
		reason = "QuorumLost"
		msg = fmt.Sprintf("quorum lost: %d of %d members answer, %d needed (%s). etcd cannot recover by itself with its data on emptyDir; if the missing members come back, the cluster recovers without help. Otherwise delete this EtcdCluster and create it again from a backup (etcdctl snapshot restore)",
			answering, size, quorum(size), d.podSummary(d.memberNames()))
	}
	d.st.Phase, d.st.Message = phaseUnavailable, msg
	d.setAvailable(false, reason, msg)
	d.setProgressing(false, reason, "no membership change without a quorum")
	d.setDegraded(true, reason, msg)
	return step{}
}

func (d *decision) memberNames() []string {
	var names []string
	for _, m := range d.st.Members {
		names = append(names, m.Name)
	}
	return names
}

// podSummary says how each named member's Pod is doing.
func (d *decision) podSummary(names []string) string {
	var parts []string
	for _, n := range names {
		p := d.pods[n]
		switch {
		case p == nil:
			parts = append(parts, n+" has no Pod")
		case p.Deleting:
			parts = append(parts, n+" is being deleted")
		case p.Waiting != "":
			parts = append(parts, n+" "+p.Waiting)
		case d.obs.Etcd.AnsweredPods != nil && !slices.Contains(d.obs.Etcd.AnsweredPods, n):
			parts = append(parts, n+" does not answer (Pod "+p.Phase+")")
		case p.Ready:
			parts = append(parts, n+" ready")
		default:
			parts = append(parts, n+" "+p.Phase+", not ready")
		}
	}
	return strings.Join(parts, ", ")
}

func (d *decision) describe(m memberView) string {
	return d.podSummary([]string{m.member()})
}

// reportMembers fills the status's member list, ready count and version.
func (d *decision) reportMembers() {
	etcd := d.obs.Etcd
	if etcd.Members == nil {
		// No leader to list members: keep the last list. Without a leader
		// etcd serves no reads or writes, so no member is ready, whatever a
		// Pod's Ready condition still says (the kubelet probes every 2 s).
		for _, m := range d.in.Prev.Members {
			m.Ready, m.Leader = false, false
			d.st.Members = append(d.st.Members, m)
		}
		d.st.CurrentVersion = d.in.Prev.CurrentVersion
		return
	}
	lowest := ""
	for _, m := range etcd.Members {
		ms := memberStatus{Name: m.member(), ID: hexID(m.ID), Ready: d.healthy(m) && !m.Learner, Leader: m.ID == etcd.Leader, Learner: m.Learner, Version: m.Version}
		d.st.Members = append(d.st.Members, ms)
		if ms.Ready {
			d.st.ReadyMembers++
		}
		if m.Version != "" && (lowest == "" || versionLess(m.Version, lowest)) {
			lowest = m.Version
		}
	}
	// The cluster's version is its lowest member's, as etcd's own cluster
	// version is.
	d.st.CurrentVersion = firstOf(lowest, d.in.Prev.CurrentVersion)
}

// hexID writes a member ID the way etcdctl prints it.
func hexID(decimal string) string {
	n, err := strconv.ParseUint(decimal, 10, 64)
	if err != nil {
		return decimal
	}
	return strconv.FormatUint(n, 16)
}

func versionLess(a, b string) bool {
	va, _ := parseVersion(a)
	vb, _ := parseVersion(b)
	return slices.Compare(va[:], vb[:]) < 0
}

// progress reports a step about to be taken.
func (d *decision) progress(phase, reason, msg string, s step) step {
	d.st.Phase, d.st.Message = phase, msg
	d.setProgressing(true, reason, msg)
	return s
}

// wait reports a step that waits for something to change; a pass comes
// back by itself after a while, since some of it (etcd catching up) shows
// in no Kubernetes object.
func (d *decision) wait(phase, reason, msg string) step {
	d.st.Phase, d.st.Message = phase, msg
	d.setProgressing(true, reason, msg)
	return step{Again: pollAgain}
}

func (d *decision) setAvailable(ok bool, reason, msg string) {
	d.available, d.availReason, d.availMsg = ok, reason, msg
}
func (d *decision) setProgressing(ok bool, reason, msg string) {
	d.progressing, d.progReason, d.progMsg = ok, reason, msg
}
func (d *decision) setDegraded(ok bool, reason, msg string) {
	d.degraded, d.degrReason, d.degrMsg = ok, reason, msg
}

// finish fills in the conditions and the READY column.
func (d *decision) finish() {
	st := &d.st
	n := max(len(st.Members), d.in.Spec.Size)
	if len(d.obs.Etcd.Members) > 0 {
		n = len(d.obs.Etcd.Members)
	}
	st.Ready = fmt.Sprintf("%d/%d", st.ReadyMembers, n)
	if d.availMsg == "" && d.available {
		d.availMsg = fmt.Sprintf("%d of %d voting members ready, a quorum", st.ReadyMembers, n)
	}
	if d.degrReason == "" {
		if st.ReadyMembers < d.in.Spec.Size && d.in.Invalid == "" && st.Phase != phaseCreating {
			d.setDegraded(true, "MemberUnready", fmt.Sprintf("%d of %d members ready", st.ReadyMembers, d.in.Spec.Size))
		} else {
			d.setDegraded(false, "AllMembersReady", "")
		}
	}
	st.Conditions = []condition{
		d.condition(condAvailable, d.available, d.availReason, d.availMsg),
		d.condition(condProgressing, d.progressing, d.progReason, d.progMsg),
		d.condition(condDegraded, d.degraded, d.degrReason, d.degrMsg),
	}
}

// condition keeps lastTransitionTime from the previous status while the
// condition's status is unchanged; "" asks the caller to stamp the time.
func (d *decision) condition(typ string, ok bool, reason, msg string) condition {
	c := condition{Type: typ, Status: "False", Reason: reason, Message: msg, ObservedGeneration: d.in.Gen}
	if ok {
		c.Status = "True"
	}
	if c.Reason == "" {
		c.Reason = "None"
	}
	for _, p := range d.in.Prev.Conditions {
		if p.Type == typ && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
		}
	}
	return c
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
