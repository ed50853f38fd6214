// A model of etcd, the kubelet and the operator's act() for the
// deterministic simulation in sim_test.go.
//
// The model is one etcd cluster and the Pods and Services of one
// EtcdCluster. It keeps only what the operator's rules depend on, and each
// rule says which etcd or Kubernetes behaviour it stands for:
//
//   - etcd: member IDs, learners (one at a time), promotion of a learner
//     that has caught up, a leader only with a quorum of started, running
//     voters, the strict reconfiguration checks, the checks a starting
//     member makes of its flags and data, and the cluster version, which
//     only goes up.
//   - the kubelet: scheduling (a cordoned node leaves new Pods Pending),
//     image pulls, restarts with back-off, readiness probes that lag,
//     graceful and stuck deletion, eviction. A member's data lives on the
//     Pod's emptyDir and goes with it, or on its PersistentVolumeClaim
//     (half the schedules): a Pod is scheduled only while its claim is
//     there and not being deleted; a claim deleted while a Pod uses it
//     stays until the Pod is gone (pvc-protection); a node lost takes its
//     local volume with it. The PVC watch may lag behind the Pod watch: a
//     claim's deletion by someone else can be seen a tick late.
//   - the operator: observe, the real decide, act and the status write of
//     main.go, one request at a time, so that the operator can die between
//     any two of them.
//   - TLS (spec.tls, a third of the schedules): the cluster's Secrets (its
//     CA, present, lost or corrupt; BASE-root's user and password; a
//     certificate per member, dated in simulated time), the files the
//     kubelet writes from a member's Secret into its Pod (a tick after the
//     Secret changes), and etcd's authentication (its users and their
//     roles, auth enable; a credentials rotation's users). A member talks
//     to its peers only with a certificate that is valid, of a CA the
//     cluster takes, with the key that matches, and trusting the CA the
//     cluster issues from itself (etcd reads its CA file only when it
//     starts, its certificate at every handshake); else it is cut off: it
//     runs, but answers no one and counts for no quorum. Peer URLs are
//     https, and a Pod's flags (in the body the operator sends) say
//     whether it runs TLS. A CA rotation (spec.tls.caRotation) is modelled
//     with sets of CAs (simTrust): BASE-ca's next and previous CA, the CAs
//     of each ca.crt and of each Pod's etcd, and the Pods' trusted-cas
//     annotation; checkTrust holds that no two members that run can fail
//     to verify each other.
//
// Time moves only in tick(): a pass of the operator takes no time, and
// nothing happens inside a pass but what the operator does.
package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/ca"
	"github.com/etcd-operator/etcd-operator/internal/kube"
)

const (
	simBase  = "sim"
	simToken = "sim-token" // --initial-cluster-token: bootstrap member IDs hash it
)

// simMember is one member in etcd's member list.
type simMember struct {
	ID      uint64
	Name    string // published once the member has started; etcd lists "" before
	Host    string // the host of its peer URL: its Pod's and Service's name
	HTTPS   bool   // its peer URL is https (spec.tls)
	Learner bool
}

func (mb *simMember) started() bool { return mb.Name != "" }

// simEtcd is the etcd cluster. It exists while some Pod holds a member's
// data: with every emptyDir gone, so is the cluster.
type simEtcd struct {
	ID      uint64
	Members []*simMember // sorted by ID, the order of etcd's member list
	Leader  uint64       // elected at a tick; checked for validity when read
	Minor   int          // the cluster version's minor: it never goes down
	Initial string       // the --initial-cluster it was bootstrapped with
	// CA is the CA whose certificates its members take (the one its first
	// member started with, then the one a CA rotation switched to); 0 for
	// a cluster on plain http. Prev is the CA a rotation switched from,
	// until it is retired: its certificates are taken too.
	CA, Prev int
	Auth     simAuth
}

// simAuth is etcd's authentication: its users, and whether auth is on.
// It lives in etcd's data, and goes with the cluster.
type simAuth struct {
	Users   map[string]*simUser
	Enabled bool
}

type simUser struct {
	Password string
	Root     bool // has the role root
}

// user is the user of that name, nil if etcd has none.
func (a *simAuth) user(name string) *simUser { return a.Users[name] }

func (c *simEtcd) byID(id uint64) *simMember {
	for _, mb := range c.Members {
		if mb.ID == id {
			return mb
		}
	}
	return nil
}

func (c *simEtcd) byHost(host string) *simMember {
	for _, mb := range c.Members {
		if mb.Host == host {
			return mb
		}
	}
	return nil
}

func (c *simEtcd) voters() int {
	n := 0
	for _, mb := range c.Members {
		if !mb.Learner {
			n++
		}
	}
	return n
}

// simClaim is one member's PVC and the data on its volume.
type simClaim struct {
	Deleting bool   // deletionTimestamp set: gone once no Pod uses it
	Lost     bool   // its node is gone (a local volume): no Pod runs on it again
	Data     uint64 // the member whose data the volume holds; 0: none
	stale    bool   // the data of a member of a cluster that is gone
}

// simPod is one member Pod and the etcd process in it.
type simPod struct {
	Name, Image           string
	Claim                 string // the PVC its data is on; "" on emptyDir
	State, InitialCluster string // the etcd flags it was created with
	Phase                 string // Pending, Running or Failed
	Scheduled             bool   // bound to a node (a cordoned node takes no new Pods)
	Deleting              bool   // deletionTimestamp set
	Stuck                 bool   // its node is lost: deleting forever
	GoneAt                int    // tick at which a graceful deletion completes
	Waiting, WaitingMsg   string
	Restarts              int
	Ready                 bool // the kubelet's last readiness probe
	ran                   bool // the container ran once: restarts count from then
	Up                    bool // the etcd process runs and serves
	UpSince               int  // tick it started: a learner has caught up a tick later
	Data                  uint64
	Exit                  string // why etcd last exited, for traces and liveness reports
	brokenCrashed         bool   // the broken release crashed on this Pod once
	// staleData: the data of a member of a cluster that is gone (Data is
	// then 0). A cluster bootstrapped again has the same member IDs, but
	// this data is not of it: etcd fails on it.
	staleData bool
	// TLS: the Pod runs etcd with the TLS flags (its command line says
	// --peer-client-cert-auth). files are the certificate, key and ca.crt
	// the kubelet wrote from the member's Secret, nil until the Secret
	// could be mounted; trust is the CA of the ca.crt etcd read when it
	// started.
	TLS   bool
	files *simLeaf
	trust simTrust
	// annotTrust is the Pod's etcd.coreos.com/trusted-cas, as the
	// operator made it.
	annotTrust string
}

// simLeaf is a member's certificate, key and ca.crt, as its Secret (or the
// files written from it) holds them.
type simLeaf struct {
	Serial              int      // one per certificate made
	CA                  int      // the CA that signed it: a CA of the cluster's, or simForeignCA
	Trust               simTrust // the CAs of its ca.crt
	NotBefore, NotAfter time.Time
	IssuedAt            time.Time // when its Secret was written (issued-at)
	BadKey              bool      // the key does not match the certificate
}

// simForeignCA stands for a CA that is not the cluster's.
const simForeignCA = -1

// simTrust is a set of CAs, a ca.crt: bit n-1 for simCA(n), the top bit
// for a foreign CA.
type simTrust uint64

const simForeignTrust simTrust = 1 << 63

func trustOf(gen int) simTrust {
	switch {
	case gen == simForeignCA:
		return simForeignTrust
	case gen <= 0:
		return 0
	}
	return 1 << (gen - 1)
}

func (t simTrust) has(gen int) bool { return trustOf(gen) != 0 && t&trustOf(gen) != 0 }

// first is the first CA of the set, simForeignCA for a foreign one
// alone, 0 for none.
func (t simTrust) first() int {
	for g := 1; g < 64; g++ {
		if t.has(g) {
			return g
		}
	}
	if t&simForeignTrust != 0 {
		return simForeignCA
	}
	return 0
}

// pem is the ca.crt that holds these CAs.
func (t simTrust) pem() []byte {
	var out []byte
	for g := 1; g < 64; g++ {
		if t.has(g) {
			out = append(out, simCA(g).CertPEM()...)
		}
	}
	if t&simForeignTrust != 0 {
		out = append(out, "-----BEGIN CERTIFICATE-----\nYW5vdGhlciBDQQ==\n-----END CERTIFICATE-----\n"...)
	}
	return out
}

func (t simTrust) String() string {
	var gens []string
	for g := 1; g < 64; g++ {
		if t.has(g) {
			gens = append(gens, fmt.Sprint(g))
		}
	}
	if t&simForeignTrust != 0 {
		gens = append(gens, "foreign")
	}
	return "{" + strings.Join(gens, ",") + "}"
}

// simTrustOf is the set of the model's CAs a ca.crt holds.
func simTrustOf(bundle []byte, made int) simTrust {
	var t simTrust
	for g := 1; g <= made; g++ {
		if ca.Holds(bundle, simCA(g)) {
			t |= trustOf(g)
		}
	}
	return t
}

// simGenOfPEM is the number of the CA whose certificate is cert, 0 if none.
func simGenOfPEM(cert []byte, made int) int {
	for g := 1; g <= made; g++ {
		if string(simCA(g).CertPEM()) == string(cert) {
			return g
		}
	}
	return 0
}

