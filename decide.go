// Decide: what the cluster needs next, as a pure function.
//
// An operator is observe -> decide -> act. observe.go looks (the member
// Pods, Services and PVCs from the watches' cache, etcd itself through the
// Pods' proxy subresource) and act.go sends; this file only decides. decide
// takes the EtcdCluster (its spec and the status last written) and what was
// observed, and returns the status to report, the Events to record, and one
// next step with every request it needs. It reads no clock and sends no
// request, so a table test covers every rule, a simulation can drive it
// through faults (sim_test.go), and a pass that dies after any request is
// simply followed by another that observes what the first one left.
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
// decide is a ladder: the first rule that has something to do decides.
// The lists in ladder and operate below are the ladder, in its order; each
// rule's comment says what it does. In words: a spec that cannot be read
// (invalidSpec) or a cluster being deleted (beingDeleted) changes nothing.
// A cluster that never formed is bootstrapped (bootstrap; a restored one
// only once its backup was found good, checkRestore in restore.go). Once
// it formed: repairImages, restartOnVolumes (volumes.go), needQuorum,
// removeLeftovers, createClientService, learners, replaceLostMembers,
// resize, upgrade (upgrade.go) and expandVolumes (volumes.go), then steady
// (conditions.go) when none has anything to do; markFormed records the
// cluster ID the first time etcd gives one.
//
// Repair before resize, because a cluster one member short tolerates one
// failure less; resize before upgrade, because a rolling upgrade of a
// full-sized cluster never takes more than one member away. Members back
// on their volumes come before needQuorum, since they are how a cluster on
// volumes gets its quorum back.
package main

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// podView is what a pass saw of one member Pod.
type podView struct {
	Name     string
	Phase    string // Pending, Running, Succeeded or Failed
	Ready    bool   // the Pod's Ready condition: etcd's /readyz passes
	Deleting bool   // metadata.deletionTimestamp is set
	// Overdue: a deletion whose grace period ended long ago; its node is
	// gone or cut off, and the Pod may stay Terminating for good.
	Overdue bool
	Image   string
	// Waiting is the kubelet's reason for a container that is not running
	// (ImagePullBackOff, CrashLoopBackOff, ...), with its message.
	Waiting, WaitingMessage string
	// Init is why an init container does not run, if one does not.
	Init string
	// InitialCluster and State are the etcd flags the Pod was created
	// with: they tell a bootstrap Pod (state "new") from a joining one.
	InitialCluster, State string
	// TLS: etcd runs with the TLS flags of spec.tls (tls.go).
	TLS bool
	// Claim is the PVC holding the member's data; "" on emptyDir.
	Claim string
	// DataLost is what etcd said as it last exited, when that shows its
	// data is lost or damaged (observe.go's dataLostSigns).
	DataLost string
	// Trust is the ca.Fingerprint of the CAs etcd trusts, from the
	// Pod's annotation (carotation.go).
	Trust string
}

// memberView is one etcd member as the leader's member list shows it,
// with what the member itself answered.
type memberView struct {
	ID       string // 64-bit member ID, as the JSON gateway writes it: decimal
	Name     string // empty until the member has started
	PeerHost string // host of its peer URL: the member's Pod and Service name
	// PeerHTTPS: its peer URL is https (spec.tls).
	PeerHTTPS bool
	Learner   bool
	Answered  bool   // it answered /v3/maintenance/status
	Version   string // etcd's version, as it reported it (3.6.16)
}

// etcdView is what etcd said during one pass.
type etcdView struct {
	ClusterID string // from any member that answered
	Leader    string // member ID of the leader, if any member knows one
	// Members is the leader's member list; nil when no leader answered.
	// Listed is a member list all the same: the leader's, or without a
	// leader, one member's own view; nil when no member answered.
	Members, Listed []memberView
	// Answered counts the members that answered at all; AnsweredVoters
	// those of them that vote (learners do not).
	Answered, AnsweredVoters int
	// LeaderPod is the leader's Pod: where membership changes are sent.
	LeaderPod string
	// AnsweredPods are the Pods whose etcd answered; nil when none was
	// asked (no Pod running).
	AnsweredPods []string
	// ClusterVersion is etcd's cluster version (major.minor.0), asked
	// only while a listed member does not answer.
	ClusterVersion string
	// Auth is the leader's word on authentication, asked with spec.tls
	// only (auth.go); nil when not asked or not answered.
	Auth *authView
}

// observed is everything a pass saw of one cluster.
type observed struct {
	Pods     []podView
	Services []string    // member and client Services that exist
	Claims   []claimView // the members' PVCs (volumes.go)
	Etcd     etcdView
	// Restore is what a pass found reading spec.restore's backup, when it
	// had to (restore.go).
	Restore *restoreCheck
	// TLS is what the cluster's Secrets hold, read with spec.tls or while
	// a member runs TLS (tls.go); nil otherwise.
	TLS *tlsView
	// Now is when the pass looked, for what the step records of time.
	Now time.Time
}

// input is the EtcdCluster as decide needs it.
type input struct {
	Name, Namespace, UID string
	Spec                 clusterSpec
	Invalid              string // why the spec cannot be read, if it cannot
	Prev                 clusterStatus
	Gen                  int64
	Repo                 string        // image repository: the tag is spec.version
	OperatorImage        string        // this operator's image, for a restored member's init containers
	SecretSync           time.Duration // -secret-sync (carotation.go); 0 for its default
	Base                 string        // baseName of the EtcdCluster: the prefix of its objects
	Deleting             bool          // metadata.deletionTimestamp is set
	// FormedID is the cluster ID recorded in the EtcdCluster's metadata
	// once the cluster formed (annotationClusterID): unlike the status, a
	// status write cannot lose it.
	FormedID string
}

