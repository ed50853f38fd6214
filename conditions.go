// Conditions: what decide tells the user, as pure functions.
//
// Kubernetes API conventions give a custom resource's status two kinds of
// news: a phase and a message for people (`kubectl get` shows the phase,
// `kubectl describe` the message), and conditions for tools (`kubectl wait
// --for=condition=Available`). Each condition has a CamelCase reason that
// tools can match, and a lastTransitionTime that moves only when its status
// flips. An etcd operator's user needs three: Available (a quorum serves),
// Progressing (a step is under way, or why none can be), Degraded (a member
// is missing or unready). Every reason is a constant below.
package main

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

// Phases of an EtcdCluster: one word for `kubectl get`.
const (
	phaseCreating    = "Creating"    // bootstrapping, not yet answering
	phaseRunning     = "Running"     // available, every member ready, nothing to do
	phaseScaling     = "Scaling"     // adding or removing a member for spec.size
	phaseReplacing   = "Replacing"   // replacing a member whose Pod is gone
	phaseUpgrading   = "Upgrading"   // rolling to spec.version
	phaseExpanding   = "Expanding"   // growing the members' volumes to spec.storage.size
	phaseRotating    = "Rotating"    // restarting members one at a time for a new CA
	phaseDegraded    = "Degraded"    // available, but a member is missing or unready
	phaseUnavailable = "Unavailable" // quorum lost, or every member gone
	phaseFailed      = "Failed"      // someone has to act: the message says what
	phaseDeleting    = "Deleting"    // the EtcdCluster is being deleted
)

// Condition types.
const (
	condAvailable   = "Available"
	condProgressing = "Progressing"
	condDegraded    = "Degraded"
)

// Reasons of conditions and Events.
const (
	reasonQuorumReady           = "QuorumReady"
	reasonNotStarted            = "NotStarted"
	reasonNoLeader              = "NoLeader"
	reasonQuorumLost            = "QuorumLost"
	reasonDataLost              = "DataLost"
	reasonInvalidSpec           = "InvalidSpec"
	reasonCreating              = "Creating"
	reasonWaitingForMembers     = "WaitingForMembers"
	reasonRemovingMember        = "RemovingMember"
	reasonCreatingClientService = "CreatingClientService"
	reasonStartingMember        = "StartingMember"
	reasonReplacingMember       = "ReplacingMember"
	reasonWaitingForQuorum      = "WaitingForQuorum"
	reasonWaitingForPodDeletion = "WaitingForPodDeletion"
	reasonWaitingForLearner     = "WaitingForLearner"
	reasonPromotingLearner      = "PromotingLearner"
	reasonAddingMember          = "AddingMember"
	reasonMovingLeader          = "MovingLeader"
	reasonVersionRefused        = "VersionRefused"
	reasonWaitingForMember      = "WaitingForMember"
	reasonUpgradeStalled        = "UpgradeStalled"
	reasonUpgrading             = "Upgrading"
	reasonUpgradeNeedsMembers   = "UpgradeNeedsMembers"
	reasonWaitingForHealth      = "WaitingForHealth"
	reasonIdle                  = "Idle"
	reasonMemberUnready         = "MemberUnready"
	reasonAllMembersReady       = "AllMembersReady"
	reasonStepFailed            = "StepFailed"
	reasonDeleting              = "Deleting"
	reasonRepairingImage        = "RepairingImage"
	reasonVersionCannotRun      = "VersionCannotRun"
	reasonPodStuck              = "PodStuck"
	reasonRestartingMember      = "RestartingMember"
	reasonWaitingForClaim       = "WaitingForClaimDeletion"
	reasonExpandingVolume       = "ExpandingVolume"
	reasonRestoreFailed         = "RestoreFailed"
	reasonBadSecret             = "BadSecret"
	reasonRenewingCertificate   = "RenewingCertificate"
	reasonTLSSwitchUnsupported  = "TLSSwitchUnsupported"
	reasonEnablingAuth          = "EnablingAuth"
	reasonRotatingCredentials   = "RotatingCredentials"
	reasonRotatingCA            = "RotatingCA"
	reasonRotationNeedsMembers  = "RotationNeedsMembers"

	// Events only.
	reasonClusterCreated     = "ClusterCreated"
	reasonMemberCreated      = "MemberCreated"
	reasonMemberAdded        = "MemberAdded"
	reasonMemberRemoved      = "MemberRemoved"
	reasonMemberReplaced     = "MemberReplaced"
	reasonMemberUpgraded     = "MemberUpgraded"
	reasonMemberPromoted     = "MemberPromoted"
	reasonMemberRestarted    = "MemberRestarted"
	reasonCertificateRenewed = "CertificateRenewed"
	reasonAuthEnabled        = "AuthEnabled"
	reasonCredentialsRotated = "CredentialsRotated"
	reasonCredentialsRetired = "CredentialsRetired"
	reasonCARotationStarted  = "CARotationStarted"
	reasonCASwitched         = "CASwitched"
	reasonCARetired          = "CARetired"
)