// simCASecret is BASE-ca: which of the CAs made so far it holds (0: none
// made yet), and whether it is gone or unreadable; in a CA rotation
// (carotation.go) the next CA and the previous one (0: none), when the
// switch was, and the spec.tls.caRotation it answers.
type simCASecret struct {
	Gen            int
	Lost, Corrupt  bool
	Next, Previous int
	SwitchedAt     time.Time
	Rotation       string
}

func (c simCASecret) ok() bool { return c.Gen != 0 && !c.Lost && !c.Corrupt }

// simCAs are real CAs (decide reads a CA's NotAfter and hands it to the
// Secrets it asks for): the n-th CA the model makes is simCAs[n-1], made
// once per process, since making one costs a key.
var simCAs struct {
	sync.Mutex
	list []*ca.CA
}

func simCA(gen int) *ca.CA {
	simCAs.Lock()
	defer simCAs.Unlock()
	for len(simCAs.list) < gen {
		c, err := ca.New(fmt.Sprintf("sim etcd CA %d", len(simCAs.list)+1), defaultCALifetime, simTime(0))
		if err != nil {
			panic(err)
		}
		simCAs.list = append(simCAs.list, c)
	}
	return simCAs.list[gen-1]
}

// simGenOf is the number of a CA simCA made, 0 for any other.
func simGenOf(c *ca.CA) int {
	simCAs.Lock()
	defer simCAs.Unlock()
	for i, o := range simCAs.list {
		if o == c {
			return i + 1
		}
	}
	return 0
}

// simJWT are the token keys of BASE-ca.
var simJWT = map[string][]byte{"jwt.key": []byte("sim jwt key"), "jwt.pub": []byte("sim jwt pub")}

// view is the podView observe.go builds from the Pod's JSON.
func (p *simPod) view() podView {
	// A stuck Pod's grace period ends and it stays: overdue.
	return podView{Name: p.Name, Phase: p.Phase, Ready: p.Ready, Deleting: p.Deleting, Overdue: p.Stuck, Image: p.Image,
		Waiting: p.Waiting, WaitingMessage: p.WaitingMsg,
		InitialCluster: p.InitialCluster, State: p.State, Claim: p.Claim,
		// The kubelet keeps etcd's last words (FallbackToLogsOnError).
		DataLost: dataLostSign(p.Exit), TLS: p.TLS, Trust: p.annotTrust}
}

// Versions. Tags are spec.version values; unpullable and broken ones model
// the two ways a version cannot run.
const (
	simV36     = "v3.6.16"
	simV37     = "v3.7.3"
	simRefused = "v3.9.0"  // two minors up: the operator must refuse it
	simNoImage = "v3.7.99" // no registry has it: ImagePullBackOff
	simBrokenV = "v3.7.1"  // a broken release: runs a tick, then crash-loops
)

func tagOf(image string) string { return image[strings.LastIndexByte(image, ':')+1:] }

func minorOf(tag string) int {
	v, ok := parseVersion(tag)
	if !ok || v[0] != 3 {
		return -100
	}
	return v[1]
}

func brokenImage(image string) bool { return strings.HasSuffix(image, ":"+simBrokenV) }

// model is the world of one simulated run.
type model struct {
	rng     *rand.Rand
	now     int
	spec    clusterSpec
	gen     int64
	status  clusterStatus // the EtcdCluster's status: in.Prev of the next pass
	pods    map[string]*simPod
	svcs    map[string]bool
	volumes bool                 // members keep their data on PVCs
	claims  map[string]*simClaim // by name: the member's
	// lagged: the operator's view of claims whose change by someone else
	// its PVC watch has not shown yet, until tick lagUntil.
	lagged   map[string]*simClaim
	lagUntil int
	etcd     *simEtcd
	cordoned bool
	// formed: the operator has recorded a cluster ID (a status written
	// with it, or the annotation): what it saw but did not record, a
	// restart forgets. statusLost: the status
	// was lost since (the operator cannot know the cluster formed).
	formed, statusLost bool
	// formedID is the cluster ID the operator recorded in the
	// EtcdCluster's annotations: a lost status keeps it.
	formedID string
	usedIDs  map[uint64]bool
	ran      map[uint64]string // member ID -> the version its process last ran
	accepted map[string]bool   // spec versions that could run when set

	// The cluster's Secrets (spec.tls): BASE-ca, BASE-root's data (nil
	// while there is none), and MEMBER-tls by member.
	// tlsSpec is the schedule's spec.tls, for spec changes that put it
	// back.
	ca       simCASecret
	cas      int // CAs made
	root     map[string]string
	leaves   map[string]*simLeaf
	serials  int
	tlsSpec  *tlsSpec
	renewals int
	// retiredCAs counts the CA rotations done (previous.crt nulled).
	retiredCAs int
	// rotations: the values spec.tls.credentialsRotation took.
	rotations int
	// tlsBugs: the schedule was drawn with -sim.tlsbugs. Without it no
	// certificate ages before the cluster has formed, since the operator
	// renews none before then.
	tlsBugs bool

	// The pass under way: requests made, the request the operator dies
	// before (-1: none), whether status writes are lost.
	reqs, killAt int
	lose         bool

	fails  []*simFailure // the first failure of each kind, in order
	trace  func(format string, args ...any)
	passes int // passes run
	at     int // the schedule entry being run
	quiet  bool
	last   map[string]string // traceOnce's last line by key
}

// newModel: the members keep their data on PVCs if volumes, else on
// emptyDir.
func newModel(seed uint64, spec clusterSpec, volumes bool) *model {
	return newTLSModel(seed, spec, volumes, spec.TLS)
}

// newTLSModel: tls is the spec.tls that spec changes set (spec.TLS is
// the one the cluster is created with).
func newTLSModel(seed uint64, spec clusterSpec, volumes bool, tls *tlsSpec) *model {
	spec.Storage = storageSpec{EmptyDir: true}
	if volumes {
		spec.Storage = storageSpec{Size: defaultStorageSize}
	}
	m := &model{
		rng:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		spec: spec, gen: 1, volumes: volumes,
		pods: map[string]*simPod{}, svcs: map[string]bool{}, claims: map[string]*simClaim{}, lagged: map[string]*simClaim{},
		usedIDs: map[uint64]bool{}, ran: map[uint64]string{}, accepted: map[string]bool{},
		killAt: -1, leaves: map[string]*simLeaf{}, tlsSpec: tls,
	}
	if m.runnable(spec.Version) {
		m.accepted[spec.Version] = true
	}
	return m
}

func (m *model) tracef(format string, args ...any) {
	if m.trace != nil {
		m.trace(fmt.Sprintf("t%d ", m.now)+format, args...)
	}
}

// traceOnce traces a line unless, in the quiet tail, it repeats the last
// one of its key.
func (m *model) traceOnce(key, line string) {
	if m.trace == nil || m.quiet && m.last[key] == line {
		return
	}
	if m.last == nil {
		m.last = map[string]string{}
	}
	m.last[key] = line
	m.tracef("%s", line)
}

// failf records a violated rule, the first of each kind. The run goes on:
// one violation should not hide the others.
func (m *model) failf(kind, format string, args ...any) {
	for _, f := range m.fails {
		if f.Kind == kind {
			return
		}
	}
	f := &simFailure{Kind: kind, Detail: fmt.Sprintf(format, args...), At: m.at}
	m.fails = append(m.fails, f)
	m.tracef("FAIL %s: %s", kind, f.Detail)
}

func (m *model) podNames() []string   { return slices.Sorted(maps.Keys(m.pods)) }
func (m *model) claimNames() []string { return slices.Sorted(maps.Keys(m.claims)) }
func (m *model) svcNames() []string   { return slices.Sorted(maps.Keys(m.svcs)) }

// used: a Pod mounts claim name.
func (m *model) used(name string) bool {
	for _, p := range m.pods {
		if p.Claim == name {
			return true
		}
	}
	return false
}

// ---- etcd ----

// running: the member's process runs in its Pod, with its data, and can
// talk to its peers.
func (m *model) running(mb *simMember) bool {
	p := m.pods[mb.Host]
	return p != nil && p.Up && p.Data == mb.ID && (!p.TLS && !mb.HTTPS || m.cutOff(p, mb) == "")
}

// cutOff says why the member in p cannot talk to its peers, "" if it can:
// it runs the other scheme than its peer URL says, or, on TLS, its
// certificate (the files etcd reads at each handshake) has expired, is
// not of the CA the cluster trusts or has the wrong key, or etcd trusts
// another CA (its ca.crt when it started). Peers refuse such a member's
// handshakes, and it theirs.
func (m *model) cutOff(p *simPod, mb *simMember) string {
	f := p.files
	switch {
	case p.TLS != mb.HTTPS:
		return "scheme: its Pod runs " + scheme(p.TLS) + ", its peer URL is " + scheme(mb.HTTPS)
	case !p.TLS:
		return ""
	case f == nil:
		return "no certificate"
	case f.BadKey:
		return "its key does not match its certificate"
	case simTime(m.now).After(f.NotAfter):
		return "its certificate has expired"
	case m.etcd == nil || f.CA != m.etcd.CA && (m.etcd.Prev == 0 || f.CA != m.etcd.Prev):
		return "its certificate is not of the CA the cluster trusts"
	case !p.trust.has(m.etcd.CA):
		return "it trusts another CA"
	}
	return ""
}

