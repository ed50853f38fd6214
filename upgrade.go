// Upgrade: a rule of decide's ladder, a rolling upgrade in place.
//
// A member is upgraded by changing the image of its Pod: the kubelet
// restarts the container in the same Pod, with the same data, and etcd
// carries on as the same member. One member at a time, the leader last
// (leadership handed away first), and only while the others keep a healthy
// quorum. etcd itself allows one minor version at a time and no downgrade
// once the cluster version has moved; the operator refuses those before
// touching anything, and says so in the status.
package main

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// upgrade rolls the members to spec.version one at a time, the leader last.
func (d *decision) upgrade() (step, bool) {
	if reason := d.versionRefused(); reason != "" {
		d.st.Phase, d.st.Message = d.steadyPhase(), reason
		d.setProgressing(false, reasonVersionRefused, reason)
		return step{}, true
	}
	target := d.in.Repo + ":" + d.in.Spec.Version
	todo, s, busy := d.upgradeUnderWay(target)
	if busy {
		return s, true
	}
	if len(todo) == 0 {
		return step{}, false
	}
	members := d.obs.Etcd.Members
	m := d.nextToUpgrade(todo)
	if v, _ := d.voters(); v < 3 && d.healthy(m) {
		msg := fmt.Sprintf("spec.version %s waits: a cluster of %d voting members loses its quorum while one of them restarts; set spec.size to 3 or more to upgrade it without downtime", d.in.Spec.Version, v)
		d.st.Phase, d.st.Message = d.steadyPhase(), msg
		d.setProgressing(false, reasonUpgradeNeedsMembers, msg)
		return step{}, true
	}
	if !d.withoutOK(m, false) {
		return d.wait(phaseDegraded, reasonWaitingForHealth, fmt.Sprintf("upgrading to %s waits: restarting member %s now could cost quorum", d.in.Spec.Version, m.member())), true
	}
	if s, ok := d.leaderAway(m, phaseUpgrading, "restarting it with "+d.in.Spec.Version); ok {
		return s, true
	}
	msg := fmt.Sprintf("upgrading member %s to %s (%d of %d done)", m.member(), d.in.Spec.Version, len(members)-len(todo), len(members))
	s = d.imageStep(m.member(), target)
	return d.progress(phaseUpgrading, reasonUpgrading, msg, s), true
}

// imageStep changes the image of a member's Pod: the kubelet restarts the
// container in the same Pod, with its data.
func (d *decision) imageStep(member, image string) step {
	body := mustJSON(map[string]any{"spec": map[string]any{"containers": []map[string]any{{"name": "etcd", "image": image}}}})
	path := "/api/v1/namespaces/" + url.PathEscape(d.in.Namespace) + "/pods/" + url.PathEscape(member)
	return step{Action: actUpgrade, Member: member, Image: image, Patch: &patch{Path: path, ContentType: "application/strategic-merge-patch+json", Body: body},
		News: []notice{{eventNormal, reasonMemberUpgraded, fmt.Sprintf("member %s: image changed to %s; the kubelet restarts it with its data", member, image)}}}
}

// upgradeUnderWay returns the members still to upgrade, or the wait for
// one that was upgraded and is not back yet: a member whose Pod runs the
// target image but does not answer with the target version. A rollout
// never moves on while an upgraded member is not back; one the kubelet
// cannot start (a crash loop, an image that does not pull) stops it.
func (d *decision) upgradeUnderWay(target string) ([]memberView, step, bool) {
	want := strings.TrimPrefix(d.in.Spec.Version, "v")
	members := d.obs.Etcd.Members
	var todo, back []memberView
	for _, m := range members {
		p := d.pods[m.member()]
		switch {
		case p == nil:
			return nil, d.wait(phaseDegraded, reasonWaitingForMember, fmt.Sprintf("member %s has no Pod", m.member())), true
		case p.Image != target:
			todo = append(todo, m)
		case !d.healthy(m) || m.Version != want && isVersion(d.in.Spec.Version):
			back = append(back, m)
		}
	}
	if len(todo) == 0 || len(back) == 0 {
		return todo, step{}, false
	}
	m, p := back[0], d.pods[back[0].member()]
	if stalled(p) {
		msg := fmt.Sprintf("upgrade stopped at member %s: the kubelet says %s: %s; the other members keep running; set spec.version back to repair it", m.member(), p.Waiting, p.WaitingMessage)
		d.st.Phase, d.st.Message = phaseDegraded, msg
		d.setProgressing(false, reasonUpgradeStalled, msg)
		d.setDegraded(true, reasonUpgradeStalled, msg)
		return nil, step{}, true
	}
	return nil, d.wait(phaseUpgrading, reasonUpgrading, fmt.Sprintf("upgrading to %s: waiting for member %s to come back and report %s (%d of %d done)", d.in.Spec.Version, m.member(), want, len(members)-len(todo), len(members))), true
}

