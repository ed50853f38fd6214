// Types: the JSON shapes that several files share.
//
// The Kubernetes API is JSON, and a client needs no generated types to
// speak it: each type here declares only the fields the operator reads
// or writes, and encoding/json ignores the rest, so an API server of a
// newer version never breaks decoding. Here are the EtcdCluster (its spec
// kept raw, parsed by parseSpec in manifests.go), its status, and the
// three kinds of object it owns: Pods, Services and PVCs, as their watches
// deliver them.
//
// A member Pod takes three shapes on its way from the watch to decide,
// each for a reason:
//
//   - pod, below: the wire JSON, decoded once per watch event and dropped.
//   - cachedPod (cache.go): what the cache keeps of it, a podView and the
//     cache's bookkeeping (the owner's uid, which list saw it last, when
//     its deletion's grace period ends).
//   - podView (decide.go): what decide reads, made from a cachedPod when a
//     pass looks, since whether a deletion is overdue depends on the
//     clock, and decide reads none.
package main

import (
	"encoding/json"
	"strings"
	"time"
)

// EtcdCluster is the custom resource that examples/crd.yaml defines. Spec is
// kept raw so that a malformed spec is reported by the control loop (which
// can name the object and the field) instead of breaking the stream.
type EtcdCluster struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   objectMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
	Status     json.RawMessage `json:"status,omitempty"`
}

type objectMeta struct {
	Name            string `json:"name"`
	Namespace       string `json:"namespace,omitempty"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Generation      int64  `json:"generation,omitempty"`
	// DeletionTimestamp is set once the object is being deleted.
	DeletionTimestamp string            `json:"deletionTimestamp,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
}

// key names a cluster in logs and in the control loop's bookkeeping.
func (ec *EtcdCluster) key() string { return ec.Metadata.Namespace + "/" + ec.Metadata.Name }

// ownerReference makes an object part of the EtcdCluster that controls
// it: Kubernetes' garbage collector deletes it with its owner.
type ownerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         bool   `json:"controller"`
	BlockOwnerDeletion bool   `json:"blockOwnerDeletion"`
}

// ownedMeta is the metadata the operator reads of an object it owns.
type ownedMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace"`
	ResourceVersion   string            `json:"resourceVersion"`
	DeletionTimestamp string            `json:"deletionTimestamp"`
	OwnerReferences   []ownerReference  `json:"ownerReferences"`
	Annotations       map[string]string `json:"annotations"`
}