// checkTrust is the rule of a CA rotation: no two members that run, with
// certificates of the cluster's CAs, are unable to talk. etcd checks a
// peer's certificate against the CAs it read when it started, so each must
// trust the CA of the other's certificate.
func (m *model) checkTrust() {
	if m.etcd == nil {
		return
	}
	var up []*simPod
	for _, n := range m.podNames() {
		p := m.pods[n]
		if mb := m.etcd.byHost(n); mb != nil && p.TLS && p.Up && p.Data == mb.ID && m.cutOff(p, mb) == "" {
			up = append(up, p)
		}
	}
	for i, p := range up {
		for _, q := range up[i+1:] {
			for _, pair := range [][2]*simPod{{p, q}, {q, p}} {
				if a, b := pair[0], pair[1]; !a.trust.has(b.files.CA) {
					m.failf("trust-split", "member %s trusts CAs %s, and member %s shows a certificate of CA %d: they cannot talk", a.Name, a.trust, b.Name, b.files.CA)
				}
			}
		}
	}
}

func (m *model) runningVoters() int {
	n := 0
	for _, mb := range m.etcd.Members {
		if !mb.Learner && m.running(mb) {
			n++
		}
	}
	return n
}

// leaderID is the leader, 0 when there is none: a leader that stopped, was
// removed, or lost its quorum (etcd's check-quorum) leads no more. A new one
// is elected at the next tick.
func (m *model) leaderID() uint64 {
	c := m.etcd
	if c == nil || c.Leader == 0 {
		return 0
	}
	l := c.byID(c.Leader)
	if l == nil || l.Learner || !m.running(l) || m.runningVoters() < quorum(c.voters()) {
		return 0
	}
	return l.ID
}

// elect: with a quorum of started, running voters, one of them leads.
func (m *model) elect() {
	c := m.etcd
	if c == nil || m.leaderID() != 0 {
		return
	}
	c.Leader = 0
	var up []*simMember
	for _, mb := range c.Members {
		if !mb.Learner && m.running(mb) {
			up = append(up, mb)
		}
	}
	if len(up) == 0 || len(up) < quorum(c.voters()) {
		return
	}
	c.Leader = up[m.rng.IntN(len(up))].ID
	m.tracef("etcd: %s elected leader", c.byID(c.Leader).Host)
}

// newID is an added member's ID: etcd hashes the peer URLs with the time,
// so an ID is never used twice.
func (m *model) newID() uint64 {
	for {
		id := m.rng.Uint64()
		if id != 0 && !m.usedIDs[id] {
			m.usedIDs[id] = true
			return id
		}
	}
}

// bootstrapID is a static bootstrap member's ID: a hash of its peer URL
// and the cluster token, so a cluster bootstrapped again from the same
// flags has the same IDs.
func bootstrapID(peerURL string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(simToken + "|" + peerURL))
	return h.Sum64() | 1
}

func simParseIC(s string) (names, urls []string) {
	for _, part := range strings.Split(s, ",") {
		n, u, _ := strings.Cut(part, "=")
		names = append(names, n)
		urls = append(urls, u)
	}
	return names, urls
}

func (m *model) sortMembers() {
	slices.SortFunc(m.etcd.Members, func(a, b *simMember) int { return cmp.Compare(a.ID, b.ID) })
}

// bootstrapCluster is a member with empty data and state "new" when no
// cluster exists: etcd creates one from --initial-cluster.
func (m *model) bootstrapCluster(p *simPod) {
	c := &simEtcd{Initial: p.InitialCluster, Minor: minorOf(tagOf(p.Image))}
	_, urls := simParseIC(p.InitialCluster)
	h := fnv.New64a()
	for _, u := range urls {
		// A cluster bootstrapped again from the same flags has the same
		// IDs: etcd's own Pods do that after the data is gone. The
		// operator never does it after the cluster formed (createPod).
		id := bootstrapID(u)
		m.usedIDs[id] = true
		delete(m.ran, id)
		sch, host, _ := strings.Cut(u, "://")
		host = strings.TrimSuffix(host, fmt.Sprintf(":%d", peerPort))
		c.Members = append(c.Members, &simMember{ID: id, Host: host, HTTPS: sch == "https"})
		fmt.Fprint(h, id)
	}
	c.ID = h.Sum64()
	if p.TLS {
		c.CA = p.trust.first()
	}
	m.etcd = c
	m.sortMembers()
	m.tracef("etcd: %s bootstraps a new cluster %x of %d members", p.Name, c.ID, len(c.Members))
}

// matchesMembers is etcd's check of a joining member's --initial-cluster
// (state "existing"): the peer URLs must be those of every member, and a
// started member's name must be the one listed.
func (m *model) matchesMembers(initialCluster string) bool {
	names, urls := simParseIC(initialCluster)
	if len(urls) != len(m.etcd.Members) {
		return false
	}
	for _, mb := range m.etcd.Members {
		i := slices.Index(urls, peerURL(mb.Host, mb.HTTPS))
		if i < 0 || mb.started() && names[i] != mb.Name {
			return false
		}
	}
	return true
}

// start runs etcd in p: the checks etcd makes when it starts, with the
// Pod's data and flags. It returns why etcd exits, "" when it runs.
func (m *model) start(p *simPod) string {
	tag := tagOf(p.Image)
	var mb *simMember
	if p.TLS {
		// etcd loads its key pair and its CA file as it starts.
		if p.files.BadKey {
			return "tls: failed to load the peer key pair: tls: private key does not match public key"
		}
		p.trust = p.files.Trust
	}
	switch {
	case p.staleData:
		return "stale: its data is of a cluster that is gone"
	case p.Data != 0:
		// Restarting on its data: etcd ignores the --initial-cluster flags.
		if m.etcd == nil || m.etcd.byID(p.Data) == nil {
			return "removed: the member has been permanently removed from the cluster"
		}
		mb = m.etcd.byID(p.Data)
	case p.State == "new":
		if m.etcd == nil {
			m.bootstrapCluster(p)
			if mb = m.etcd.byHost(p.Name); mb == nil {
				return "config: couldn't find local name in the initial cluster configuration"
			}
			break
		}
		mb = m.etcd.byHost(p.Name)
		if (mb == nil || p.InitialCluster != m.etcd.Initial) && !m.anyMemberRunning() {
			// Members that share no --initial-cluster with a running
			// one make a cluster of their own; the old one's data is
			// left on its claims, of a cluster that never runs again.
			// The operator does this only before a cluster formed
			// (createPod checks).
			m.tracef("etcd: no member of cluster %x runs", m.etcd.ID)
			m.forgetCluster()
			m.bootstrapCluster(p)
			if mb = m.etcd.byHost(p.Name); mb == nil {
				return "config: couldn't find local name in the initial cluster configuration"
			}
			break
		}
		switch {
		case mb == nil || p.InitialCluster != m.etcd.Initial:
			return "mismatch: request cluster ID mismatch"
		case mb.started():
			// etcd asks the peers first: the member exists.
			return fmt.Sprintf("bootstrapped: member %x has already been bootstrapped", mb.ID)
		}
	default: // "existing"
		if m.etcd == nil {
			return "noinfo: could not retrieve cluster information from the given URLs"
		}
		reachable := false
		for _, o := range m.etcd.Members {
			reachable = reachable || o.started() && m.running(o)
		}
		if !reachable {
			return "noinfo: could not retrieve cluster information from the given URLs"
		}
		if mb := m.etcd.byHost(p.Name); mb != nil && (p.TLS || mb.HTTPS) && m.cutOff(p, mb) != "" {
			// Its peers refuse its handshakes (or it theirs).
			return "noinfo: could not retrieve cluster information from the given URLs (remote error: tls: bad certificate)"
		}
		if !m.matchesMembers(p.InitialCluster) {
			return "peerURLs: error validating peerURLs: member count is unequal or URLs differ"
		}
		mb = m.etcd.byHost(p.Name)
		if mb.started() {
			// Raft amnesia: the member's log is gone and the leader's
			// commit index is beyond it.
			return "amnesia: tocommit(29) is out of range [lastIndex(0)]. Was the raft log corrupted, truncated, or lost?"
		}
	}
	// The cluster version only goes up, and a binary runs only within one
	// minor of it.
	switch minor := minorOf(tag); {
	case minor < m.etcd.Minor:
		return "downgrade: the running cluster version is higher than this binary supports"
	case minor > m.etcd.Minor+1:
		return "version: the cluster version is too low for this binary"
	}
	if brokenImage(p.Image) && p.brokenCrashed {
		return "broken: panic in the release"
	}
	p.Up, p.UpSince, p.Data, p.Exit = true, m.now, mb.ID, ""
	if c := m.claims[p.Claim]; c != nil {
		c.Data, c.stale = mb.ID, false
	}
	mb.Name = p.Name
	m.ran[mb.ID] = strings.TrimPrefix(tag, "v")
	return ""
}

// stop ends p's etcd process: the kubelet marks the Pod unready at once.
func (m *model) stop(p *simPod, why string) {
	if p.Up {
		m.tracef("etcd in %s stops: %s", p.Name, why)
	}
	p.Up, p.Ready = false, false
	p.Exit = why
}

// crash: etcd exits; the kubelet restarts it after a back-off.
func (m *model) crash(p *simPod, why string) {
	m.stop(p, why)
	p.Waiting, p.WaitingMsg = "CrashLoopBackOff", fmt.Sprintf("back-off 10s restarting failed container=etcd pod=%s", p.Name)
}