func newInput(ec *EtcdCluster, repo string) input {
	in := input{Name: ec.Metadata.Name, Namespace: ec.Metadata.Namespace, UID: ec.Metadata.UID,
		Prev: ec.status(), Gen: ec.Metadata.Generation, Repo: repo, Base: baseName(ec.Metadata.Name),
		Deleting: ec.Metadata.DeletionTimestamp != "", FormedID: ec.Metadata.Annotations[annotationClusterID]}
	var err error
	if in.Spec, err = parseSpec(ec.Spec); err != nil {
		in.Invalid = err.Error()
	}
	return in
}

// Actions a step can take.
const (
	actNone          = ""
	actBootstrap     = "Bootstrap"    // create the missing Services, then Pods, of a new cluster
	actCreateClient  = "CreateClient" // create the client Service
	actAddMember     = "AddMember"    // add a learner to etcd
	actStartMember   = "StartMember"  // create the Service and Pod of a member etcd knows
	actPromote       = "Promote"      // make a learner a voter
	actRemoveMember  = "RemoveMember" // remove a member from etcd
	actDeletePod     = "DeletePod"
	actDeleteSvc     = "DeleteService"
	actUpgrade       = "Upgrade"       // change a member Pod's image in place
	actMoveLeader    = "MoveLeader"    // hand leadership to another member first
	actMarkFormed    = "MarkFormed"    // record the cluster ID in the EtcdCluster's annotations
	actRestartMember = "RestartMember" // make a member's Pod again on its volume
	actDeleteClaim   = "DeleteClaim"
	actExpandVolume  = "ExpandVolume" // ask for a larger PVC

	actCreateCA         = "CreateCA"         // make the cluster's CA (tls.go)
	actIssueCertificate = "IssueCertificate" // create a member's certificate Secret
	actRenewCertificate = "RenewCertificate" // new key and certificate into it
	actAddRootUser      = "AddRootUser"      // etcd's user root (auth.go)
	actGrantRoot        = "GrantRootRole"
	actCreateRootSecret = "CreateRootSecret" // the root password's Secret
	actEnableAuth       = "EnableAuth"

	actPrepareCredentials = "PrepareCredentials" // a rotation's new user and password into BASE-root (credentials.go)
	actAddUser            = "AddUser"
	actGrantUser          = "GrantUser"
	actSwitchCredentials  = "SwitchCredentials"
	actRetireUser         = "RetireUser"

	actPrepareCA    = "PrepareCA" // a CA rotation's new CA into BASE-ca (carotation.go)
	actTrustCA      = "TrustCA"   // the CAs to trust into BASE-root
	actRestartForCA = "RestartForCA"
	actSwitchCA     = "SwitchCA"
	actRetireCA     = "RetireCA"
)

// annotationClusterID holds, on the EtcdCluster, the ID of the etcd cluster
// it formed: the one fact that must outlive a lost status, since a cluster
// that formed must never be bootstrapped again.
const annotationClusterID = "etcd.coreos.com/cluster-id"

// step is decide's answer: one action, every request it takes, and when to
// look again. act.go sends what it says and nothing else.
type step struct {
	Action string
	Member string // Pod and Service name of the member acted on
	ID     string // its etcd member ID, for Promote, RemoveMember and MoveLeader (the new leader)
	Image  string // for StartMember, Bootstrap and Upgrade
	Size   string // for ExpandVolume
	// Members lists the members Bootstrap creates; InitialCluster is the
	// --initial-cluster a StartMember Pod gets.
	Members        []string
	InitialCluster string

	// The requests. Namespace and Cluster say where; Owner is the uid that
	// an existing object (409) must name as its controller.
	Namespace, Cluster, Owner string
	Create                    []object      // POSTed in order
	Etcd                      *etcdRequest  // sent to the leader's JSON gateway
	Delete                    string        // "pods", "services" or "persistentvolumeclaims": Member's object is deleted
	Patch                     *patch        // a PATCH of one object
	Renew                     *secretToMake // new keys into an existing Secret (tls.go)

	// Again asks for another pass after this long even if no event comes:
	// used only while waiting for something no Kubernetes object shows
	// (a learner catching up, a member reporting its new version).
	Again time.Duration
	// Last ends the pass once the action succeeds: what it leads to
	// (Pods starting) comes as events, and another look now would only
	// read what was just written.
	Last bool
	// News are the Events to record: once the step is done, or at once
	// when there is no step.
	News []notice
}

// object is one object to create.
type object struct {
	Resource, Name string // "pods", "services", "persistentvolumeclaims" or "secrets"
	Body           []byte
	// Secret, instead of Body: a Secret whose keys act makes (tls.go).
	Secret *secretToMake
}

// etcdRequest is one POST to etcd's v3 JSON gateway.
type etcdRequest struct {
	Pod, Path string
	Body      any
	// RandomPassword: act puts a new random password into the body's
	// "password", which nobody learns (credentials.go).
	RandomPassword bool
}

// patch is one PATCH request.
type patch struct {
	Path, ContentType string
	Body              []byte
}

// notice is an Event to record about the EtcdCluster.
type notice struct{ Type, Reason, Message string }

// pollAgain is how soon a pass that waits on etcd alone looks again.
const pollAgain = 2 * time.Second

