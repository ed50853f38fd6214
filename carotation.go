// CA rotation: a new CA, and no moment when two members cannot talk.
//
// etcd reads its CA file (--peer-trusted-ca-file) only when it starts
// (etcd issue #11555), so a member trusts the CAs its Secret's ca.crt held
// when its Pod started, and every member must trust a new CA before any
// shows a certificate the new CA signed. A Pod's annotation
// etcd.coreos.com/trusted-cas records the ca.Fingerprint of the CAs it
// started with. The steps, each decided from what BASE-ca, the members'
// Secrets and their Pods say, so each safe to repeat after a crash
// (rotateCA):
//
//  1. PrepareCA: a new CA into BASE-ca's next.crt and next.key; its key
//     rotation records the spec.tls.caRotation it answers. Asked for by a
//     new spec.tls.caRotation, or by itself at two thirds of the CA's life.
//  2. The members' certificates are renewed with a ca.crt of both CAs
//     (certificates, in tls.go), and BASE-root's ca.crt gets both
//     (TrustCA): clients trust the new CA before any member shows it.
//  3. RestartForCA: a member whose Pod started trusting other CAs than its
//     Secret's is restarted, one at a time, the leader last, only while
//     every other voter is healthy: its Pod is deleted and made again. On a
//     volume it is the same member with its data (restartOnVolumes); on
//     emptyDir a fresh member replaces it (replaceLostMembers).
//  4. SwitchCA: the new CA becomes BASE-ca's tls.crt and tls.key, the old
//     one moves to previous.crt, and certificates renews every leaf from
//     the new CA.
//  5. RetireCA: once no member's leaf of the old CA is left, and the
//     kubelet has had time to put the new ones into the Pods (-secret-sync
//     after the last was written, by its Secret's issued-at: a leaf may be
//     renewed long after the switch, or issued again after its Secret was
//     lost), previous.crt goes: the leaves' ca.crt and BASE-root's drop it
//     (2), and the members restart once more (3), so that none trusts the
//     old CA any longer.
package main

import (
	"cmp"
	"fmt"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/ca"
)

// The keys of Secret BASE-ca beyond the CA's and the token keys.
const (
	keyNextCACert = "next.crt"
	keyNextCAKey  = "next.key"
	keyPreviousCA = "previous.crt"
	keySwitchedAt = "switched-at"
)

// annotationTrust is on a TLS member's Pod: the ca.Fingerprint of the CAs
// its Secret's ca.crt held when the Pod was made.
const annotationTrust = "etcd.coreos.com/trusted-cas"

// defaultSecretSync bounds how long the kubelet takes to write a Secret's
// new contents into the Pods that mount it: its sync period (a minute by
// default) and its cache's delay. -secret-sync sets another.
const defaultSecretSync = 2 * time.Minute