// steady: nothing to do: Running, or Degraded while the kubelet restarts a
// member (restartPolicy Always keeps its data).
func (d *decision) steady() step {
	d.setProgressing(false, reasonIdle, "")
	var unready []string
	for _, m := range d.obs.Etcd.Members {
		if !d.healthy(m) {
			unready = append(unready, d.describe(m))
		}
	}
	if len(unready) > 0 {
		msg := fmt.Sprintf("%d of %d members ready; not ready: %s; the kubelet restarts a crashed member in its Pod, with its data", d.st.ReadyMembers, len(d.obs.Etcd.Members), strings.Join(unready, "; "))
		d.st.Phase, d.st.Message = phaseDegraded, msg
		d.setDegraded(true, reasonMemberUnready, msg)
		return step{}
	}
	d.st.Phase = phaseRunning
	d.st.Message = fmt.Sprintf("%d members ready, running etcd %s; clients use Service %s", len(d.obs.Etcd.Members), d.st.CurrentVersion, d.clientService()) + d.namesNote()
	if d.in.Spec.Storage.EmptyDir {
		d.st.Message += "; data on emptyDir: a member's data goes with its Pod"
	}
	d.setDegraded(false, reasonAllMembersReady, "")
	if d.versionBehind {
		return step{Again: pollAgain} // until etcd raises its cluster version
	}
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
	size := d.lastVoters()
	if d.obs.Etcd.AnsweredVoters >= quorum(size) && len(d.obs.Pods) > 0 {
		// Enough members answer, but none knows a leader: an election is
		// under way (a leader died or stepped down). Look again soon.
		msg := fmt.Sprintf("no leader yet: %d of %d voting members answer, and etcd is electing one (%s)", d.obs.Etcd.AnsweredVoters, size, d.podSummary(d.memberNames()))
		d.st.Phase, d.st.Message = phaseDegraded, msg
		d.setAvailable(false, reasonNoLeader, msg)
		d.setProgressing(false, reasonNoLeader, "no membership change without a leader")
		d.setDegraded(true, reasonNoLeader, msg)
		return step{Again: pollAgain}
	}
	reason, msg := d.quorumLost(size)
	d.st.Phase, d.st.Message = phaseUnavailable, msg
	d.setAvailable(false, reason, msg)
	d.setProgressing(false, reason, "no membership change without a quorum")
	d.setDegraded(true, reason, msg)
	return step{}
}

// lastVoters is how many members vote, as far as anyone can tell: learners
// make no quorum. Without a leader, a member's own list says who they are,
// or else the last status's list.
func (d *decision) lastVoters() int {
	size := 0
	for _, m := range d.in.Prev.Members {
		if !m.Learner && d.obs.Etcd.Listed == nil {
			size++
		}
	}
	for _, m := range d.obs.Etcd.Listed {
		if !m.Learner {
			size++
		}
	}
	return max(size, 1)
}