// decide returns the status to report and the next step.
func decide(in input, obs observed) (clusterStatus, step) {
	d := newDecision(in, obs)
	s := d.ladder()
	d.finish()
	if s.Action == actNone {
		s.News = append(s.News, d.cannotProceed()...)
		for _, next := range []time.Duration{d.renewIn(), d.credentialsDue(), d.caDue()} {
			if next > 0 && (s.Again == 0 || next < s.Again) {
				s.Again = next
			}
		}
	}
	if s.Action != actNone {
		s.Namespace, s.Cluster, s.Owner = in.Namespace, in.Name, in.UID
	}
	return d.st, s
}

// decision is one run of decide: its input and the status it builds.
type decision struct {
	in     input
	obs    observed
	pods   map[string]*podView
	svcs   map[string]bool
	claims map[string]*claimView
	st     clusterStatus
	// versionBehind: every member runs a newer minor version than etcd's
	// cluster version, which etcd raises by itself within seconds.
	versionBehind bool
	// caWaits: why a CA rotation cannot restart a member now, and the
	// reason for the status (restartForCA).
	caWaits, caWaitReason string

	available, progressing, degraded    bool
	availReason, progReason, degrReason string
	availMsg, progMsg, degrMsg          string
}

func newDecision(in input, obs observed) *decision {
	if obs.Etcd.Listed == nil {
		obs.Etcd.Listed = obs.Etcd.Members
	}
	d := &decision{in: in, obs: obs, pods: map[string]*podView{}, svcs: map[string]bool{}, claims: map[string]*claimView{}}
	for i := range obs.Pods {
		d.pods[obs.Pods[i].Name] = &obs.Pods[i]
	}
	for i := range obs.Claims {
		d.claims[obs.Claims[i].Name] = &obs.Claims[i]
	}
	for _, s := range obs.Services {
		d.svcs[s] = true
	}
	d.st = clusterStatus{ClusterID: cmp.Or(obs.Etcd.ClusterID, in.Prev.ClusterID, in.FormedID), ObservedGeneration: in.Gen, Restore: in.Prev.Restore}
	return d
}

// rule is one rung of the ladder: it returns a step, or false to leave the
// cluster to the next rule.
type rule func(d *decision) (step, bool)

// ladder tries the rules in order; with operate's list below, it is the
// one place their order is written.
func (d *decision) ladder() step {
	for _, r := range []rule{(*decision).invalidSpec, (*decision).beingDeleted} {
		if s, ok := r(d); ok {
			return s
		}
	}
	if d.st.ClusterID == "" {
		return d.bootstrap()
	}
	d.reportMembers()
	d.reportTLS()
	s := d.operate()
	if mark, ok := d.markFormed(); ok {
		return mark // the status stays what the ladder says
	}
	return s
}

// operate runs the ladder of a cluster that formed.
func (d *decision) operate() step {
	if d.obs.Etcd.Members != nil && d.quorumOK() {
		d.setAvailable(true, reasonQuorumReady, "")
	}
	for _, r := range []rule{
		(*decision).certificates,
		(*decision).repairImages,
		(*decision).restartOnVolumes,
		(*decision).needQuorum,
		(*decision).removeLeftovers,
		(*decision).createClientService,
		(*decision).enableAuth,
		// Before the rules that may wait for a person (a refused version,
		// a member that cannot start): a rotation asked for may be urgent
		// (a leaked password), and its steps cost no quorum.
		(*decision).rotateCredentials,
		(*decision).learners,
		(*decision).replaceLostMembers,
		(*decision).resize,
		(*decision).rotateCA,
		(*decision).upgrade,
		(*decision).expandVolumes,
	} {
		if s, ok := r(d); ok {
			return s
		}
	}
	s := d.steady()
	d.noteTLSSwitch()
	d.noteCAWaits()
	return s
}

// invalidSpec: a spec that cannot be read changes nothing; the status says
// why.
func (d *decision) invalidSpec() (step, bool) {
	in := d.in
	if in.Invalid == "" {
		return step{}, false
	}
	d.st.Phase, d.st.Message = phaseFailed, in.Invalid
	d.st.Members, d.st.CurrentVersion = in.Prev.Members, in.Prev.CurrentVersion
	d.setAvailable(len(d.obs.Etcd.Members) > 0 && d.quorumOK(), reasonInvalidSpec, in.Invalid)
	d.setProgressing(false, reasonInvalidSpec, in.Invalid)
	var s step
	if in.Invalid != in.Prev.Message || in.Prev.Phase != phaseFailed || in.Prev.ObservedGeneration != in.Gen {
		s.News = []notice{{eventWarning, reasonInvalidSpec, in.Invalid}}
	}
	return s, true
}

// beingDeleted: a cluster being deleted (a foreground deletion waits for the
// garbage collector to remove its objects first) is left alone: repairing it
// would fight the collector.
func (d *decision) beingDeleted() (step, bool) {
	if !d.in.Deleting {
		return step{}, false
	}
	msg := "the EtcdCluster is being deleted; the garbage collector removes its Pods and Services"
	d.st.Phase, d.st.Message = phaseDeleting, msg
	d.st.Members, d.st.CurrentVersion = d.in.Prev.Members, d.in.Prev.CurrentVersion
	d.setAvailable(false, reasonDeleting, msg)
	d.setProgressing(false, reasonDeleting, msg)
	d.setDegraded(false, reasonDeleting, msg)
	return step{}, true
}

// formed reports whether a cluster with no known cluster ID (its status
// lost, its members out of the operator's reach) has formed all the same:
// a Pod is Ready (etcd's /readyz needs a leader), or a member joined it.
// Such a cluster is never bootstrapped again: a member created with
// --initial-cluster-state=new and empty data under an ID the others know
// would have forgotten what it acknowledged (raft cannot survive that).
func (d *decision) formed() bool {
	for _, p := range d.obs.Pods {
		if p.Ready || p.State == "existing" {
			return true
		}
	}
	return false
}

