// Volumes: a PersistentVolumeClaim per member, so a lost Pod is not lost data.
//
// A Pod is disposable; a PersistentVolumeClaim (PVC) is a request for
// storage that outlives it. Each member keeps etcd's data directory on a
// PVC named after the member, provisioned by the cluster's StorageClass and
// owned by the EtcdCluster, so that deleting the EtcdCluster lets the
// garbage collector remove the PVCs too. A member Pod deleted, evicted or
// lost with its node (while its volume survives) is made again on its PVC
// as the same member: same name, same etcd member ID, its data kept, no
// membership change. Only a member whose PVC is gone or being deleted is
// lost, and replaced through a learner with a fresh PVC. A PVC of a member
// etcd no longer lists (removed for a scale-down or a replacement) is
// deleted, and its name is reused only once it is gone: a stale volume
// never rejoins, since etcd exits on a removed member's data.
//
// spec.storage.emptyDir keeps the data on the node instead, gone with the
// Pod: for tests and throw-away clusters.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// defaultStorageSize is a member's volume when spec.storage.size is not
// set: room for etcd's default 2 GiB backend quota, its WAL and snapshots.
const defaultStorageSize = "8Gi"

// storageSpec is spec.storage, validated.
type storageSpec struct {
	EmptyDir bool
	Size     string // a Kubernetes quantity such as 8Gi
	Class    string // storageClassName; "" for the cluster's default class
}