// reap: with no member's data left on any Pod, the cluster is gone.
func (m *model) reap() {
	if m.etcd == nil {
		return
	}
	// A learner's data makes no cluster: only voters' data can elect.
	voter := func(id uint64) bool { mb := m.etcd.byID(id); return mb != nil && !mb.Learner }
	for _, p := range m.pods {
		if p.Data != 0 && voter(p.Data) {
			return
		}
	}
	for _, c := range m.claims {
		if c.Data != 0 && !c.Lost && voter(c.Data) {
			return
		}
	}
	m.tracef("etcd: the cluster's data is gone with its Pods and volumes")
	m.forgetCluster()
}

// forgetCluster: the cluster is gone; what is left of its data on Pods
// and claims is of a cluster that no longer runs.
func (m *model) forgetCluster() {
	m.etcd = nil
	for _, p := range m.pods {
		if p.Data != 0 {
			if p.Up {
				m.crash(p, "stale: its data is of a cluster that is gone")
			}
			p.Data, p.staleData = 0, true // a removed member's
		}
	}
	for _, c := range m.claims {
		if c.Data != 0 {
			c.Data, c.stale = 0, true
		}
	}
}

// anyMemberRunning: etcd runs in some Pod on a member's data.
func (m *model) anyMemberRunning() bool {
	for _, p := range m.pods {
		if p.Up && p.Data != 0 && m.etcd.byID(p.Data) != nil {
			return true
		}
	}
	return false
}

// dataAlive: a member's data is on a Pod that is not going away.
func (m *model) dataAlive() bool {
	if m.etcd == nil {
		return false
	}
	for _, p := range m.pods {
		if p.Data != 0 && !p.Deleting && m.etcd.byID(p.Data) != nil {
			return true
		}
	}
	for _, c := range m.claims {
		if c.Data != 0 && !c.Deleting && !c.Lost && m.etcd.byID(c.Data) != nil {
			return true
		}
	}
	return false
}

// ---- the kubelet and time ----

// tick moves time on: deletions complete, the kubelet (re)starts
// containers, etcd elects a leader and raises its version, readiness
// probes run.
func (m *model) tick() {
	m.now++
	for _, n := range m.podNames() {
		if p := m.pods[n]; p.Deleting && !p.Stuck && p.GoneAt <= m.now {
			m.tracef("pod %s is gone", n)
			delete(m.pods, n)
		}
	}
	for _, n := range m.claimNames() {
		if m.claims[n].Deleting && !m.used(n) {
			m.tracef("claim %s is gone", n)
			delete(m.claims, n)
		}
	}
	if m.now >= m.lagUntil {
		clear(m.lagged)
	}
	if !m.formed && !m.tlsBugs {
		for _, l := range m.leaves {
			l.NotBefore, l.NotAfter = l.NotBefore.Add(2*time.Second), l.NotAfter.Add(2*time.Second)
		}
		for _, p := range m.pods {
			if p.files != nil {
				p.files.NotBefore, p.files.NotAfter = p.files.NotBefore.Add(2*time.Second), p.files.NotAfter.Add(2*time.Second)
			}
		}
	}
	// The kubelet writes a member's Secret into its Pod's files again (a
	// Secret deleted leaves them as they were); etcd reads the
	// certificate at its next handshake.
	for _, p := range m.pods {
		if l := m.leaves[p.Name]; p.files != nil && l != nil && *p.files != *l {
			f := *l
			p.files = &f
		}
	}
	m.reap()
	for _, n := range m.podNames() {
		// The broken release runs a tick, then panics, and panics at every
		// start after that on this Pod.
		if p := m.pods[n]; p.Up && brokenImage(p.Image) && p.UpSince < m.now {
			p.brokenCrashed = true
			m.crash(p, "broken: panic in the release")
		}
	}
	for _, n := range m.podNames() {
		p := m.pods[n]
		if p.Phase == "Failed" || p.Deleting || p.Up {
			continue
		}
		if !p.Scheduled {
			c := m.claims[p.Claim]
			switch {
			case m.cordoned:
				continue // Pending: no node takes it
			case p.Claim != "" && (c == nil || c.Deleting || c.Lost):
				continue // Pending: its claim is missing, going, or on a lost node
			}
			p.Scheduled = true
			if c != nil {
				p.Data, p.staleData = c.Data, c.stale // the data on its volume
			}
		}
		if p.TLS && p.files == nil {
			// The container is created once its Secret can be mounted.
			l := m.leaves[p.Name]
			if l == nil {
				p.Waiting, p.WaitingMsg = "ContainerCreating", fmt.Sprintf("MountVolume.SetUp failed for volume \"tls\" : secret %q not found", memberSecret(p.Name))
				continue
			}
			f := *l
			p.files = &f
		}
		if unpullable(p.Image) {
			p.Waiting, p.WaitingMsg = "ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q", p.Image)
			continue
		}
		if p.ran {
			p.Restarts++
		}
		p.ran, p.Phase = true, "Running"
		if why := m.start(p); why != "" {
			if p.Exit != why {
				m.tracef("etcd in %s exits: %s", n, why)
			}
			m.crash(p, why)
			continue
		}
		p.Waiting, p.WaitingMsg = "", ""
		m.tracef("etcd in %s runs as member %x (%s)", n, p.Data, tagOf(p.Image))
	}
	m.elect()
	if c := m.etcd; c != nil && m.leaderID() != 0 {
		// The leader raises the cluster version to its members' lowest,
		// once every member reports one.
		low, all := 1<<20, true
		for _, mb := range c.Members {
			if p := m.pods[mb.Host]; m.running(mb) {
				low = min(low, minorOf(tagOf(p.Image)))
			} else {
				all = false
			}
		}
		if all && low > c.Minor {
			m.tracef("etcd: cluster version 3.%d", low)
			c.Minor = low
		}
	}
	// Readiness: etcd's /readyz passes for a started voter of a cluster
	// with a leader.
	leader := m.leaderID()
	for _, p := range m.pods {
		p.Ready = false
		if p.Up && !p.Deleting && leader != 0 {
			if mb := m.etcd.byID(p.Data); mb != nil && !mb.Learner && (!p.TLS && !mb.HTTPS || m.cutOff(p, mb) == "") {
				p.Ready = true
			}
		}
	}
	m.checkTrust()
}

// ---- faults and spec changes ----

// deletePod starts a graceful deletion: etcd gets SIGTERM and exits, the
// Pod is gone (with its emptyDir) after the grace period.
func (m *model) deletePod(p *simPod) {
	if p.Deleting {
		return
	}
	// A Pod that never ran is gone at the next tick; one that runs takes
	// its grace period, one or two ticks.
	p.Deleting, p.GoneAt = true, m.now+1
	if p.ran {
		p.GoneAt += m.rng.IntN(2)
	}
	m.stop(p, "deleted")
}

func (m *model) kill(p *simPod) { m.crash(p, "killed") }

// deleteClaim: someone deletes a member's PVC; with lag, the operator's
// PVC watch shows it only after the next tick (the Pod watch, a stream of
// its own, may show the Pod's deletion first).
func (m *model) deleteClaim(name string, lag bool) {
	c := m.claims[name]
	if c == nil || c.Deleting {
		return
	}
	if lag {
		before := *c
		m.lagged[name], m.lagUntil = &before, m.now+2
	}
	m.tracef("claim %s deleted (its watch event %s)", name, map[bool]string{true: "late", false: "on time"}[lag])
	c.Deleting = true
}

// wipe loses a member's data while its Pod lives: etcd fails, and every
// restart starts from an empty data dir.
func (m *model) wipe(p *simPod) {
	p.Data, p.staleData = 0, false
	if c := m.claims[p.Claim]; c != nil {
		c.Data, c.stale = 0, false
	}
	m.crash(p, "wiped: data dir lost")
	m.reap()
}

// strand loses the Pod's node: the Pod is Terminating forever and what ran
// there, data included, is out of reach.
func (m *model) strand(p *simPod) {
	p.Deleting, p.Stuck, p.Data = true, true, 0
	if c := m.claims[p.Claim]; c != nil {
		c.Lost, c.Data = true, 0 // a local volume, on that node
	}
	m.stop(p, "node lost")
	m.reap()
}

// evict: the kubelet kills the Pod for node pressure; it stays, Failed,
// and its emptyDir is cleaned up (a PVC keeps its data).
func (m *model) evict(p *simPod) {
	p.Phase, p.Data, p.Waiting, p.WaitingMsg = "Failed", 0, "", ""
	m.stop(p, "evicted")
	m.reap()
}

// runnable: a version etcd can run now: one the registry has, not broken,
// and within one minor of the cluster's version.
func (m *model) runnable(v string) bool {
	img := repo + ":" + v
	return !unpullable(img) && !brokenImage(img) && m.acceptable(v)
}

// acceptable: etcd runs the version in this cluster: the same minor as the
// cluster version or the next one (no cluster yet: any 3.x).
func (m *model) acceptable(v string) bool {
	minor := minorOf(v)
	if m.etcd == nil {
		return minor >= 0
	}
	return minor == m.etcd.Minor || minor == m.etcd.Minor+1
}

// ---- observe: exactly what observe.go builds ----