// bootstrap: a cluster that never formed (no member has reported a cluster
// ID) is created: every Service, then every Pod, with
// --initial-cluster-state=new. Then the members are waited for until one
// answers.
func (d *decision) bootstrap() step {
	names := d.bootstrapMembers()
	for _, m := range names {
		d.st.Members = append(d.st.Members, memberStatus{Name: m})
	}
	d.setAvailable(false, reasonNotStarted, "etcd has not answered yet")
	d.setDegraded(false, reasonCreating, "")
	if s, ok := d.checkRestore(); ok {
		return s
	}
	if s, ok := d.tlsCA(); ok {
		return s
	}
	if s, ok := d.createMissing(names); ok {
		return s
	}
	if s, ok := d.remakeBootstrapPods(names); ok {
		return s
	}
	msg := fmt.Sprintf("waiting for the members to start and elect a leader: %s", d.podSummary(names)) + d.namesNote()
	d.st.Phase, d.st.Message = phaseCreating, msg
	d.setProgressing(true, reasonWaitingForMembers, msg)
	// Pods turning Ready wake the operator (the Pod watch). Once one is
	// Ready etcd should answer: look again until it does.
	for _, m := range names {
		if p := d.pods[m]; p != nil && p.Ready {
			return step{Again: pollAgain}
		}
	}
	return step{}
}

// createMissing creates what a new cluster lacks, unless it has formed.
func (d *decision) createMissing(names []string) (step, bool) {
	var missing []string
	for _, m := range slices.Concat(names, []string{d.clientService()}) {
		if !d.svcs[m] || m != d.clientService() && (d.pods[m] == nil || !d.in.Spec.Storage.EmptyDir && d.claims[m] == nil) {
			missing = append(missing, m)
		}
	}
	switch {
	case len(missing) == 0 && len(d.missingSecrets(names)) == 0:
		return step{}, false
	case d.formed():
		msg := fmt.Sprintf("the cluster has formed (%s), but no member answers the operator, so it creates nothing: a member made again as new would lose what it acknowledged", d.podSummary(names))
		return d.wait(phaseCreating, reasonWaitingForMembers, msg), true
	}
	for _, m := range missing {
		if c := d.claims[m]; c != nil && c.Deleting {
			return d.wait(phaseCreating, reasonWaitingForClaim, fmt.Sprintf("creating member %s waits for its old volume claim to be gone", m)), true
		}
	}
	// The status written after the step already says what comes next, so
	// the pass ends there: the Pods' events start the next one.
	msg := fmt.Sprintf("created %d members: %s; waiting for them to start and elect a leader", len(names), strings.Join(names, ", ")) + d.namesNote()
	s := d.progress(phaseCreating, reasonWaitingForMembers, msg, d.bootstrapStep(names))
	s.Last = true
	return s, true
}

// remakeBootstrapPods makes again, or says why it cannot, a new cluster's
// Pods that will not start: one that never ran an image spec.version no
// longer asks for, one that Failed (the kubelet does not restart those),
// one whose image does not run; or says that one is stuck terminating.
// No member of a cluster that never formed has data anyone relies on.
func (d *decision) remakeBootstrapPods(names []string) (step, bool) {
	for _, m := range names {
		p := d.pods[m]
		switch {
		case p == nil || p.Deleting && !p.Overdue:
		case p.Overdue:
			msg := fmt.Sprintf("Pod %s is stuck terminating (its node is gone or cut off), and a new cluster needs every member it was created with: once the node is gone for good, delete the Pod with --grace-period=0 --force", m)
			d.st.Phase, d.st.Message = phaseCreating, msg
			d.setProgressing(false, reasonPodStuck, msg)
			return step{}, true
		case p.Image != d.image() && neverRan(p):
			msg := fmt.Sprintf("deleting Pod %s, which never ran %s, to create it again with %s", m, p.Image, d.image())
			return d.progress(phaseCreating, reasonWaitingForMembers, msg, step{Action: actDeletePod, Member: m, Delete: "pods"}), true
		case (p.Phase == "Failed" || p.Phase == "Succeeded") && !d.formed():
			msg := fmt.Sprintf("deleting Pod %s, which is %s, to create it again", m, p.Phase)
			return d.progress(phaseCreating, reasonWaitingForMembers, msg, step{Action: actDeletePod, Member: m, Delete: "pods"}), true
		case p.Claim != "" && (d.claims[p.Claim] == nil || d.claims[p.Claim].Deleting) && !d.formed():
			// The claim waits for the Pod to go (pvc-protection), and the
			// Pod for the claim: deleting the Pod ends it.
			msg := fmt.Sprintf("deleting Pod %s, whose volume claim is gone or being deleted, to create both again", m)
			return d.progress(phaseCreating, reasonWaitingForMembers, msg, step{Action: actDeletePod, Member: m, Delete: "pods"}), true
		}
	}
	if s, ok := d.repairImages(); ok {
		d.st.Phase = phaseCreating
		return s, true
	}
	for _, m := range names {
		if d.cannotRunStep(d.pods[m]) {
			return step{}, true
		}
	}
	return step{}, false
}