// quorumLost says why a cluster of size voters has no quorum, and whether
// it can come back by itself.
func (d *decision) quorumLost(size int) (reason, msg string) {
	switch {
	case d.allOnVolumes():
		count, names := fmt.Sprintf("%d of %d voting members answer, %d needed", d.obs.Etcd.AnsweredVoters, size, quorum(size)), d.memberNames()
		if d.obs.Etcd.Listed == nil {
			// No member answers: how many vote is written on their
			// volumes, and the last status may be out of date or lost.
			count, names = "no member answers", podNames(d.obs.Pods)
		}
		return reasonQuorumLost, fmt.Sprintf("quorum lost: %s (%s). The members are coming back: their data is safe on their volumes, and each rejoins as itself once it runs again (the kubelet restarts a crashed member; the operator makes a deleted Pod again). Nothing is lost",
			count, d.podSummary(names))
	case len(d.obs.Pods) == 0:
		where := "emptyDir"
		if !d.in.Spec.Storage.EmptyDir {
			where = "their volume claims deleted or lost"
		}
		return reasonDataLost, fmt.Sprintf("all %d members are gone and their data with them (%s): etcd cannot recover by itself. Delete this EtcdCluster and create it again, from a backup (spec.restore names one)", size, where)
	case d.obs.Etcd.Listed == nil && d.obs.Etcd.Answered == 0:
		// No member answers: etcd says nothing of who the members are.
		return reasonQuorumLost, fmt.Sprintf("quorum lost: no member answers (%s). etcd cannot recover by itself with its data on emptyDir; if the missing members come back, the cluster recovers without help. Otherwise delete this EtcdCluster and create it again from a backup (spec.restore names one)", d.podSummary(podNames(d.obs.Pods)))
	default:
		return reasonQuorumLost, fmt.Sprintf("quorum lost: %d of %d voting members answer, %d needed (%s). etcd cannot recover by itself with its data on emptyDir; if the missing members come back, the cluster recovers without help. Otherwise delete this EtcdCluster and create it again from a backup (spec.restore names one)",
			d.obs.Etcd.AnsweredVoters, size, quorum(size), d.podSummary(d.memberNames()))
	}
}

func podNames(pods []podView) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
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
		case p.Init != "":
			parts = append(parts, n+" "+p.Init)
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
		list := etcd.Listed
		if list == nil {
			for _, m := range d.in.Prev.Members {
				list = append(list, memberView{Name: m.Name})
			}
		}
		if v := d.lowestVersion(list); v != "" && versionLess(v, d.st.CurrentVersion) {
			d.st.CurrentVersion = v
		}
		return
	}
	for _, m := range etcd.Members {
		// A member down keeps the version it last reported.
		ms := memberStatus{Name: m.member(), ID: hexID(m.ID), Ready: d.healthy(m) && !m.Learner, Leader: m.ID == etcd.Leader, Learner: m.Learner, Version: cmp.Or(m.Version, d.prevVersion(m.member()))}
		d.st.Members = append(d.st.Members, ms)
		if ms.Ready {
			d.st.ReadyMembers++
		}
	}
	lowest := d.lowestVersion(etcd.Members)
	// The cluster's version is its lowest member's, as etcd's own cluster
	// version is; and no higher than etcd's cluster version, which lags
	// the members' by a few seconds after an upgrade.
	d.st.CurrentVersion = cmp.Or(lowest, d.in.Prev.CurrentVersion)
	if cv := etcd.ClusterVersion; cv == lowest && cv != "" {
		for _, m := range etcd.Members {
			d.versionBehind = d.versionBehind || minorLess(cv, m.Version)
		}
	}
}

