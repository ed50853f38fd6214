// Manifests: what an EtcdCluster becomes.
//
// An operator turns one object that a user writes into the many objects that
// Kubernetes runs. Here a cluster of size N becomes N+1 Services and N Pods,
// built by hand as JSON so that every field a reader sees is one the API
// server receives. Three Kubernetes ideas meet in this file:
//
//   - Deterministic names. The same EtcdCluster always yields the same object
//     names, so creating them again after a restart or a replayed event is
//     answered 409 AlreadyExists instead of making a second cluster.
//   - ownerReferences. Every object names the EtcdCluster as its controller,
//     so deleting the EtcdCluster lets Kubernetes' garbage collector delete
//     the rest; the operator deletes only what a smaller cluster no longer
//     needs.
//   - Services before Pods. etcd resolves its peers' names when it starts;
//     each member's Service exists before any member's Pod does.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/etcd-operator/etcd-operator/internal/ca"
	"github.com/google/uuid"
)

const (
	group      = "coreos.com"
	apiVersion = group + "/v1"
	kind       = "EtcdCluster"

	clientPort = 2379
	peerPort   = 2380

	// The CRD (examples/crd.yaml) enforces the same bounds; the operator
	// checks again because it cannot know which CRD a cluster was given.
	minSize = 1
	maxSize = 7

	defaultVersion = "v3.6.16"

	// maxBaseLen leaves room for "-client" within the 63-character limit
	// of a DNS-1035 label, which Service names must be.
	maxBaseLen = 63 - len("-client")
	hashLen    = 8
)

// Label keys carried by every object the operator creates.
const (
	labelApp     = "app"
	labelCluster = "etcd.coreos.com/cluster"
	labelMember  = "etcd.coreos.com/member"
)

var (
	dns1035 = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	// An OCI image tag: at most 128 characters of [A-Za-z0-9_.-], not
	// starting with '.' or '-'. etcd's own tags look like v3.6.16.
	imageTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

	// tokenNamespace makes --initial-cluster-token a UUID derived from the
	// EtcdCluster's uid: equal for all members and across operator restarts,
	// different for a new cluster of the same name.
	tokenNamespace = uuid.MustParse("6f1c0f3e-6e0a-4f8f-9a55-0e3b7c1d2a10")
)

// clusterSpec is the validated form of an EtcdCluster's spec.
type clusterSpec struct {
	Size    int
	Version string
	Storage storageSpec
	Restore *restoreSpec // restore.go
	TLS     *tlsSpec     // tls.go; nil without spec.tls
	// Backup is spec.backup (backup.go), nil without one. It is read apart
	// from the rest, and BackupErr says why it cannot be: a cluster whose
	// spec.backup is wrong still runs, and the schedule reports the error.
	Backup    *backupSpec
	BackupErr error
}