// bootstrapStep creates a new cluster's missing objects: every member
// Service and the client Service before any Pod, since etcd resolves its
// peers' names when it starts.
func (d *decision) bootstrapStep(names []string) step {
	plan := d.plan(d.image())
	s := step{Action: actBootstrap, Members: names, Image: plan.Image}
	for _, m := range names {
		s.Create = append(s.Create, object{Resource: "services", Name: m, Body: plan.memberService(m)})
	}
	s.Create = append(s.Create, object{Resource: "services", Name: d.clientService(), Body: plan.clientService()})
	for _, m := range names {
		if !plan.Storage.EmptyDir {
			s.Create = append(s.Create, object{Resource: "persistentvolumeclaims", Name: m, Body: plan.memberClaim(m)})
		}
	}
	// One Event for the cluster, not one per member: a burst of new
	// clusters costs the API server their objects, not four Events each.
	s.News = []notice{{eventNormal, reasonClusterCreated, fmt.Sprintf("creating %d members (a Pod and a Service each): %s; clients will use Service %s", len(names), strings.Join(names, ", "), d.clientService()) + d.namesNote()}}
	// The Secrets a member's Pod mounts come before it.
	s.Create = append(s.Create, d.missingSecrets(names)...)
	peers := make([]peer, len(names))
	for i, m := range names {
		peers[i] = peer{m, m}
	}
	for _, m := range names {
		s.Create = append(s.Create, object{Resource: "pods", Name: m, Body: plan.memberPod(m, initialCluster(peers, plan.TLS != nil))})
	}
	return s
}

// bootstrapMembers are the members of the cluster being created: those in
// the --initial-cluster of a Pod already made for it (so that a spec.size
// changed halfway changes nothing), else spec.size new names.
func (d *decision) bootstrapMembers() []string {
	for _, p := range d.obs.Pods {
		if p.State == "new" && p.InitialCluster != "" {
			var names []string
			for _, pr := range parseInitialCluster(p.InitialCluster) {
				names = append(names, pr.Name)
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

// markFormed: the first time etcd answers with a cluster ID, it is recorded
// in the EtcdCluster's annotations before any other step: from then on,
// whatever happens to the status, the operator knows the cluster formed. The
// status is what the rest of the ladder says.
func (d *decision) markFormed() (step, bool) {
	id := d.obs.Etcd.ClusterID
	if id == "" || id == d.in.FormedID {
		return step{}, false
	}
	body := mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotationClusterID: id}}})
	path := clustersPath(d.in.Namespace) + "/" + url.PathEscape(d.in.Name)
	return step{Action: actMarkFormed, Member: hexID(id), Patch: &patch{Path: path, ContentType: "application/merge-patch+json", Body: body}}, true
}

// repairImages: a member that is down because the kubelet cannot run its
// image (a version that does not pull, or that crashes where no member that
// answers runs it) gets the image the cluster is to run, which is always one
// etcd can move to from the cluster's version. Restarting a member that is
// down costs nothing, so this needs no quorum: it may be what brings it
// back.
func (d *decision) repairImages() (step, bool) {
	for _, p := range d.obs.Pods {
		if p.Deleting || p.Image == d.target() || d.imageRuns(p.Image) || !neverPulled(&p) && p.Waiting != "CrashLoopBackOff" {
			continue
		}
		msg := fmt.Sprintf("member %s cannot start %s (%s): giving it %s again", p.Name, p.Image, p.Waiting, d.target())
		return d.progress(phaseDegraded, reasonRepairingImage, msg, d.imageStep(p.Name, d.target())), true
	}
	return step{}, false
}

// imageRuns reports whether a member that answered runs image: then a
// member that cannot start with it has another problem than its image.
func (d *decision) imageRuns(image string) bool {
	for _, name := range d.obs.Etcd.AnsweredPods {
		if p := d.pods[name]; p != nil && p.Image == image {
			return true
		}
	}
	return false
}

// needQuorum: without a leader that lists the members and a healthy quorum
// of voters, etcd accepts no membership change: nothing is changed.
func (d *decision) needQuorum() (step, bool) {
	if d.obs.Etcd.Members == nil || !d.quorumOK() {
		return d.unavailable(), true
	}
	return step{}, false
}

// removeLeftovers: the leftovers of a removed member: its Pod, then its
// Service.
func (d *decision) removeLeftovers() (step, bool) {
	known := map[string]bool{}
	for _, m := range d.obs.Etcd.Members {
		known[m.member()] = true
	}
	for _, p := range d.obs.Pods {
		if !known[p.Name] && !p.Deleting {
			return d.progress(phaseScaling, reasonRemovingMember, fmt.Sprintf("deleting Pod %s: its member was removed from etcd", p.Name),
				step{Action: actDeletePod, Member: p.Name, Delete: "pods"}), true
		}
	}
	for _, s := range d.obs.Services {
		// Not waiting for the Pod to be gone: its graceful deletion ends
		// with an event about a member the status no longer lists.
		if s != d.clientService() && !known[s] {
			return d.progress(phaseScaling, reasonRemovingMember, fmt.Sprintf("deleting Service %s: its member was removed from etcd", s),
				step{Action: actDeleteSvc, Member: s, Delete: "services"}), true
		}
	}
	return d.staleClaim(known)
}

// createClientService: the client Service, if someone deleted it.
func (d *decision) createClientService() (step, bool) {
	if d.svcs[d.clientService()] {
		return step{}, false
	}
	plan := d.plan(d.image())
	return d.progress(phaseReplacing, reasonCreatingClientService, fmt.Sprintf("creating the client Service %s", d.clientService()),
		step{Action: actCreateClient, Create: []object{{Resource: "services", Name: d.clientService(), Body: plan.clientService()}}}), true
}