var (
	quantity  = regexp.MustCompile(`^([0-9]{1,15})(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$`)
	dns1123   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	suffixMul = map[string]int64{"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
)

// parseStorage reads spec.storage; its errors name the field.
func parseStorage(raw json.RawMessage) (storageSpec, error) {
	st := storageSpec{Size: defaultStorageSize}
	if len(raw) == 0 || string(raw) == "null" {
		return st, nil
	}
	var s struct {
		EmptyDir         *bool   `json:"emptyDir"`
		Size             *string `json:"size"`
		StorageClassName *string `json:"storageClassName"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return st, fmt.Errorf("spec.storage must be an object with size, storageClassName or emptyDir, not %s", excerpt(raw))
	}
	if s.EmptyDir != nil && *s.EmptyDir {
		if s.Size != nil || s.StorageClassName != nil {
			return st, errors.New("spec.storage.emptyDir cannot be set with spec.storage.size or storageClassName: emptyDir has no size or class")
		}
		return storageSpec{EmptyDir: true}, nil
	}
	if s.Size != nil {
		if _, ok := bytesOf(*s.Size); !ok {
			return st, fmt.Errorf("spec.storage.size %q is not a quantity such as 8Gi or 500Mi", *s.Size)
		}
		st.Size = *s.Size
	}
	if s.StorageClassName != nil {
		if !dns1123.MatchString(*s.StorageClassName) || len(*s.StorageClassName) > 253 {
			return st, fmt.Errorf("spec.storage.storageClassName %q is not a valid StorageClass name", *s.StorageClassName)
		}
		st.Class = *s.StorageClassName
	}
	return st, nil
}

// bytesOf reads a quantity of the forms spec.storage.size allows (and the
// API server writes back for them).
func bytesOf(q string) (int64, bool) {
	m := quantity.FindStringSubmatch(q)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	mul := suffixMul[m[2]]
	if err != nil || n > (1<<62)/mul {
		return 0, false
	}
	return n * mul, true
}

// dataVolume is the member Pod's volume "data", mounted at etcd's data dir.
func (p clusterPlan) dataVolume(member string) map[string]any {
	if p.Storage.EmptyDir {
		return map[string]any{"name": "data", "emptyDir": map[string]any{}}
	}
	return map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": member}}
}

// memberClaim is a member's PVC, named after the member. ReadWriteOnce:
// one member's etcd is its only user.
func (p clusterPlan) memberClaim(member string) []byte {
	spec := map[string]any{
		"accessModes": []string{"ReadWriteOnce"},
		"resources":   map[string]any{"requests": map[string]any{"storage": p.Storage.Size}},
	}
	if p.Storage.Class != "" {
		spec["storageClassName"] = p.Storage.Class
	}
	return mustJSON(map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": p.meta(member, member), "spec": spec})
}

// claimView is what a pass saw of one member's PVC.
type claimView struct {
	Name     string
	Deleting bool
	Phase    string // Pending, Bound or Lost
	Size     string // requested: spec.resources.requests.storage
}

func (c *claim) cached() *cachedClaim {
	_, uid := ownerOf(c.Metadata.OwnerReferences)
	return &cachedClaim{claimView: claimView{Name: c.Metadata.Name, Deleting: c.Metadata.DeletionTimestamp != "", Phase: c.Status.Phase,
		Size: c.Spec.Resources.Requests.Storage}, OwnerUID: uid}
}

// decodeClaimEvent is the PVC watcher's decode function.
func decodeClaimEvent(raw json.RawMessage) (ownedEvent, string, error) {
	var c claim
	if err := json.Unmarshal(raw, &c); err != nil {
		return ownedEvent{}, "", err
	}
	cluster, uid := ownerOf(c.Metadata.OwnerReferences)
	return ownedEvent{Namespace: c.Metadata.Namespace, Name: c.Metadata.Name, Cluster: cluster, OwnerUID: uid, Claim: c.cached()}, c.Metadata.ResourceVersion, nil
}

// onVolume reports whether member m keeps its data on a PVC that is there
// to come back to.
func (d *decision) onVolume(m string) bool {
	c := d.claims[m]
	return c != nil && !c.Deleting
}

// restartOnVolumes: members back on their volumes, before anything needs a
// quorum: a member whose Pod is gone is made again on its PVC, as the same
// member (its data says who it is; etcd ignores --initial-cluster then); one
// whose Pod Failed (evicted) has it deleted first. Every member Pod deleted
// at once comes back this way, and the cluster regains its quorum by itself.
func (d *decision) restartOnVolumes() (step, bool) {
	names, ic := d.lastMembers()
	plan := d.plan(d.image())
	for _, m := range names {
		p := d.pods[m]
		switch {
		case !d.onVolume(m):
		case p == nil:
			s := step{Action: actRestartMember, Member: m, Image: plan.Image, InitialCluster: ic}
			if !d.svcs[m] {
				s.Create = append(s.Create, object{Resource: "services", Name: m, Body: plan.memberService(m)})
			}
			s.Create = append(s.Create, object{Resource: "pods", Name: m, Body: plan.joiningPod(m, ic)})
			s.News = []notice{{eventNormal, reasonMemberRestarted, fmt.Sprintf("member %s's Pod is gone; it is made again on its volume %s, as the same member with its data", m, m)}}
			return d.progress(phaseReplacing, reasonRestartingMember, fmt.Sprintf("making member %s's Pod again on its volume %s: the same member, with its data", m, m), s), true
		case (p.Phase == "Failed" || p.Phase == "Succeeded") && !p.Deleting:
			msg := fmt.Sprintf("deleting Pod %s, which is %s, to make it again on its volume %s", m, p.Phase, m)
			return d.progress(phaseReplacing, reasonRestartingMember, msg, step{Action: actDeletePod, Member: m, Delete: "pods"}), true
		}
	}
	return step{}, false
}

// lastMembers are the members a cluster last had, as far as anyone knows:
// etcd's member list if a member answered, else the last status's, else
// the members whose PVCs exist; with the --initial-cluster for their Pods.
func (d *decision) lastMembers() ([]string, string) {
	var peers []peer
	switch {
	case d.obs.Etcd.Listed != nil:
		for _, m := range d.obs.Etcd.Listed {
			peers = append(peers, peer{m.member(), m.PeerHost})
		}
	case len(d.in.Prev.Members) > 0:
		for _, m := range d.in.Prev.Members {
			peers = append(peers, peer{m.Name, m.Name})
		}
	default:
		for _, c := range d.obs.Claims {
			peers = append(peers, peer{c.Name, c.Name})
		}
	}
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = p.Name
	}
	return names, initialCluster(peers, d.tls() != nil)
}

// staleClaim returns a step that deletes the PVC of a member etcd no
// longer lists (known: the members etcd lists), if there is one.
func (d *decision) staleClaim(known map[string]bool) (step, bool) {
	for _, c := range d.obs.Claims {
		if !known[c.Name] && !c.Deleting {
			return d.progress(phaseScaling, reasonRemovingMember, fmt.Sprintf("deleting volume claim %s: its member was removed from etcd, and its data must never rejoin", c.Name),
				step{Action: actDeleteClaim, Member: c.Name, Delete: "persistentvolumeclaims"}), true
		}
	}
	return step{}, false
}

// expandVolumes asks for a larger spec.storage.size on each member's PVC.
// Whether a PVC can grow is its StorageClass's call (allowVolumeExpansion):
// where it cannot, the API server refuses the patch and the status says so.
func (d *decision) expandVolumes() (step, bool) {
	if d.in.Spec.Storage.EmptyDir {
		return step{}, false
	}
	want, _ := bytesOf(d.in.Spec.Storage.Size)
	for _, c := range d.obs.Claims {
		have, ok := bytesOf(c.Size)
		if c.Deleting || !ok || have >= want {
			continue
		}
		body := mustJSON(map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": d.in.Spec.Storage.Size}}}})
		msg := fmt.Sprintf("expanding volume %s from %s to %s", c.Name, c.Size, d.in.Spec.Storage.Size)
		return d.progress(phaseExpanding, reasonExpandingVolume, msg, step{Action: actExpandVolume, Member: c.Name, Size: d.in.Spec.Storage.Size,
			Patch: &patch{Path: "/api/v1/namespaces/" + d.in.Namespace + "/persistentvolumeclaims/" + c.Name, Body: body, ContentType: "application/merge-patch+json"}}), true
	}
	return step{}, false
}

// allOnVolumes reports whether every member the cluster last had keeps
// its data on a PVC that is there: then a lost quorum comes back by itself.
func (d *decision) allOnVolumes() bool {
	names, _ := d.lastMembers()
	for _, m := range names {
		if !d.onVolume(m) {
			return false
		}
	}
	return len(names) > 0
}