// rotateCA takes a TLS cluster through a CA rotation, one step a pass.
func (d *decision) rotateCA() (step, bool) {
	v := d.tlsView()
	if d.tls() == nil || v.CA == nil || d.obs.Etcd.Members == nil || !d.quorumOK() {
		return step{}, false
	}
	fp := ca.Fingerprint(v.bundle())
	if v.HasRoot && v.RootTrust != fp {
		msg := fmt.Sprintf("writing into Secret %s the CAs that clients are to trust: %s", rootSecret(d.in.Base), v.trustNote())
		s := step{Action: actTrustCA, Patch: d.credentialsPatch(map[string]any{"ca.crt": v.bundle()})}
		return d.progress(d.healthPhase(), reasonRotatingCA, msg, s), true
	}
	if todo := d.toRestartForCA(fp); len(todo) > 0 {
		// Nothing switches until every member trusts both CAs.
		return d.restartForCA(todo)
	}
	due := ca.RenewAt(v.CA.NotBefore(), v.CA.NotAfter())
	switch t := d.in.Spec.TLS; {
	case v.Next != nil:
		msg := fmt.Sprintf("every member trusts the new CA (valid until %s): it issues the members' certificates from now on, and the previous CA is trusted until none of its certificates is left", stamp(v.Next.NotAfter()))
		s := step{Action: actSwitchCA, Patch: d.caPatch(map[string]any{"tls.crt": v.Next.CertPEM(), "tls.key": v.Next.KeyPEM(),
			keyPreviousCA: v.CA.CertPEM(), keySwitchedAt: stamp(d.obs.Now), keyNextCACert: nil, keyNextCAKey: nil}),
			News: []notice{{eventNormal, reasonCASwitched, msg}}}
		return d.progress(d.healthPhase(), reasonRotatingCA, "switching to the new CA: "+msg, s), true
	case v.Previous != nil && d.leavesOfPrevious() > 0:
		return step{}, false // certificates renews them
	case v.Previous != nil && d.caSwitchWait() > 0:
		return step{}, false // decide looks again then (caDue)
	case v.Previous != nil:
		msg := "no certificate of the previous CA is left, in the Secrets or in the Pods: the members and clients stop trusting it, and the members restart once more to forget it"
		s := step{Action: actRetireCA, Patch: d.caPatch(map[string]any{keyPreviousCA: nil, keySwitchedAt: nil}),
			News: []notice{{eventNormal, reasonCARetired, msg}}}
		return d.progress(d.healthPhase(), reasonRotatingCA, "retiring the previous CA: "+msg, s), true
	case t != nil && t.CARotation != v.CARotation || !d.obs.Now.Before(due):
		why := fmt.Sprintf("two thirds of its life are over (valid until %s)", stamp(v.CA.NotAfter()))
		if t != nil && t.CARotation != v.CARotation {
			why = fmt.Sprintf("spec.tls.caRotation is %q", t.CARotation)
		}
		msg := "rotating the CA: a new CA into Secret " + caSecret(d.in.Base) + ", to be trusted by every member before it issues any certificate; " + why
		s := step{Action: actPrepareCA, Renew: &secretToMake{Kind: secretNextCA, Name: caSecret(d.in.Base), Lifetime: d.tls().CALifetime, Rotation: v.CARotation},
			News: []notice{{eventNormal, reasonCARotationStarted, msg}}}
		if t != nil {
			s.Renew.Rotation = t.CARotation
		}
		return d.progress(d.healthPhase(), reasonRotatingCA, msg, s), true
	}
	return step{}, false
}

// toRestartForCA are the members whose Pods started trusting other CAs
// than fp, of those whose Secret's ca.crt trusts fp (certificates renews
// the others first).
func (d *decision) toRestartForCA(fp string) []memberView {
	var todo []memberView
	for _, m := range d.obs.Etcd.Members {
		p, l := d.pods[m.member()], d.tlsView().Leaves[m.member()]
		if p != nil && !p.Deleting && l.Trust == fp && d.podTrust(p) != fp {
			todo = append(todo, m)
		}
	}
	return todo
}

// restartForCA restarts the next member of todo: followers first, the
// leader last, one at a time.
func (d *decision) restartForCA(todo []memberView) (step, bool) {
	m := d.nextToUpgrade(todo)
	why := fmt.Sprintf("the CA rotates: member %s's etcd reads its CA file only as it starts, and must restart to trust %s", m.member(), d.tlsView().trustNote())
	voters, healthy := d.voters()
	switch {
	case voters < 3:
		// The rules after this one go on; the status says it at the end.
		d.caWaits, d.caWaitReason = fmt.Sprintf("%s; but a cluster of %d voting members loses its quorum while one restarts: set spec.size to 3 or more", why, voters), reasonRotationNeedsMembers
		return step{}, false
	case healthy < voters || !d.withoutOK(m, false):
		// The rotation waits; the rules after this one, and the status's
		// message at the end, say why a member is down (a version that
		// cannot run, say) better than it can.
		d.caWaits, d.caWaitReason = why+"; it waits for every voting member to be healthy", reasonWaitingForHealth
		return step{}, false
	}
	if s, ok := d.leaderAway(m, phaseRotating, "restarting it for the new CA"); ok {
		return s, true
	}
	restart := "it is made again on its volume, with its data"
	if !d.onVolume(m.member()) {
		restart = "on emptyDir its data goes with it, and a fresh member replaces it"
	}
	msg := fmt.Sprintf("%s (%d of %d to go); its Pod is deleted: %s", why, len(todo), len(d.obs.Etcd.Members), restart)
	s := step{Action: actRestartForCA, Member: m.member(), Delete: "pods",
		News: []notice{{eventNormal, reasonMemberRestarted, fmt.Sprintf("member %s restarts to trust %s: %s", m.member(), d.tlsView().trustNote(), restart)}}}
	return d.progress(phaseRotating, reasonRotatingCA, msg, s), true
}