// parseSpec decodes and validates a spec, spec.backup included: the one
// place a spec is read. Its errors name the field, since they end up in
// the EtcdCluster's status where the user reads them.
func parseSpec(raw json.RawMessage) (clusterSpec, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return clusterSpec{}, errors.New("spec is missing")
	}
	var s struct {
		Size    json.RawMessage `json:"size"`
		Version json.RawMessage `json:"version"`
		Storage json.RawMessage `json:"storage"`
		Restore json.RawMessage `json:"restore"`
		Backup  json.RawMessage `json:"backup"`
		TLS     json.RawMessage `json:"tls"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return clusterSpec{}, fmt.Errorf("spec must be an object, not %s", excerpt(raw))
	}
	var spec clusterSpec
	err := spec.parseMembers(s.Size, s.Version)
	if err == nil {
		spec.Storage, err = parseStorage(s.Storage)
	}
	if err == nil {
		spec.Restore, err = parseRestore(s.Restore)
	}
	if err == nil {
		spec.TLS, err = parseTLS(s.TLS, spec.Version)
	}
	if err == nil && spec.TLS == nil && spec.Restore != nil && spec.Restore.CredentialsSecret != "" {
		err = errors.New("spec.restore.credentialsSecret is for a cluster with spec.tls: without it, etcd's authentication is not used")
	}
	if err != nil {
		spec = clusterSpec{} // nothing half-read reaches decide
	}
	spec.Backup, spec.BackupErr = parseBackup(s.Backup)
	return spec, err
}

// parseMembers reads spec.size and spec.version.
func (spec *clusterSpec) parseMembers(size, version json.RawMessage) error {
	if len(size) == 0 || string(size) == "null" {
		return errors.New("spec.size is missing")
	}
	// A JSON integer is also a Go integer literal; 3.0, "3" and 1e1 are not.
	n, err := strconv.Atoi(string(size))
	if err != nil || n < minSize || n > maxSize {
		return fmt.Errorf("spec.size must be a whole number from %d to %d, not %s", minSize, maxSize, excerpt(size))
	}
	spec.Size, spec.Version = n, defaultVersion
	if len(version) > 0 && string(version) != "null" {
		if err := json.Unmarshal(version, &spec.Version); err != nil {
			return fmt.Errorf("spec.version must be a string, not %s", excerpt(version))
		}
		if !imageTag.MatchString(spec.Version) {
			return fmt.Errorf("spec.version %s is not a valid image tag (for example %s)", excerpt(version), defaultVersion)
		}
	}
	return nil
}

// excerpt quotes at most 40 bytes of a user's JSON value for a message.
func excerpt(raw []byte) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
}

// baseName maps an EtcdCluster name (a DNS-1123 subdomain of up to 253
// characters, possibly with dots or a leading digit) to a DNS-1035 label
// short enough to prefix every object name. Names that are already fine are
// kept as they are, so that a reader recognises "example-0" as a member of
// "example". Others are cleaned, shortened and given a hash of the full name,
// so that two different clusters never share a base name.
func baseName(name string) string {
	if len(name) <= maxBaseLen && dns1035.MatchString(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:hashLen]
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(name))
	clean = strings.TrimLeft(clean, "-0123456789")
	if max := maxBaseLen - hashLen - 1; len(clean) > max {
		clean = clean[:max]
	}
	clean = strings.TrimRight(clean, "-")
	if clean == "" {
		clean = "etcd"
	}
	return clean + "-" + suffix
}

// clusterPlan holds everything derived from one EtcdCluster to build its
// objects: their names' prefix, the owner they point at and the image new
// members run.
type clusterPlan struct {
	Base          string
	ClientService string
	Token         string
	Image         string
	Storage       storageSpec
	// Restore: new members start from this backup, fetched by init
	// containers of OperatorImage (restore.go).
	Restore *restoreSpec
	// TLS: members on TLS with certificates from Secrets (tls.go); nil
	// for plain http.
	TLS *tlsSpec
	// Trust is the ca.crt the members' Secrets are to hold: the CA, or
	// two of them while the CA rotates (carotation.go). SecretTrust is the
	// ca.Fingerprint of the ca.crt each member's Secret holds now, which a
	// Pod made now mounts: its trusted-cas annotation.
	Trust         []byte
	SecretTrust   map[string]string
	OperatorImage string
	owner         ownerReference
	namespace     string
}

func newClusterPlan(meta objectMeta, image string) clusterPlan {
	base := baseName(meta.Name)
	return clusterPlan{
		Base:          base,
		ClientService: base + "-client",
		Token:         uuid.NewSHA1(tokenNamespace, []byte(meta.UID)).String(),
		Image:         image,
		owner: ownerReference{
			APIVersion: apiVersion, Kind: kind,
			Name: meta.Name, UID: meta.UID,
			Controller: true, BlockOwnerDeletion: true,
		},
		namespace: meta.Namespace,
	}
}

// Member names are BASE-0, BASE-1, ...: a member's Pod, its Service and
// the host in its peer URL share the name.
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

// peerURL is where a member's peers reach it: its Service name, which
// cluster DNS resolves within the namespace; https with spec.tls (tls.go).
func peerURL(host string, tls bool) string {
	return fmt.Sprintf("%s://%s:%d", scheme(tls), host, peerPort)
}

func scheme(tls bool) string {
	if tls {
		return "https"
	}
	return "http"
}

// peer is one entry of etcd's --initial-cluster: a member's name and the
// host of its peer URL. A member etcd knows but that has not started yet
// has no name; its host stands in.
type peer struct{ Name, Host string }

// initialCluster is etcd's static bootstrap list: name=peerURL, ...
func initialCluster(peers []peer, tls bool) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.Name + "=" + peerURL(p.Host, tls)
	}
	return strings.Join(parts, ",")
}

// parseInitialCluster reads an --initial-cluster back.
func parseInitialCluster(s string) []peer {
	var peers []peer
	for _, part := range strings.Split(s, ",") {
		if name, u, ok := strings.Cut(part, "="); ok {
			_, host, _ := strings.Cut(u, "://")
			host, _, _ = strings.Cut(host, ":")
			peers = append(peers, peer{name, host})
		}
	}
	return peers
}

func (p clusterPlan) labels(member string) map[string]string {
	l := map[string]string{labelApp: "etcd", labelCluster: p.Base}
	if member != "" {
		l[labelMember] = member
	}
	return l
}

func (p clusterPlan) meta(name, member string) map[string]any {
	return map[string]any{
		"name":            name,
		"namespace":       p.namespace,
		"labels":          p.labels(member),
		"ownerReferences": []ownerReference{p.owner},
	}
}

var servicePorts = []map[string]any{
	{"name": "client", "port": clientPort, "targetPort": clientPort, "protocol": "TCP"},
	{"name": "peer", "port": peerPort, "targetPort": peerPort, "protocol": "TCP"},
}

// memberService gives one member a stable name that resolves to it alone:
// the host in its peer and client URLs.
func (p clusterPlan) memberService(member string) []byte {
	return mustJSON(map[string]any{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   p.meta(member, member),
		"spec": map[string]any{
			"type":     "ClusterIP",
			"selector": p.labels(member),
			"ports":    servicePorts,
			// Members must reach each other before any of them is
			// serving; do not wait for readiness to publish the address.
			"publishNotReadyAddresses": true,
		},
	})
}

// clientService is what applications use: port 2379 on any member.
func (p clusterPlan) clientService() []byte {
	return mustJSON(map[string]any{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   p.meta(p.ClientService, ""),
		"spec": map[string]any{
			"type":     "ClusterIP",
			"selector": p.labels(""),
			"ports":    servicePorts[:1],
		},
	})
}

// etcdCommand is the member's command line. A member of a new cluster
// starts with state "new" and every member in --initial-cluster (etcd's
// static bootstrap); one joining a running cluster with state "existing"
// and the members etcd listed when it was added, itself included.
func (p clusterPlan) etcdCommand(member, initialCluster, state string) []string {
	tls := p.TLS != nil
	return append([]string{
		"/usr/local/bin/etcd",
		"--name=" + member,
		"--data-dir=" + dataDir,
		"--initial-advertise-peer-urls=" + peerURL(member, tls),
		fmt.Sprintf("--listen-peer-urls=%s://0.0.0.0:%d", scheme(tls), peerPort),
		fmt.Sprintf("--listen-client-urls=%s://0.0.0.0:%d", scheme(tls), clientPort),
		fmt.Sprintf("--advertise-client-urls=%s://%s:%d", scheme(tls), member, clientPort),
		"--initial-cluster=" + initialCluster,
		"--initial-cluster-state=" + state,
		// The token keeps members of different clusters from joining each
		// other by mistake; all members of one cluster must agree on it.
		"--initial-cluster-token=" + p.Token,
	}, p.tlsFlags()...)
}

// memberPod is a member of a new cluster, bootstrapped with the others.
func (p clusterPlan) memberPod(member, initialCluster string) []byte {
	return p.pod(member, initialCluster, "new")
}

// joiningPod is a member added to a running cluster.
func (p clusterPlan) joiningPod(member, initialCluster string) []byte {
	return p.pod(member, initialCluster, "existing")
}

// probe checks one of etcd's HTTP health endpoints: on the client port,
// or with spec.tls on the metrics port (tls.go), since the kubelet's
// probes present no credentials.
func probe(path string, port, period, failures int) map[string]any {
	return map[string]any{
		"httpGet":          map[string]any{"path": path, "port": port, "scheme": "HTTP"},
		"periodSeconds":    period,
		"timeoutSeconds":   5,
		"failureThreshold": failures,
	}
}

func (p clusterPlan) pod(member, initialCluster, state string) []byte {
	spec := map[string]any{
		// Always, not the 2016 demo's Never: a crashed etcd restarts in
		// the same Pod with the same volume, so it rejoins with its
		// data. With Never the member would be lost for good, and this
		// operator would have to replace the member.
		"restartPolicy": "Always",
		// Service links would put one set of variables per Service in
		// the namespace into etcd's environment, where names starting
		// ETCD_ are read as etcd flags.
		"enableServiceLinks": false,
		// etcd never talks to the Kubernetes API: a token in the Pod
		// could only be stolen.
		"automountServiceAccountToken": false,
		"containers":                   []map[string]any{p.etcdContainer(member, initialCluster, state)},
		"volumes":                      append([]map[string]any{p.dataVolume(member)}, p.tlsVolumes(member)...),
	}
	// Only the members of a new cluster are restored: one joining later
	// gets the data from its peers, as always.
	if p.Restore != nil && state == "new" {
		spec["initContainers"] = p.restoreContainers(member, initialCluster)
	}
	meta := p.meta(member, member)
	if p.TLS != nil && len(p.Trust) > 0 {
		// The Pod mounts the member's Secret as it is: its ca.crt, not the
		// one it is to hold once certificates has renewed it.
		fp := ca.Fingerprint(p.Trust)
		if t, ok := p.SecretTrust[member]; ok {
			fp = t
		}
		meta["annotations"] = map[string]string{annotationTrust: fp}
	}
	return mustJSON(map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   meta,
		"spec":       spec,
	})
}

// etcdContainer is a member Pod's one container: etcd, its ports, its data
// and its probes.
func (p clusterPlan) etcdContainer(member, initialCluster, state string) map[string]any {
	probePort := clientPort
	if p.TLS != nil {
		probePort = metricsPort
	}
	return map[string]any{
		"name":    "etcd",
		"image":   p.Image,
		"command": p.etcdCommand(member, initialCluster, state),
		"ports": append([]map[string]any{
			{"name": "client", "containerPort": clientPort, "protocol": "TCP"},
			{"name": "peer", "containerPort": peerPort, "protocol": "TCP"},
		}, p.tlsPorts()...),
		"volumeMounts": append([]map[string]any{{"name": "data", "mountPath": dataDir}}, p.tlsMounts()...),
		// The end of etcd's log when it fails, in the Pod's status:
		// the operator reads there whether a member lost its data
		// (observe.go, dataLostSigns).
		"terminationMessagePolicy": "FallbackToLogsOnError",
		// etcd 3.6's /livez fails only when the process itself is
		// stuck (a local read); /readyz also needs a leader, a
		// linearizable read and a voting member. The member
		// Services publish not-ready addresses, so peers find each
		// other before any is ready: a readiness probe no longer
		// stops a cluster from forming, and it keeps the client
		// Service to members that can serve.
		//
		// The startup probe gives a member 5 minutes to answer
		// at all (etcd serves clients only once it has joined the
		// cluster) before liveness checks may restart it.
		"startupProbe":   probe("/livez", probePort, 2, 150),
		"livenessProbe":  probe("/livez", probePort, 10, 6),
		"readinessProbe": probe("/readyz", probePort, 2, 2),
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps, strings and numbers: cannot fail
	}
	return b
}