// lowestVersion is the lowest version among members, those down included:
// etcd's cluster version does not move while one is down either.
func (d *decision) lowestVersion(members []memberView) string {
	lowest := ""
	for _, m := range members {
		// A member that does not answer counts with the lower of the
		// version it last reported and its Pod's image's (if that pulls):
		// an upgrade counts once it reports, a rollback at once.
		v := cmp.Or(m.Version, d.prevVersion(m.member()))
		if p := d.pods[m.member()]; m.Version == "" && p != nil && !neverPulled(p) && isVersion(imageVersion(p.Image)) && (v == "" || versionLess(imageVersion(p.Image), v)) {
			v = imageVersion(p.Image)
		}
		if v != "" && (lowest == "" || versionLess(v, lowest)) {
			lowest = v
		}
	}
	// A silent member whose version is not known (a lost status, an
	// image that never pulled) still holds the cluster version down.
	if cv := d.obs.Etcd.ClusterVersion; cv != "" && lowest != "" && minorLess(cv, lowest) {
		lowest = cv
	}
	return lowest
}

// hexID writes a member ID the way etcdctl prints it.
func hexID(decimal string) string {
	n, err := strconv.ParseUint(decimal, 10, 64)
	if err != nil {
		return decimal
	}
	return strconv.FormatUint(n, 16)
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
		unhealthy := slices.ContainsFunc(d.obs.Etcd.Members, func(m memberView) bool { return !d.healthy(m) })
		if (st.ReadyMembers < d.in.Spec.Size || unhealthy) && d.in.Invalid == "" && st.Phase != phaseCreating {
			d.setDegraded(true, reasonMemberUnready, fmt.Sprintf("%d of %d members ready", st.ReadyMembers, d.in.Spec.Size))
		} else {
			d.setDegraded(false, reasonAllMembersReady, "")
		}
	}
	st.Conditions = []condition{
		d.condition(condAvailable, d.available, d.availReason, d.availMsg),
		d.condition(condProgressing, d.progressing, d.progReason, d.progMsg),
		d.condition(condDegraded, d.degraded, d.degrReason, d.degrMsg),
	}
}

// condition keeps lastTransitionTime from the previous status while the
// condition's status is unchanged; "" asks the writer to stamp the time.
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

// cannotProceed is a Warning Event for what the operator refuses or cannot
// help with: news for the user once, when it starts.
func (d *decision) cannotProceed() []notice {
	if !warns(d.progReason) {
		return nil
	}
	if old, _ := d.in.Prev.condition(condProgressing); old.Reason == d.progReason && d.in.Prev.ObservedGeneration == d.in.Gen {
		return nil
	}
	return []notice{{eventWarning, d.progReason, d.st.Message}}
}

// warns reports the Progressing reasons that get a Warning Event.
func warns(reason string) bool {
	switch reason {
	case reasonVersionRefused, reasonUpgradeStalled, reasonUpgradeNeedsMembers, reasonQuorumLost, reasonDataLost, reasonVersionCannotRun, reasonRestoreFailed:
		return true
	}
	return false
}

// failed is the status of a failed observation or step, from st (what
// decide said, or the last status), and its Warning Event. Failed is for
// what someone has to fix (a 403, a name taken); otherwise the phase stays
// and the message says what is retried.
func failed(st clusterStatus, what string, err error) (clusterStatus, []notice) {
	st.Message = fmt.Sprintf("%s: %v (will retry)", what, err)
	if errors.Is(err, errNameTaken) || !transient(err) {
		st.Phase = phaseFailed
	}
	st.Conditions = slices.Clone(st.Conditions)
	for i, c := range st.Conditions {
		if c.Type == condProgressing {
			if c.Status != "True" {
				st.Conditions[i].LastTransitionTime = ""
			}
			st.Conditions[i].Status, st.Conditions[i].Reason, st.Conditions[i].Message = "True", reasonStepFailed, st.Message
		}
	}
	return st, []notice{{eventWarning, reasonStepFailed, st.Message}}
}

// transient reports whether an error may pass by itself: the API server
// busy or unreachable, rather than refusing.
func transient(err error) bool {
	var apiErr *kube.Error
	if errors.As(err, &apiErr) {
		return apiErr.Code >= 500 || apiErr.Code == http.StatusTooManyRequests
	}
	return !errors.Is(err, errNameTaken)
}