// learners: a joining member: etcd knows it (added as a learner) and it has
// not been promoted yet. It gets its Service and Pod, is promoted once it
// has caught up, and is removed again, which is always safe for a learner,
// when it cannot get there: its Pod or data is gone, its Pod cannot run, or
// the cluster is to shrink. Until then no other membership change is made,
// so the --initial-cluster its Pod was created with stays true.
func (d *decision) learners() (step, bool) {
	members := d.obs.Etcd.Members
	for _, m := range members {
		if !m.Learner && m.Name != "" {
			continue
		}
		p := d.pods[m.member()]
		why := d.cannotJoin(m, p)
		switch {
		case len(members) > d.in.Spec.Size && d.withoutOK(m, true):
			msg := fmt.Sprintf("removing learner %s for spec.size %d", m.member(), d.in.Spec.Size)
			if m.Name == "" {
				msg = fmt.Sprintf("removing member %s, which never started, for spec.size %d", m.member(), d.in.Spec.Size)
			}
			return d.progress(phaseScaling, reasonRemovingMember, msg, d.removeStep(m)), true
		case p == nil && m.Name == "" && d.claims[m.PeerHost] != nil && d.claims[m.PeerHost].Deleting:
			return d.wait(d.phaseFor(m.PeerHost), reasonWaitingForClaim, fmt.Sprintf("starting member %s waits for its old volume claim to be gone", m.PeerHost)), true
		case p == nil && m.Name == "":
			return d.progress(d.phaseFor(m.PeerHost), reasonStartingMember, fmt.Sprintf("starting member %s (Service and Pod) to join the cluster as a learner", m.PeerHost), d.startStep(m)), true
		case why != "" && d.withoutOK(m, true):
			s := d.removeStep(m)
			s.News = []notice{{eventWarning, reasonMemberReplaced, fmt.Sprintf("learner %s is removed: %s; a new member joins in its place", m.member(), why)}}
			return d.progress(d.phaseFor(m.member()), reasonReplacingMember, fmt.Sprintf("removing learner %s: %s", m.member(), why), s), true
		case m.Name == "" && !sameMembers(p.InitialCluster, d.joinList()) && !p.Deleting:
			// Created before a membership change: etcd would refuse to
			// start it with that list. It never started; make it again.
			return d.progress(d.phaseFor(m.member()), reasonStartingMember, fmt.Sprintf("deleting Pod %s: its --initial-cluster is out of date; it is created again", m.member()),
				step{Action: actDeletePod, Member: m.member(), Delete: "pods"}), true
		case !m.Answered && p != nil && d.cannotRunStep(p):
			return step{}, true
		case !m.Answered:
			return d.wait(d.phaseFor(m.member()), reasonWaitingForLearner, fmt.Sprintf("waiting for %s %s to start: %s", map[bool]string{true: "learner", false: "member"}[m.Learner], m.member(), d.describe(m))), true
		case !m.Learner:
			continue
		}
		s := d.etcdStep(actPromote, m.member(), m.ID, "/v3/cluster/member/promote", map[string]string{"ID": m.ID})
		s.Again = pollAgain
		s.News = []notice{{eventNormal, reasonMemberPromoted, fmt.Sprintf("member %s promoted to a voting member", m.member())}}
		return d.progress(d.phaseFor(m.member()), reasonPromotingLearner, fmt.Sprintf("promoting learner %s to a voting member once it has caught up with the leader", m.member()), s), true
	}
	return step{}, false
}

// cannotJoin says why a joining member will never get to be promoted, if
// it will not: its data is gone with its Pod, or its Pod cannot run. A
// Pod that waits for an image spec.version still asks for is left alone:
// a new member would wait the same way, and the status says why.
func (d *decision) cannotJoin(m memberView, p *podView) string {
	switch {
	case p == nil:
		return "its Pod is gone, and its data with it"
	case p.Claim != "" && (d.claims[p.Claim] == nil || d.claims[p.Claim].Deleting):
		return "its volume claim is gone or being deleted: its Pod cannot be scheduled"
	case p.Deleting:
		return "its Pod is being deleted"
	case p.Phase == "Failed" || p.Phase == "Succeeded":
		return "its Pod is " + p.Phase
	case m.Answered || !stalled(p):
		return ""
	case p.Waiting == "CrashLoopBackOff" && p.DataLost != "":
		return fmt.Sprintf("etcd keeps exiting in its Pod (CrashLoopBackOff), saying %q", p.DataLost)
	case p.Image != d.image():
		return fmt.Sprintf("it runs %s, which the kubelet cannot start (%s), and new members run %s", p.Image, p.Waiting, d.image())
	case p.Waiting == "CrashLoopBackOff" && d.imageRuns(p.Image):
		return "etcd keeps exiting in its Pod (CrashLoopBackOff), with an image that runs in other members"
	}
	return ""
}

// cannotRunStep reports that p cannot run the image new members get, in
// the status; nothing is retried until spec.version changes.
func (d *decision) cannotRunStep(p *podView) bool {
	why, ok := d.cannotRun(p)
	if !ok {
		return false
	}
	msg := fmt.Sprintf("member %s cannot start: %s", p.Name, why)
	d.st.Phase, d.st.Message = d.steadyPhase(), msg
	if d.st.ClusterID == "" {
		d.st.Phase = phaseCreating
	}
	d.setProgressing(false, reasonVersionCannotRun, msg)
	d.setDegraded(true, reasonVersionCannotRun, msg)
	return true
}

// cannotRun reports that the image new members get does not run: the
// kubelet cannot pull it, or etcd keeps exiting with it while no member
// that answers runs it. A new member would fare no better; the user must
// change spec.version.
func (d *decision) cannotRun(p *podView) (string, bool) {
	if p == nil || p.Deleting || p.Image != d.image() || !stalled(p) || d.imageRuns(p.Image) || p.DataLost != "" {
		return "", false
	}
	if p.Waiting == "CrashLoopBackOff" {
		return fmt.Sprintf("etcd keeps exiting with %s (CrashLoopBackOff: %s), and no member that answers runs it: if the version is bad, set spec.version to one that runs; if the members' data is lost, restore from a backup", p.Image, p.WaitingMessage), true
	}
	return fmt.Sprintf("%s cannot run: the kubelet says %s: %s; set spec.version to a version that runs", p.Image, p.Waiting, p.WaitingMessage), true
}