// noteCAWaits: the status of a cluster with nothing else to do says why
// its CA rotation waits: in its message when nothing else is wrong (the
// cluster is too small), else in Progressing only.
func (d *decision) noteCAWaits() {
	if d.caWaits == "" {
		return
	}
	if d.caWaitReason == reasonRotationNeedsMembers {
		d.st.Message = d.caWaits
	}
	d.setProgressing(false, d.caWaitReason, d.caWaits)
}

// podTrust is the fingerprint of the CAs a Pod trusts; a Pod made before
// the annotation existed trusts the CA alone.
func (d *decision) podTrust(p *podView) string {
	if p.Trust != "" {
		return p.Trust
	}
	return ca.Fingerprint(d.tlsView().CA.CertPEM())
}

// leavesOfPrevious counts the members' certificates the previous CA
// signed. The Secret of a member removed stays until the EtcdCluster goes
// (or the member comes back, and certificates renews it first): it does
// not count.
func (d *decision) leavesOfPrevious() int {
	n := 0
	for _, m := range d.obs.Etcd.Members {
		if l, ok := d.tlsView().Leaves[m.member()]; ok && l.Why == whyPreviousCA {
			n++
		}
	}
	return n
}

// caSwitchWait is how long the previous CA is still to be trusted after the
// switch, for the kubelet to put the members' new certificates into the
// Pods: -secret-sync after the last was written.
func (d *decision) caSwitchWait() time.Duration {
	v := d.tlsView()
	if v.Previous == nil {
		return 0
	}
	last := v.SwitchedAt
	for _, m := range d.obs.Etcd.Members {
		if l, ok := v.Leaves[m.member()]; ok && l.IssuedAt.After(last) {
			last = l.IssuedAt
		}
	}
	return max(cmp.Or(d.in.SecretSync, defaultSecretSync)-d.obs.Now.Sub(last), 0)
}

// caDue is how soon a settled cluster is to look at its CA again: at two
// thirds of its life, or when the previous CA may be retired.
func (d *decision) caDue() time.Duration {
	v := d.tlsView()
	if d.tls() == nil || v.CA == nil {
		return 0
	}
	if w := d.caSwitchWait(); w > 0 {
		return max(w, time.Second)
	}
	return max(ca.RenewAt(v.CA.NotBefore(), v.CA.NotAfter()).Sub(d.obs.Now), time.Second)
}

// caPatch is a merge patch of Secret BASE-ca's data (secretPatch).
func (d *decision) caPatch(data map[string]any) *patch {
	return d.secretPatch(caSecret(d.in.Base), data)
}

// caRotationStatus says where a CA rotation is, for status.tls.
func (d *decision) caRotationStatus() string {
	v := d.tlsView()
	switch {
	case v.CA == nil:
		return ""
	case v.Next != nil:
		return "members come to trust the new CA, one restart at a time"
	case v.Previous != nil:
		return fmt.Sprintf("the new CA issues the members' certificates; %d of the previous CA left", d.leavesOfPrevious())
	}
	fp := ca.Fingerprint(v.bundle())
	for _, p := range d.obs.Pods {
		if p.TLS && !p.Deleting && d.podTrust(&p) != fp {
			return "members restart, one at a time, to stop trusting the previous CA"
		}
	}
	return ""
}