// observe builds what a pass of observe.go sees: every Pod of the cluster;
// every Service; etcd's /v3/maintenance/status from each Running Pod with
// a podIP and no deletionTimestamp, then the leader's member list.
func (m *model) observe(known string) observed {
	obs := observed{Now: simTime(m.now)}
	var running []*simPod
	tlsOn := m.spec.TLS != nil || m.status.TLS != nil // in.Prev, as observe.go reads it
	for _, n := range m.podNames() {
		p := m.pods[n]
		obs.Pods = append(obs.Pods, p.view())
		tlsOn = tlsOn || p.TLS
		// A Pod gets its podIP when it is bound and its sandbox runs.
		if p.Phase == "Running" && p.Scheduled && !p.Deleting {
			running = append(running, p)
		}
	}
	obs.Services = m.svcNames()
	for _, n := range m.claimNames() {
		c := m.claims[n]
		if l := m.lagged[n]; l != nil {
			c = l
		}
		obs.Claims = append(obs.Claims, claimView{Name: n, Deleting: c.Deleting, Phase: "Bound", Size: defaultStorageSize})
	}
	for n, l := range m.lagged {
		if m.claims[n] == nil { // gone, and not seen to go
			obs.Claims = append(obs.Claims, claimView{Name: n, Deleting: l.Deleting, Phase: "Bound", Size: defaultStorageSize})
		}
	}
	slices.SortFunc(obs.Claims, func(a, b claimView) int { return strings.Compare(a.Name, b.Name) })
	if tlsOn {
		obs.TLS = m.tlsView()
	}
	v := &obs.Etcd
	if len(running) > 0 {
		v.AnsweredPods = []string{}
	}
	answered := map[uint64]bool{}
	podOf := map[string]string{}
	leader := m.leaderID()
	for _, p := range running {
		if !p.Up {
			continue // connection refused
		}
		mb := m.etcd.byID(p.Data)
		if (p.TLS || mb.HTTPS) && m.cutOff(p, mb) != "" {
			continue // cut off from its peers: no answer worth the name
		}
		answered[mb.ID] = true
		podOf[fmt.Sprint(mb.ID)] = p.Name
		v.AnsweredPods = append(v.AnsweredPods, p.Name)
		if !mb.Learner {
			v.AnsweredVoters++
		}
		v.ClusterID = cmp.Or(v.ClusterID, fmt.Sprint(m.etcd.ID))
		if leader != 0 && v.Leader == "" {
			v.Leader = fmt.Sprint(leader)
		}
	}
	v.Answered = len(answered)
	leaderPod, ok := podOf[v.Leader]
	if !ok {
		if len(answered) > 0 {
			v.Listed = m.memberViews(answered)
			m.observeClusterVersion(v, known)
		}
		return obs
	}
	v.LeaderPod = leaderPod
	v.Members = m.memberViews(answered)
	v.Listed = v.Members
	if tlsOn {
		// observeAuth: the leader's /v3/auth/status, and while auth is
		// off, /v3/auth/user/get of root; while it is on and a rotation
		// is under way, of its next user.
		a := &m.etcd.Auth
		v.Auth = &authView{Enabled: a.Enabled}
		switch next := obs.TLS.Creds.NextUser; {
		case !a.Enabled && a.user(rootUser) != nil:
			v.Auth.RootUser, v.Auth.RootRole = true, a.user(rootUser).Root
		case a.Enabled && next != "" && a.user(next) != nil:
			v.Auth.NextUser, v.Auth.NextRole = true, a.user(next).Root
		}
	}
	m.observeClusterVersion(v, known)
	return obs
}

// tlsView is what observeTLS reads of the cluster's Secrets at the
// model's now, as tlsOf reads it.
func (m *model) tlsView() *tlsView {
	v := &tlsView{Leaves: map[string]leafView{}}
	switch {
	case m.ca.Gen == 0 || m.ca.Lost:
	case m.ca.Corrupt:
		v.JWT = simJWT
		v.CAProblem = fmt.Sprintf("Secret %s: CA key: %v (tls.key holds no PEM data)", caSecret(simBase), ca.ErrNoKey)
	default:
		v.CA, v.JWT = simCA(m.ca.Gen), simJWT
		v.CARotation, v.SwitchedAt = m.ca.Rotation, m.ca.SwitchedAt
		if m.ca.Next != 0 {
			v.Next = simCA(m.ca.Next)
		}
		if m.ca.Previous != 0 {
			v.Previous = simCA(m.ca.Previous).CertPEM()
		}
	}
	if m.root != nil {
		data := map[string][]byte{}
		for k, x := range m.root {
			data[k] = []byte(x)
		}
		v.HasRoot, v.Root, v.Creds = true, m.root["password"], credentialsOf(data, simTime(m.now))
		v.RootTrust = ca.Fingerprint(data["ca.crt"])
	}
	if v.CA == nil {
		return v
	}
	now, bundle := simTime(m.now), ca.Fingerprint(v.bundle())
	for name, l := range m.leaves {
		v.Leaves[name] = l.view(m.ca, bundle, now)
	}
	return v
}

// view is the leaf as tlsOf (leafOf) sees it, with BASE-ca and the
// fingerprint of the CAs to trust.
func (l *simLeaf) view(c simCASecret, bundle string, now time.Time) leafView {
	at := ca.RenewAt(l.NotBefore, l.NotAfter)
	v := leafView{NotAfter: l.NotAfter, Renew: !now.Before(at), RenewIn: at.Sub(now), Trust: ca.Fingerprint(l.Trust.pem()), IssuedAt: l.IssuedAt}
	switch {
	case l.BadKey:
		v.Problem = ca.ErrKeyMismatch.Error()
	case now.After(l.NotAfter):
		v.Problem = fmt.Sprintf("%v: valid until %s, and it is now %s", ca.ErrExpired, stamp(l.NotAfter), stamp(now))
	case l.CA != c.Gen && (c.Previous == 0 || l.CA != c.Previous):
		v.Problem = ca.ErrUnknownAuthority.Error()
	case !l.Trust.has(c.Gen):
		v.Problem = "its ca.crt is not the cluster's CA"
	case l.CA != c.Gen:
		v.Why = whyPreviousCA
	case v.Trust != bundle:
		v.Why = "the CA rotates"
	}
	v.Renew = v.Renew || v.Problem != "" || v.Why != ""
	return v
}

// due: the leaf is at two thirds of its life, or past it.
func (l *simLeaf) due(now time.Time) bool { return !now.Before(ca.RenewAt(l.NotBefore, l.NotAfter)) }

// observeClusterVersion is etcd's /version as observe.go asks it
// (askClusterVersion).
func (m *model) observeClusterVersion(v *etcdView, known string) {
	if askClusterVersion(v.Listed, known) {
		v.ClusterVersion = fmt.Sprintf("3.%d.0", m.etcd.Minor)
	}
}

// memberViews is etcd's member list as observe.go reads it.
func (m *model) memberViews(answered map[uint64]bool) []memberView {
	views := []memberView{}
	for _, mb := range m.etcd.Members {
		mv := memberView{ID: fmt.Sprint(mb.ID), Name: mb.Name, PeerHost: mb.Host, PeerHTTPS: mb.HTTPS, Learner: mb.Learner}
		if answered[mb.ID] {
			mv.Answered, mv.Version = true, strings.TrimPrefix(tagOf(m.pods[mb.Host].Image), "v")
		}
		views = append(views, mv)
	}
	return views
}

// ---- the operator: reconcile() and act() of main.go ----

var errSimKilled = errors.New("the operator was killed")

// simErr is an answer that is not a success: its HTTP code and message
// (etcd's own words for a refusal).
type simErr struct {
	code int
	msg  string
}

func (e *simErr) Error() string { return fmt.Sprintf("%d: %s", e.code, e.msg) }

// simIsRefused is etcdRefused for the model's errors.
func simIsRefused(err error, words ...string) bool {
	var e *simErr
	if !errors.As(err, &e) {
		return false
	}
	for _, w := range words {
		if strings.Contains(e.msg, w) {
			return true
		}
	}
	return false
}

// request is one request of the operator: with killAt = k, k requests go
// through and the operator dies before the next.
func (m *model) request(what string) error {
	m.reqs++
	if m.killAt >= 0 && m.reqs > m.killAt {
		m.tracef("operator killed before %s", what)
		return errSimKilled
	}
	return nil
}

func (m *model) input() input {
	// The model's kubelet writes a changed Secret into the Pods at the
	// next tick: -secret-sync is two.
	return input{Name: simBase, Base: simBase, Repo: repo, Gen: m.gen, Spec: m.spec, Prev: m.status, Namespace: "default", UID: "sim-uid", FormedID: m.formedID,
		SecretSync: 4 * time.Second}
}

func simTime(now int) time.Time {
	return time.Unix(1_700_000_000, 0).Add(time.Duration(now) * 2 * time.Second)
}

// pass is reconcile(): observe -> decide -> act, up to maxSteps times,
// each step's status written after it. kill: the operator dies after that
// many requests (-1: never); lose: status writes fail. A restarted
// operator has no memory but the status, so the next pass is the restart.
func (m *model) pass(kill int, lose bool) {
	m.passes++
	m.reqs, m.killAt, m.lose = 0, kill, lose
	defer func() { m.killAt, m.lose = -1, false }()
	in := m.input()
	for range maxSteps {
		obs := m.observe(in.Prev.CurrentVersion)
		tr := m.truth()
		st, s, ok := m.decide(in, obs)
		if !ok {
			return
		}
		m.traceOnce("decide", fmt.Sprintf("decide: %s %s | %s %s: %s", cmp.Or(s.Action, "-"), s.Member, st.Phase, st.Ready, st.Message))
		m.checkStatus(st, tr)
		if s.Action == actNone {
			m.writeStatus(in.Prev, st)
			return
		}
		m.checkStep(s)
		again, err := m.act(in, obs, s)
		m.checkSchemes()
		m.checkTrust()
		m.checkCredentials()
		if errors.Is(err, errSimKilled) {
			return
		}
		if err != nil {
			m.failed(in.Prev, st, err)
			return
		}
		if m.writeStatus(in.Prev, st) != nil {
			return
		}
		in.Prev = st
		if s.Action == actMarkFormed {
			in.FormedID = m.formedID
		}
		if again > 0 || s.Last {
			return
		}
	}
}