// nextToUpgrade: members the kubelet could not restart go first (setting
// spec.version back repairs them); then the others by name, the leader last.
func (d *decision) nextToUpgrade(todo []memberView) memberView {
	rank := func(m memberView) int {
		switch {
		case !d.healthy(m):
			return 0
		case m.ID == d.obs.Etcd.Leader:
			return 2
		}
		return 1
	}
	slices.SortStableFunc(todo, func(a, b memberView) int {
		if r := rank(a) - rank(b); r != 0 {
			return r
		}
		return ordinal(a.member()) - ordinal(b.member())
	})
	return todo[0]
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

// neverPulled reports a container whose image the kubelet cannot pull.
func neverPulled(p *podView) bool {
	switch p.Waiting {
	case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
		return true
	}
	return false
}

// neverRan reports a Pod whose etcd has not started once: not scheduled,
// or its image not pulled (Pending is the phase until a container runs).
func neverRan(p *podView) bool { return p.Phase == "Pending" }

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

// image is the image of a new member: spec.version for a new cluster;
// in one that runs, the image its ready members run, so that only the
// rolling upgrade, one member at a time and watched, brings a version in.
// A member added during a rollout is then upgraded with the others.
func (d *decision) image() string {
	target := d.in.Repo + ":" + d.in.Spec.Version
	if d.st.CurrentVersion == "" {
		return target
	}
	// The lowest version a ready member runs: one the cluster's version
	// allows, whatever the rollout has reached.
	running := ""
	for _, p := range d.obs.Pods {
		if p.Ready && !p.Deleting && (running == "" || versionLess(imageVersion(p.Image), imageVersion(running))) {
			running = p.Image
		}
	}
	// None ready: what the cluster is to run, never a version it refuses
	// (a member made again on its volume while none answers).
	return cmp.Or(running, d.target())
}

// imageVersion is an image's tag without its v: 3.6.16 of etcd:v3.6.16.
func imageVersion(image string) string {
	return strings.TrimPrefix(image[strings.LastIndexByte(image, ':')+1:], "v")
}

// target is the image the cluster is to run: spec.version, unless that
// version is refused, when it is what the cluster runs: a ready member's
// image, else (no member ready) the image of one that pulled and runs the
// cluster's minor version, else that version's own tag. A member repaired
// while none answers then never gets a version etcd would refuse.
func (d *decision) target() string {
	spec := d.in.Repo + ":" + d.in.Spec.Version
	cur := d.st.CurrentVersion
	if cur == "" || d.versionRefused() == "" {
		return spec
	}
	for _, p := range d.obs.Pods {
		if p.Ready {
			return p.Image
		}
	}
	for _, p := range d.obs.Pods {
		if v := imageVersion(p.Image); !p.Deleting && !neverPulled(&p) && isVersion(v) && !minorLess(v, cur) && !minorLess(cur, v) {
			return p.Image
		}
	}
	return d.in.Repo + ":v" + cur
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

func versionLess(a, b string) bool {
	va, _ := parseVersion(a)
	vb, _ := parseVersion(b)
	return slices.Compare(va[:], vb[:]) < 0
}

// minorLess compares major.minor only, as etcd's cluster version does.
func minorLess(a, b string) bool {
	va, _ := parseVersion(a)
	vb, _ := parseVersion(b)
	return slices.Compare(va[:2], vb[:2]) < 0
}