// joinList is the --initial-cluster of a member joining now: every member
// etcd has, by name (peer host until started) and peer URL.
func (d *decision) joinList() string {
	var peers []peer
	for _, o := range d.obs.Etcd.Members {
		peers = append(peers, peer{o.member(), o.PeerHost})
	}
	return initialCluster(peers, d.tls() != nil)
}

// sameMembers reports whether two --initial-cluster lists name the same
// members, in any order.
func sameMembers(a, b string) bool {
	pa, pb := parseInitialCluster(a), parseInitialCluster(b)
	key := func(p peer) string { return p.Name + "=" + p.Host }
	ka, kb := make([]string, len(pa)), make([]string, len(pb))
	for i := range pa {
		ka[i] = key(pa[i])
	}
	for i := range pb {
		kb[i] = key(pb[i])
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}

// startStep creates the Service and the Pod of a member added to etcd.
func (d *decision) startStep(m memberView) step {
	plan := d.plan(d.image())
	ic := d.joinList()
	create := []object{{Resource: "services", Name: m.PeerHost, Body: plan.memberService(m.PeerHost)}}
	if !plan.Storage.EmptyDir {
		create = append(create, object{Resource: "persistentvolumeclaims", Name: m.PeerHost, Body: plan.memberClaim(m.PeerHost)})
	}
	return step{Action: actStartMember, Member: m.PeerHost, Image: plan.Image, InitialCluster: ic,
		Create: append(create, object{Resource: "pods", Name: m.PeerHost, Body: plan.joiningPod(m.PeerHost, ic)}),
		News:   []notice{{eventNormal, reasonMemberCreated, fmt.Sprintf("created member %s (Pod and Service %s), joining as a learner", m.PeerHost, m.PeerHost)}}}
}

// replaceLostMembers: a voter that is lost for good is removed from etcd, if
// the voters left keep a healthy quorum; resize then adds a fresh member.
// Lost: its Pod is gone, Failed or being deleted (with emptyDir its data
// goes with it), or etcd keeps exiting in a Pod whose image runs fine in
// another member (its data was wiped: it came back under its old ID with
// nothing).
//
// A lost member whose removal would cost quorum (it still runs, and
// another is down) waits; another lost member may be removed meanwhile,
// and a cluster below spec.size grows first: a learner costs no quorum.
func (d *decision) replaceLostMembers() (step, bool) {
	var blocked string
	voters, _ := d.voters()
	for _, m := range d.obs.Etcd.Members {
		why := d.lost(m)
		if why == "" {
			continue
		}
		if !d.withoutOK(m, true) {
			switch {
			case blocked != "":
			case voters == 1 && !m.Learner:
				blocked = fmt.Sprintf("member %s must be replaced (%s), but it is the only voter: raise spec.size to move its data to new members first, or take a backup", m.member(), why)
			default:
				var down []string
				for _, o := range d.obs.Etcd.Members {
					if o.ID != m.ID && !o.Learner && !d.healthy(o) {
						down = append(down, d.describe(o))
					}
				}
				blocked = fmt.Sprintf("member %s must be replaced (%s), but removing it now could cost quorum", m.member(), why)
				if len(down) > 0 {
					blocked += "; first the cluster needs back: " + strings.Join(down, "; ")
				}
			}
			continue
		}
		s := d.removeStep(m)
		s.News = []notice{{eventWarning, reasonMemberReplaced, fmt.Sprintf("member %s is replaced: %s; it is removed from etcd and a new member with empty data joins under the same name", m.member(), why)}}
		return d.progress(phaseReplacing, reasonReplacingMember, fmt.Sprintf("replacing member %s (%s): removing it from etcd first", m.member(), why), s), true
	}
	if blocked == "" || len(d.obs.Etcd.Members) < d.in.Spec.Size {
		return step{}, false
	}
	return d.wait(phaseDegraded, reasonWaitingForQuorum, blocked), true
}

// lost says why a voter is lost for good, if it is.
func (d *decision) lost(m memberView) string {
	p, c := d.pods[m.member()], d.claims[m.member()]
	switch {
	case c != nil && c.Deleting:
		return "its volume claim is being deleted, and its data with it"
	case p != nil && p.Claim != "" && c == nil:
		// The Pod was made (again) on a PVC deleted meanwhile: the Pod and
		// PVC watches are separate streams, so the Pod's deletion can be
		// seen before its PVC's. The scheduler keeps such a Pod Pending.
		return "its volume claim is gone, and its data with it"
	case p != nil && !m.Answered && p.Waiting == "CrashLoopBackOff" && p.DataLost != "":
		// Whatever its image: etcd said why it exits.
		return fmt.Sprintf("etcd keeps exiting in its Pod (CrashLoopBackOff), saying %q: its data is lost or damaged", p.DataLost)
	case p != nil && !m.Answered && p.Waiting == "CrashLoopBackOff" && d.runsElsewhere(m, p.Image):
		// On a volume too: its data is damaged or gone (a disk replaced).
		return "etcd keeps exiting in its Pod (CrashLoopBackOff) with an image that runs in other members: its data is lost or damaged"
	case d.onVolume(m.member()) && (p == nil || !p.Overdue):
		// Its Pod comes back on the volume (restartOnVolumes), unless
		// it is stuck on a node that is gone, with the volume.
	case p == nil:
		return "its Pod is gone"
	case p.Phase == "Failed" || p.Phase == "Succeeded":
		return "its Pod is " + p.Phase
	case p.Deleting:
		return "its Pod is being deleted"
	}
	return ""
}

// runsElsewhere reports whether a healthy voter other than m runs image.
func (d *decision) runsElsewhere(m memberView, image string) bool {
	for _, o := range d.obs.Etcd.Members {
		if o.ID != m.ID && !o.Learner && d.healthy(o) && d.pods[o.member()].Image == image {
			return true
		}
	}
	return false
}

// resize: towards spec.size, one member at a time: a new member is added as
// a learner under the lowest free name; a member removed is an unhealthy one
// first, else the highest name, and never one whose removal costs quorum.
func (d *decision) resize() (step, bool) {
	members, size := d.obs.Etcd.Members, d.in.Spec.Size
	switch {
	case len(members) < size:
		name := d.nextName()
		if d.pods[name] != nil {
			// The Pod of a member removed before, being deleted: the new
			// member takes its name once it is gone.
			return d.wait(d.phaseFor(name), reasonWaitingForPodDeletion, fmt.Sprintf("adding member %s waits for its old Pod to be gone", name)), true
		}
		if d.claims[name] != nil {
			// A removed member's volume: the new member gets a fresh one.
			return d.wait(d.phaseFor(name), reasonWaitingForClaim, fmt.Sprintf("adding member %s waits for its old volume claim to be gone", name)), true
		}
		s := d.etcdStep(actAddMember, name, "", "/v3/cluster/member/add", map[string]any{"peerURLs": []string{peerURL(name, d.tls() != nil)}, "isLearner": true})
		s.News = []notice{{eventNormal, reasonMemberAdded, fmt.Sprintf("member %s added to etcd as a learner", name)}}
		return d.progress(d.phaseFor(name), reasonAddingMember, fmt.Sprintf("adding member %s as a learner (%d of %d members)", name, len(members)+1, size), s), true
	case len(members) > size:
		m := d.toRemove()
		if !d.withoutOK(m, true) {
			return d.wait(phaseScaling, reasonWaitingForQuorum, fmt.Sprintf("spec.size is %d, but removing member %s now could cost quorum", size, m.member())), true
		}
		if s, ok := d.leaderAway(m, phaseScaling, "removing it"); ok {
			return s, true
		}
		s := d.removeStep(m)
		s.News = []notice{{eventNormal, reasonMemberRemoved, fmt.Sprintf("member %s removed from etcd for spec.size %d", m.member(), size)}}
		return d.progress(phaseScaling, reasonRemovingMember, fmt.Sprintf("removing member %s from etcd (%d of %d members)", m.member(), len(members)-1, size), s), true
	}
	return step{}, false
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
// base-0 ... base-(size-1) whatever was added and removed. A name whose
// old Pod is stuck terminating (its node is gone) is skipped.
func (d *decision) nextName() string {
	used := map[string]bool{}
	for _, m := range d.obs.Etcd.Members {
		used[m.member()] = true
	}
	for i := 0; ; i++ {
		n := memberName(d.in.Base, i)
		if p := d.pods[n]; !used[n] && (p == nil || !p.Overdue) {
			return n
		}
	}
}

// toRemove picks the member to remove when shrinking: one that is not
// healthy first, then the highest ordinal, so that names stay
// NAME-0 ... NAME-(size-1).
func (d *decision) toRemove() memberView {
	members := d.obs.Etcd.Members
	score := func(m memberView) int {
		s := ordinal(m.member())
		if !d.healthy(m) {
			s += 1 << 20
		}
		return s
	}
	best := 0
	for i, m := range members {
		if score(m) > score(members[best]) {
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
			s := d.etcdStep(actMoveLeader, o.member(), o.ID, "/v3/maintenance/transfer-leadership", map[string]string{"targetID": o.ID})
			s.Again = pollAgain
			return d.progress(phase, reasonMovingLeader, msg, s), true
		}
	}
	return step{}, false
}

// etcdStep is a membership request to the leader.
func (d *decision) etcdStep(action, member, id, path string, body any) step {
	return step{Action: action, Member: member, ID: id, Etcd: &etcdRequest{Pod: d.obs.Etcd.LeaderPod, Path: path, Body: body}}
}

func (d *decision) removeStep(m memberView) step {
	return d.etcdStep(actRemoveMember, m.member(), m.ID, "/v3/cluster/member/remove", map[string]string{"ID": m.ID})
}

// plan is the cluster's manifests, with new members running image.
func (d *decision) plan(image string) clusterPlan {
	p := newClusterPlan(objectMeta{Name: d.in.Name, Namespace: d.in.Namespace, UID: d.in.UID}, image)
	p.Storage = d.in.Spec.Storage
	p.Restore, p.OperatorImage = d.in.Spec.Restore, d.in.OperatorImage
	p.TLS = d.tls()
	if p.TLS != nil {
		v := d.tlsView()
		p.Trust, p.SecretTrust = v.bundle(), map[string]string{}
		for member, l := range v.Leaves {
			p.SecretTrust[member] = l.Trust
		}
	}
	return p
}

func (d *decision) clientService() string { return d.in.Base + "-client" }

// namesNote explains object names that are not the EtcdCluster's own.
func (d *decision) namesNote() string {
	if d.in.Base == d.in.Name {
		return ""
	}
	return fmt.Sprintf(" (object names shortened to %s-*, because the name is not a short DNS-1035 label)", d.in.Base)
}

// member is a member's name: its etcd name once started, its peer host before.
func (m memberView) member() string { return cmp.Or(m.Name, m.PeerHost) }

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