// decide calls the real decide; a panic is a finding like any other.
func (m *model) decide(in input, obs observed) (st clusterStatus, s step, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			m.failf("panic", "decide panicked: %v", r)
		}
	}()
	st, s = decide(in, obs)
	return st, s, true
}

// writeStatus is main.go's writeStatus: only a status that says something
// new is written.
func (m *model) writeStatus(prev, st clusterStatus) error {
	st.stampTransitions(simTime(m.now))
	if jsonEqual(prev, st) {
		return nil
	}
	if err := m.request("writing the status"); err != nil {
		return err
	}
	if m.lose {
		m.tracef("status write lost")
		return errors.New("status write failed")
	}
	m.status = st
	// The operator knows the cluster formed once a status that says so
	// is written (or the annotation, in act).
	if st.ClusterID != "" {
		m.formed = true
	}
	return nil
}

// failed reports a failed step as reconcile does, with conditions.go's failed:
// the step's error in the status, Failed when it was refused rather than
// not reached.
func (m *model) failed(prev, st clusterStatus, err error) {
	m.tracef("step failed: %v", err)
	var e *simErr
	if errors.As(err, &e) {
		err = &kube.Error{Method: "POST", Path: "/", Code: e.code, Message: e.msg}
	}
	st, _ = failed(st, st.Message, err)
	_ = m.writeStatus(prev, st)
}

// etcdCall is a request to etcd's gateway through a Pod's proxy. A
// follower forwards membership changes to the leader; without a leader
// they time out.
func (m *model) etcdCall(pod, what string) (*simMember, error) {
	if err := m.request(what); err != nil {
		return nil, err
	}
	p := m.pods[pod]
	switch {
	case p == nil:
		return nil, &simErr{404, fmt.Sprintf("pods %q not found", pod)}
	case !p.Up || p.Deleting:
		return nil, &simErr{503, "error trying to reach service: connect: connection refused"}
	case m.leaderID() == 0:
		return nil, &simErr{503, "etcdserver: request timed out"}
	}
	return m.etcd.byID(p.Data), nil
}

func (m *model) createService(name string) error {
	if err := m.request("creating Service " + name); err != nil {
		return err
	}
	if !m.svcs[name] {
		m.tracef("operator creates Service %s", name)
	}
	m.svcs[name] = true // 409 AlreadyExists counts as done
	return nil
}

// createPod creates a Pod from the body decide made, read as the Pod
// watch reads it (pod.cached).
func (m *model) createPod(name string, body []byte) error {
	if err := m.request("creating Pod " + name); err != nil {
		return err
	}
	if m.pods[name] != nil {
		return nil // 409: a Pod of that name exists, even one being deleted
	}
	var wire pod
	if err := json.Unmarshal(body, &wire); err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	cp := wire.cached()
	image, initialCluster, state := cp.Image, cp.InitialCluster, cp.State
	// Once the operator has seen the cluster, a new bootstrap Pod is raft
	// amnesia (or a second cluster). Only when both the data and the
	// status are gone can it not know.
	if state == "new" && (m.formedID != "" || m.formed && (m.dataAlive() || !m.statusLost)) {
		m.failf("bootstrap-again", "Pod %s created with --initial-cluster-state=new after the operator saw the cluster (its data %s)",
			name, map[bool]string{true: "still lives", false: "is gone, the status is not"}[m.dataAlive()])
	}
	m.tracef("operator creates Pod %s (%s, state %s, --initial-cluster=%s%s)", name, tagOf(image), state, initialCluster, map[bool]string{true: ", TLS"}[cp.TLS])
	p := &simPod{Name: name, Image: image, State: state, InitialCluster: initialCluster, Phase: "Pending", TLS: cp.TLS, annotTrust: cp.Trust}
	if m.volumes {
		p.Claim = name
	}
	m.pods[name] = p
	return nil
}

// createClaim: a fresh volume. The operator waits for its own writes to
// show in its watches, and the PVC watch is one ordered stream: once its
// write shows, so does every change before it.
func (m *model) createClaim(name string) error {
	if err := m.request("creating claim " + name); err != nil {
		return err
	}
	clear(m.lagged)
	if m.claims[name] != nil {
		return nil // 409, even one being deleted
	}
	m.tracef("operator creates claim %s", name)
	m.claims[name] = &simClaim{}
	return nil
}