// pod is the part of a core/v1 Pod the operator reads.
type pod struct {
	Metadata ownedMeta `json:"metadata"`
	Spec     struct {
		Containers []struct {
			Name    string   `json:"name"`
			Image   string   `json:"image"`
			Command []string `json:"command"`
		} `json:"containers"`
		Volumes []struct {
			Name                  string `json:"name"`
			PersistentVolumeClaim *struct {
				ClaimName string `json:"claimName"`
			} `json:"persistentVolumeClaim"`
		} `json:"volumes"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			Name  string `json:"name"`
			State struct {
				Waiting *struct {
					Reason  string `json:"reason"`
					Message string `json:"message"`
				} `json:"waiting"`
			} `json:"state"`
			LastState struct {
				Terminated *struct {
					Message string `json:"message"`
				} `json:"terminated"`
			} `json:"lastState"`
		} `json:"containerStatuses"`
		InitContainerStatuses []struct {
			Name  string `json:"name"`
			State struct {
				Waiting *struct {
					Reason string `json:"reason"`
				} `json:"waiting"`
			} `json:"state"`
		} `json:"initContainerStatuses"`
	} `json:"status"`
}

func (p *pod) ready() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// owner is the name of the EtcdCluster that controls the Pod, if any.
func (p *pod) owner() (name, uid string) { return ownerOf(p.Metadata.OwnerReferences) }

// ownerOf is the EtcdCluster among an object's controlling owners, if any.
func ownerOf(refs []ownerReference) (name, uid string) {
	for _, o := range refs {
		if o.Controller && o.Kind == kind && strings.HasPrefix(o.APIVersion, group+"/") {
			return o.Name, o.UID
		}
	}
	return "", ""
}

// service is the part of a core/v1 Service the operator reads.
type service struct {
	Metadata ownedMeta `json:"metadata"`
}

// owner is the EtcdCluster that controls the Service, if any.
func (s *service) owner() (name, uid string) { return ownerOf(s.Metadata.OwnerReferences) }

// claim is the part of a PersistentVolumeClaim the operator reads.
type claim struct {
	Metadata ownedMeta `json:"metadata"`
	Spec     struct {
		Resources struct {
			Requests struct {
				Storage string `json:"storage"`
			} `json:"requests"`
		} `json:"resources"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// clusterStatus is the EtcdCluster's status, by the API conventions: a
// phase for people, conditions for tools (`kubectl wait
// --for=condition=Available`), and observedGeneration to say which spec it
// describes. No omitempty: in a JSON merge patch an absent field keeps its
// old value, and null removes it.
type clusterStatus struct {
	Phase          string         `json:"phase"`
	Message        string         `json:"message"`
	Ready          string         `json:"ready"` // "2/3", for the READY column
	ReadyMembers   int            `json:"readyMembers"`
	Members        []memberStatus `json:"members"`
	ClusterID      string         `json:"clusterID"`
	CurrentVersion string         `json:"currentVersion"`
	Conditions     []condition    `json:"conditions"`
	// ObservedGeneration is the metadata.generation this status describes.
	ObservedGeneration int64 `json:"observedGeneration"`
	// Restore is the backup a restored cluster started from (restore.go).
	Restore *restoreRecord `json:"restore"`
	// TLS says how the members' certificates and etcd's authentication
	// stand (tls.go); null without TLS.
	TLS *tlsStatus `json:"tls"`
}

type tlsStatus struct {
	// Auth is "enabled", or "off" until enableAuth is done (auth.go).
	Auth string `json:"auth"`
	// CredentialsSecret holds the root user's name and password and the
	// CA to trust: what etcdctl needs.
	CredentialsSecret string `json:"credentialsSecret"`
	// User is the user the Secret holds; CredentialsRotation the
	// spec.tls.credentialsRotation its credentials answer (credentials.go).
	User                string `json:"user,omitempty"`
	CredentialsRotation string `json:"credentialsRotation,omitempty"`
	CANotAfter          string `json:"caNotAfter"`
	// CARotation says where a CA rotation is, if one is under way
	// (carotation.go).
	CARotation   string              `json:"caRotation,omitempty"`
	Certificates []certificateStatus `json:"certificates"`
}

type certificateStatus struct {
	Secret   string `json:"secret"`
	NotAfter string `json:"notAfter"`
	Problem  string `json:"problem,omitempty"`
}

type memberStatus struct {
	Name    string `json:"name"`
	ID      string `json:"id,omitempty"` // etcd's member ID, in hex as etcdctl prints it
	Ready   bool   `json:"ready"`
	Leader  bool   `json:"leader,omitempty"`
	Learner bool   `json:"learner,omitempty"`
	Version string `json:"version,omitempty"`
}

type condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"` // True, False or Unknown
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	LastTransitionTime string `json:"lastTransitionTime"`
	ObservedGeneration int64  `json:"observedGeneration"`
}

// backupStatus is the part of the status that the backup schedule writes
// (backupschedule.go), and the passes leave alone.
type backupStatus struct {
	Last    *backupRecord  `json:"lastBackup"`
	Failure *backupFailure `json:"backupFailure"`
	// specError is no part of the status: the spec.backup error the
	// schedule reported last, not to report it again.
	specError string
}

// readStatus is the one reader of an EtcdCluster's status: the passes'
// part and the backup schedule's, from one decode.
func readStatus(raw json.RawMessage) (clusterStatus, backupStatus) {
	var st struct {
		clusterStatus
		backupStatus
	}
	if json.Unmarshal(raw, &st) != nil {
		// A foreign status (an older operator's members: ["name"]) keeps
		// what it can say; encoding/json has decoded every field it could.
		var old struct {
			Phase              string `json:"phase"`
			ObservedGeneration int64  `json:"observedGeneration"`
		}
		_ = json.Unmarshal(raw, &old)
		return clusterStatus{Phase: old.Phase, ObservedGeneration: old.ObservedGeneration}, st.backupStatus
	}
	return st.clusterStatus, st.backupStatus
}

// status is the passes' part of the status.
func (ec *EtcdCluster) status() clusterStatus {
	st, _ := readStatus(ec.Status)
	return st
}

// condition returns the condition of the given type, if present.
func (st clusterStatus) condition(typ string) (condition, bool) {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return condition{}, false
}

// stampTransitions sets lastTransitionTime on conditions that changed.
func (st *clusterStatus) stampTransitions(now time.Time) {
	for i := range st.Conditions {
		if st.Conditions[i].LastTransitionTime == "" {
			st.Conditions[i].LastTransitionTime = now.UTC().Format(time.RFC3339)
		}
	}
}

// backupRecord is status.lastBackup: the last backup that succeeded.
type backupRecord struct {
	Time     string `json:"time"` // when the snapshot was asked for, RFC 3339
	Key      string `json:"key"`  // the object's key in the bucket
	Revision int64  `json:"revision"`
	Size     int64  `json:"size"`   // of the object
	SHA256   string `json:"sha256"` // of the object, as sha256sum prints it
	Duration string `json:"duration"`
	Member   string `json:"member"`        // the Pod whose etcd made the snapshot
	Now      string `json:"now,omitempty"` // the spec.backup.now it answers
}

// backupFailure is status.backupFailure: why the last try failed, until
// one succeeds.
type backupFailure struct {
	Time     string `json:"time"`
	Message  string `json:"message"`
	Attempts int    `json:"attempts"` // failures in a row
	// Generation is the metadata.generation of the spec that failed: a
	// new spec is tried at once.
	Generation int64 `json:"generation"`
}

// restoreRecord is status.restore: the backup a cluster was restored from,
// once the operator read all of it and found it good.
type restoreRecord struct {
	Key      string `json:"key"`
	SHA256   string `json:"sha256"` // of the object
	Size     int64  `json:"size"`   // of the snapshot etcdutl restores
	Verified string `json:"verified"`
}