// createAll is act's createAll: the step's objects, in order (Services,
// claims and Secrets before the Pods that need them).
func (m *model) createAll(s step) error {
	for _, o := range s.Create {
		var err error
		switch o.Resource {
		case "services":
			err = m.createService(o.Name)
		case "persistentvolumeclaims":
			err = m.createClaim(o.Name)
		case "secrets":
			err = m.createSecret(o)
		case "pods":
			err = m.createPod(o.Name, o.Body)
		default:
			err = fmt.Errorf("create %s/%s: not in the model", o.Resource, o.Name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// createSecret makes a Secret's keys as act does (secretToMake.data),
// at the model's now; 409 AlreadyExists counts as done, and changes
// nothing.
func (m *model) createSecret(o object) error {
	if err := m.request("creating Secret " + o.Name); err != nil {
		return err
	}
	sm := o.Secret
	if sm == nil || sm.Name != o.Name {
		return fmt.Errorf("secret %s: no keys to make", o.Name)
	}
	switch sm.Kind {
	case secretCA:
		if o.Name != caSecret(simBase) {
			return fmt.Errorf("CA secret named %s", o.Name)
		}
		if m.ca.Gen != 0 && !m.ca.Lost {
			return nil // 409, even one that cannot be read
		}
		m.cas++
		m.ca = simCASecret{Gen: m.cas, Rotation: sm.Rotation}
		m.tracef("operator creates Secret %s: CA %d", o.Name, m.cas)
	case secretRoot:
		if m.root != nil {
			return nil
		}
		m.root = map[string]string{"username": cmp.Or(sm.User, rootUser), "password": cmp.Or(sm.Password, m.password())}
		if sm.CA != nil {
			m.root["ca.crt"] = string(sm.trust())
		}
		if sm.Rotation != "" {
			m.root[keyRotation] = sm.Rotation
		}
		m.tracef("operator creates Secret %s", o.Name)
	case secretLeaf:
		member, _ := strings.CutSuffix(o.Name, "-tls")
		if m.leaves[member] != nil {
			return nil
		}
		m.leaves[member] = m.issue(member, sm)
		m.tracef("operator creates Secret %s: a certificate of CA %d, due %s", o.Name, m.leaves[member].CA, stamp(ca.RenewAt(m.leaves[member].NotBefore, m.leaves[member].NotAfter)))
	default:
		return fmt.Errorf("secret %s: unknown kind %q", o.Name, sm.Kind)
	}
	return nil
}

// issue is a certificate as secretToMake.data makes it now: signed by
// the CA decide gave, which must be the one BASE-ca holds, and the one
// the cluster's members trust.
func (m *model) issue(member string, sm *secretToMake) *simLeaf {
	gen := simGenOf(sm.CA)
	switch {
	case sm.CA == nil:
		m.failf("leaf-wrong-ca", "certificate of %s to be issued with no CA", member)
	case !m.ca.ok():
		m.failf("leaf-wrong-ca", "certificate of %s issued by CA %d while BASE-ca is %s", member, gen, map[bool]string{true: "lost", false: "unreadable"}[m.ca.Lost || m.ca.Gen == 0])
	case gen != m.ca.Gen:
		m.failf("leaf-wrong-ca", "certificate of %s issued by CA %d, but BASE-ca holds CA %d", member, gen, m.ca.Gen)
	}
	if c := m.etcd; c != nil && c.CA != 0 && gen != c.CA {
		m.failf("foreign-ca", "certificate of %s issued by CA %d, but the members of cluster %x trust CA %d", member, gen, c.ID, c.CA)
	}
	if sm.Leaf.CommonName != member || sm.Name != memberSecret(member) {
		m.failf("leaf-name", "Secret %s holds a certificate for %q", sm.Name, sm.Leaf.CommonName)
	}
	now, life := simTime(m.now), sm.Leaf.Lifetime
	m.serials++
	return &simLeaf{Serial: m.serials, CA: gen, Trust: simTrustOf(sm.trust(), m.cas), IssuedAt: now,
		NotBefore: now.Add(-min(5*time.Minute, life/10)), NotAfter: now.Add(life)}
}

// password is a new random password.
func (m *model) password() string {
	m.serials++
	return fmt.Sprintf("password-%d", m.serials)
}

// renew is act's renewSecret: a merge patch of the member's Secret with
// a new key and certificate, or of BASE-root with a rotation's next
// user and password.
func (m *model) renew(s step) error {
	sm := s.Renew
	if err := m.request("renewing Secret " + sm.Name); err != nil {
		return err
	}
	if sm.Kind == secretNextRoot && sm.Name == rootSecret(simBase) {
		if m.root == nil {
			return &simErr{404, fmt.Sprintf("secrets %q not found", sm.Name)}
		}
		m.root[keyNextUser], m.root[keyNextPassword] = sm.User, m.password()
		m.tracef("operator writes the next user %s into Secret %s", sm.User, sm.Name)
		return nil
	}
	if sm.Kind == secretNextCA && sm.Name == caSecret(simBase) {
		if m.ca.Gen == 0 || m.ca.Lost {
			return &simErr{404, fmt.Sprintf("secrets %q not found", sm.Name)}
		}
		m.cas++
		m.ca.Next, m.ca.Rotation = m.cas, sm.Rotation
		m.tracef("operator writes the next CA %d into Secret %s (rotation %q)", m.cas, sm.Name, sm.Rotation)
		return nil
	}
	if sm.Kind != secretLeaf {
		m.failf("secret-overwritten", "Secret %s (%s) overwritten by a renewal", sm.Name, sm.Kind)
		return nil
	}
	member, _ := strings.CutSuffix(sm.Name, "-tls")
	if m.leaves[member] == nil {
		return &simErr{404, fmt.Sprintf("secrets %q not found", sm.Name)}
	}
	m.leaves[member] = m.issue(member, sm)
	m.renewals++
	m.tracef("operator renews Secret %s: a certificate of CA %d", sm.Name, m.leaves[member].CA)
	return nil
}

// act is main.go's act for the model: one step, idempotent as act is.
func (m *model) act(in input, obs observed, s step) (time.Duration, error) {
	if s.Delete == "secrets" {
		m.failf("secret-deleted", "step %s deletes Secret %s", s.Action, s.Member)
	}
	switch s.Action {
	case actBootstrap, actCreateClient, actStartMember, actRestartMember, actCreateCA, actIssueCertificate, actCreateRootSecret:
		return 0, m.createAll(s)
	case actRenewCertificate, actPrepareCredentials:
		return 0, m.renew(s)
	case actAddRootUser, actGrantRoot, actEnableAuth, actAddUser, actGrantUser:
		return 0, m.authStep(obs, s)
	case actRetireUser:
		if err := m.authStep(obs, s); err != nil {
			return 0, err
		}
		return 0, m.patchRoot(s)
	case actSwitchCredentials, actTrustCA:
		return 0, m.patchRoot(s)
	case actPrepareCA:
		return 0, m.renew(s)
	case actSwitchCA, actRetireCA:
		return 0, m.patchCA(s)
	case actMarkFormed:
		if err := m.request("recording the cluster ID"); err != nil {
			return 0, err
		}
		m.formedID, m.formed = obs.Etcd.ClusterID, true
		return 0, nil
	case actDeleteClaim:
		if err := m.request("deleting claim " + s.Member); err != nil {
			return 0, err
		}
		clear(m.lagged)
		if c := m.claims[s.Member]; c != nil && !c.Deleting {
			m.tracef("operator deletes claim %s", s.Member)
			c.Deleting = true
		}
		return 0, nil
	case actAddMember:
		_, err := m.etcdCall(obs.Etcd.LeaderPod, "adding member "+s.Member)
		if err == nil {
			urls, _ := s.Etcd.Body.(map[string]any)["peerURLs"].([]string)
			if len(urls) != 1 || urls[0] != peerURL(s.Member, strings.HasPrefix(urls[0], "https:")) {
				return 0, fmt.Errorf("member add of %s with peer URLs %q", s.Member, urls)
			}
			err = m.addMember(s.Member, strings.HasPrefix(urls[0], "https:"))
		}
		if simIsRefused(err, "already exists") {
			return 0, nil
		}
		return 0, err
	case actPromote:
		_, err := m.etcdCall(obs.Etcd.LeaderPod, "promoting "+s.Member)
		if err == nil {
			err = m.promote(parseID(s.ID))
		}
		switch {
		case simIsRefused(err, "in sync with leader"):
			return s.Again, nil
		case simIsRefused(err, "can only promote a learner member"):
			return 0, nil
		}
		return 0, err
	case actRemoveMember:
		self, err := m.etcdCall(obs.Etcd.LeaderPod, "removing "+s.Member)
		if err == nil {
			err = m.removeMember(self, parseID(s.ID))
		}
		if simIsRefused(err, "member not found") {
			return 0, nil
		}
		return 0, err
	case actMoveLeader:
		self, err := m.etcdCall(obs.Etcd.LeaderPod, "moving the leader to "+s.Member)
		if err == nil {
			err = m.moveLeader(self, parseID(s.ID))
		}
		return 0, err
	case actDeletePod, actRestartForCA:
		if err := m.request("deleting Pod " + s.Member); err != nil {
			return 0, err
		}
		if p := m.pods[s.Member]; p != nil {
			m.tracef("operator deletes Pod %s", s.Member)
			m.deletePod(p)
		}
		return 0, nil
	case actDeleteSvc:
		if err := m.request("deleting Service " + s.Member); err != nil {
			return 0, err
		}
		m.tracef("operator deletes Service %s", s.Member)
		delete(m.svcs, s.Member)
		return 0, nil
	case actUpgrade:
		if err := m.request("patching Pod " + s.Member); err != nil {
			return 0, err
		}
		p := m.pods[s.Member]
		if p == nil {
			return 0, &simErr{404, fmt.Sprintf("pods %q not found", s.Member)}
		}
		if p.Image != s.Image {
			// The kubelet kills the container and starts the new image.
			m.tracef("operator changes the image of %s to %s", s.Member, tagOf(s.Image))
			p.Image, p.brokenCrashed = s.Image, false
			m.stop(p, "image changed")
			p.Waiting, p.WaitingMsg = "", ""
		}
		return 0, nil
	}
	return 0, fmt.Errorf("unknown step %q", s.Action)
}

// authStep is etcd's /v3/auth/user/add, user/grant and enable, sent to
// the leader.
func (m *model) authStep(obs observed, s step) error {
	if _, err := m.etcdCall(obs.Etcd.LeaderPod, s.Action); err != nil {
		return err
	}
	a := &m.etcd.Auth
	if a.Users == nil {
		a.Users = map[string]*simUser{}
	}
	body, _ := s.Etcd.Body.(map[string]string)
	switch s.Action {
	case actAddRootUser, actAddUser:
		if a.user(body["name"]) != nil {
			return nil // "user name already exists": act takes it as done
		}
		key := map[bool]string{true: "password", false: keyNextPassword}[s.Action == actAddRootUser]
		if want := map[bool]string{true: rootUser, false: m.root[keyNextUser]}[s.Action == actAddRootUser]; body["name"] != want || body["password"] != m.root[key] {
			m.failf("root-password", "user %q added with a password that is not the one in Secret %s (key %s)", body["name"], rootSecret(simBase), key)
		}
		a.Users[body["name"]] = &simUser{Password: body["password"]}
		m.tracef("etcd: user %s added", body["name"])
	case actGrantRoot, actGrantUser:
		u := a.user(body["user"])
		if u == nil {
			return &simErr{400, "etcdserver: user name not found"}
		}
		u.Root = body["role"] == rootUser
		m.tracef("etcd: user %s has the role %s", body["user"], body["role"])
	case actRetireUser:
		// A user is retired only once the overlap after the switch is
		// over: until then clients may still hold its password.
		creds := m.tlsView().Creds
		if t := m.spec.TLS; t != nil && creds.PreviousUser != "" && creds.RotatedAgo < t.CredentialsOverlap {
			m.failf("retired-early", "user %s retired %v after the switch to %s, before the overlap of %v", body["name"], creds.RotatedAgo, creds.User, t.CredentialsOverlap)
		}
		u := a.user(body["name"])
		switch {
		case u == nil:
			return nil // "user name not found": done
		case s.Etcd.Path == "/v3/auth/user/changepw" && s.Etcd.RandomPassword:
			u.Password = m.password()
			m.tracef("etcd: user %s has a password nobody knows", body["name"])
		case s.Etcd.Path == "/v3/auth/user/delete" && body["name"] == rootUser && a.Enabled:
			return &simErr{400, "etcdserver: invalid auth management"}
		case s.Etcd.Path == "/v3/auth/user/delete":
			delete(a.Users, body["name"])
			m.tracef("etcd: user %s deleted", body["name"])
		default:
			return fmt.Errorf("retire user %s with %s: not in the model", body["name"], s.Etcd.Path)
		}
	case actEnableAuth:
		switch r := a.user(rootUser); {
		case r == nil:
			return &simErr{400, "etcdserver: root user does not exist"}
		case !r.Root:
			return &simErr{400, "etcdserver: root user does not have root role"}
		}
		if !a.Enabled {
			m.tracef("etcd: authentication enabled")
		}
		a.Enabled = true
	}
	return nil
}

// secretPatchData is the data of the step's merge patch of Secret name,
// as the operator sends it (secretPatch): null for a key to remove.
func (m *model) secretPatchData(s step, name string) (map[string]*[]byte, error) {
	if err := m.request("patching Secret " + name); err != nil {
		return nil, err
	}
	if s.Patch == nil || s.Patch.Path != corePath("default", "secrets")+"/"+name {
		return nil, fmt.Errorf("step %s patches %v, not Secret %s", s.Action, s.Patch, name)
	}
	var body struct{ Data map[string]*[]byte }
	err := json.Unmarshal(s.Patch.Body, &body)
	return body.Data, err
}

// patchRoot is the step's merge patch of Secret BASE-root's data.
func (m *model) patchRoot(s step) error {
	data, err := m.secretPatchData(s, rootSecret(simBase))
	if err != nil {
		return err
	}
	if m.root == nil {
		return &simErr{404, fmt.Sprintf("secrets %q not found", rootSecret(simBase))}
	}
	for k, v := range data {
		if v == nil {
			delete(m.root, k)
		} else {
			m.root[k] = string(*v)
		}
	}
	m.tracef("operator patches Secret %s: user %s, previous %q, next %q", rootSecret(simBase), m.root["username"], m.root[keyPreviousUser], m.root[keyNextUser])
	return nil
}

// patchCA is a merge patch of BASE-ca's data (caPatch): a CA rotation's
// switch or the previous CA's retirement. The cluster's members take the
// certificates of the CA switched to, and of the previous one until it is
// retired.
func (m *model) patchCA(s step) error {
	data, err := m.secretPatchData(s, caSecret(simBase))
	if err != nil {
		return err
	}
	if m.ca.Gen == 0 || m.ca.Lost {
		return &simErr{404, fmt.Sprintf("secrets %q not found", caSecret(simBase))}
	}
	gen := func(k string) int {
		if v := data[k]; v != nil {
			return simGenOfPEM(*v, m.cas)
		}
		return 0
	}
	retired := m.ca.Previous
	defer func() {
		if retired != 0 && m.ca.Previous == 0 {
			m.retiredCAs++
		}
	}()
	for k, v := range data {
		switch k {
		case "tls.crt":
			m.ca.Gen, m.ca.Corrupt = gen(k), false
		case keyPreviousCA:
			m.ca.Previous = gen(k)
		case keyNextCACert:
			m.ca.Next = gen(k)
		case keySwitchedAt:
			m.ca.SwitchedAt = time.Time{}
			if v != nil {
				m.ca.SwitchedAt, _ = time.Parse(time.RFC3339, string(*v))
			}
		}
	}
	for _, n := range m.podNames() {
		if p := m.pods[n]; retired != 0 && m.ca.Previous == 0 && p.Up && p.files != nil && p.files.CA == retired {
			m.failf("retired-early", "CA %d retired while Pod %s still shows a certificate it signed", retired, n)
		}
	}
	if c := m.etcd; c != nil && c.CA != 0 {
		if _, ok := data["tls.crt"]; ok && m.ca.Gen != c.CA {
			c.CA, c.Prev = m.ca.Gen, c.CA
		}
		if m.ca.Previous == 0 {
			c.Prev = 0
		}
	}
	m.tracef("operator patches Secret %s: CA %d, next %d, previous %d", caSecret(simBase), m.ca.Gen, m.ca.Next, m.ca.Previous)
	return nil
}

// addMember is etcd's member add of a learner: a peer URL in use is
// refused first, then a second learner.
func (m *model) addMember(host string, https bool) error {
	c := m.etcd
	if c.byHost(host) != nil {
		return &simErr{400, "etcdserver: Peer URLs already exists"}
	}
	for _, mb := range c.Members {
		if mb.Learner {
			return &simErr{400, "etcdserver: too many learner members in cluster"}
		}
	}
	c.Members = append(c.Members, &simMember{ID: m.newID(), Host: host, HTTPS: https, Learner: true})
	m.sortMembers()
	m.tracef("etcd: %s added as a learner", host)
	return nil
}

// promote is etcd's member promote: only a learner that runs and has
// caught up (started at an earlier tick), and only if the started voters
// keep a quorum of the larger cluster.
func (m *model) promote(id uint64) error {
	c := m.etcd
	mb := c.byID(id)
	switch {
	case mb == nil:
		return &simErr{400, "etcdserver: member not found"}
	case !mb.Learner:
		return &simErr{400, "etcdserver: can only promote a learner member"}
	case !m.running(mb) || m.pods[mb.Host].UpSince >= m.now:
		return &simErr{400, "etcdserver: can only promote a learner member which is in sync with leader"}
	}
	started := 1
	for _, o := range c.Members {
		if !o.Learner && o.started() {
			started++
		}
	}
	if started < quorum(c.voters()+1) {
		return &simErr{400, "etcdserver: re-configuration failed due to not enough started members"}
	}
	mb.Learner = false
	m.tracef("etcd: %s promoted", mb.Host)
	return nil
}

// removeMember is etcd's member remove with --strict-reconfig-check: the
// started voters left must be a quorum, and removing a member that is up
// must leave a quorum of members that are up. The removed member's etcd
// exits.
func (m *model) removeMember(self *simMember, id uint64) error {
	c := m.etcd
	mb := c.byID(id)
	if mb == nil {
		return &simErr{400, "etcdserver: member not found"}
	}
	if !mb.Learner {
		started := 0
		for _, o := range c.Members {
			if !o.Learner && o.started() && o != mb {
				started++
			}
		}
		if started < quorum(c.voters()-1) {
			return &simErr{400, "etcdserver: re-configuration failed due to not enough started members"}
		}
		if (m.running(mb) || mb == self) && m.runningVoters()-1 < quorum(c.voters()-1) {
			return &simErr{400, "etcdserver: unhealthy cluster"}
		}
	}
	c.Members = slices.DeleteFunc(c.Members, func(o *simMember) bool { return o == mb })
	m.tracef("etcd: %s removed", mb.Host)
	if p := m.pods[mb.Host]; p != nil && p.Data == mb.ID && p.Up {
		m.crash(p, "removed: the member has been permanently removed from the cluster")
	}
	m.reap()
	return nil
}

func (m *model) moveLeader(self *simMember, id uint64) error {
	to := m.etcd.byID(id)
	switch {
	case self.ID != m.leaderID():
		return &simErr{400, "etcdserver: not leader"}
	case to == nil || to.Learner || !m.running(to):
		return &simErr{400, "etcdserver: bad leader transferee"}
	}
	m.etcd.Leader = id
	m.tracef("etcd: leadership moves to %s", to.Host)
	return nil
}

// summary describes the model in one line, for traces.
func (m *model) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "spec %d %s;", m.spec.Size, m.spec.Version)
	if c := m.etcd; c != nil {
		fmt.Fprintf(&b, " etcd 3.%d leader=%s:", c.Minor, func() string {
			if l := m.leaderID(); l != 0 {
				return c.byID(l).Host
			}
			return "none"
		}())
		for _, mb := range c.Members {
			s := mb.Host
			if mb.Learner {
				s += "(learner)"
			}
			if !mb.started() {
				s += "(unstarted)"
			}
			if m.running(mb) {
				s += "+"
			}
			fmt.Fprintf(&b, " %s", s)
		}
		b.WriteString(";")
	} else {
		b.WriteString(" no etcd;")
	}
	b.WriteString(" pods:")
	for _, n := range m.podNames() {
		fmt.Fprintf(&b, " %s", m.podState(m.pods[n]))
	}
	if m.volumes {
		b.WriteString("; claims:")
		for _, n := range m.claimNames() {
			c := m.claims[n]
			fmt.Fprintf(&b, " %s(%x)", n, c.Data)
			if c.Deleting {
				b.WriteString("-deleting")
			}
			if c.Lost {
				b.WriteString("-lost")
			}
			if m.lagged[n] != nil {
				b.WriteString("-unseen")
			}
		}
	}
	if m.cordoned {
		b.WriteString("; cordoned")
	}
	if m.spec.TLS != nil || m.ca.Gen != 0 {
		b.WriteString("; tls:")
		if m.spec.TLS == nil {
			b.WriteString(" (not in spec)")
		}
		switch {
		case m.ca.Gen == 0:
			b.WriteString(" no CA")
		case m.ca.Lost:
			fmt.Fprintf(&b, " CA %d lost", m.ca.Gen)
		case m.ca.Corrupt:
			fmt.Fprintf(&b, " CA %d corrupt", m.ca.Gen)
		default:
			fmt.Fprintf(&b, " CA %d", m.ca.Gen)
		}
		if c := m.etcd; c != nil {
			fmt.Fprintf(&b, ", trusted %d, auth enabled=%v users", c.CA, c.Auth.Enabled)
			for _, n := range slices.Sorted(maps.Keys(c.Auth.Users)) {
				fmt.Fprintf(&b, " %s", n)
				if c.Auth.Users[n].Root {
					b.WriteString("(root)")
				}
			}
			b.WriteString(";")
		}
		now := simTime(m.now)
		for _, n := range slices.Sorted(maps.Keys(m.leaves)) {
			l := m.leaves[n]
			fmt.Fprintf(&b, " %s(CA %d", n, l.CA)
			switch {
			case l.BadKey:
				b.WriteString(", bad key")
			case now.After(l.NotAfter):
				b.WriteString(", expired")
			case l.due(now):
				b.WriteString(", due")
			}
			if p := m.pods[n]; p != nil && p.files != nil && p.files.Serial != l.Serial {
				b.WriteString(", files older")
			}
			b.WriteString(")")
		}
	}
	return b.String()
}

// podState is a Pod's state in a word or two: name:phase[:detail].
func (m *model) podState(p *simPod) string {
	s := p.Name + ":" + tagOf(p.Image) + ":"
	switch {
	case p.Stuck:
		return s + "stuck-terminating"
	case p.Deleting:
		return s + "terminating"
	case p.Phase == "Failed":
		return s + "failed"
	case p.Up && p.Ready:
		return s + "ready"
	case p.Up:
		return s + "up"
	case p.Waiting == "CrashLoopBackOff":
		return s + "crashloop(" + exitClass(p.Exit) + ")"
	case p.Waiting != "":
		return s + p.Waiting
	case p.Phase == "Pending":
		return s + "pending"
	}
	return s + "down(" + exitClass(p.Exit) + ")"
}

// exitClass is the first word of an exit reason.
func exitClass(why string) string {
	c, _, _ := strings.Cut(why, ":")
	return cmp.Or(c, "none")
}
