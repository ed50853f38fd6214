// TLS: members that trust only each other, and certificates that renew
// by themselves.
//
// With spec.tls a cluster's members talk to each other over mutual TLS and
// serve clients over TLS, with certificates from a CA of the cluster's own
// that the operator makes with crypto/x509 and keeps in Secrets the
// EtcdCluster owns. A Secret is Kubernetes' place for keys: the kubelet
// mounts it into the Pod as files and, when the Secret changes, rewrites
// the files within a minute or so. etcd reads its certificate and key again
// at every new TLS handshake, so a renewed certificate needs no restart.
//
// The Secrets, all labelled with the cluster's and owned by it:
//
//   - BASE-ca: the CA's certificate and key (tls.crt, tls.key), and the
//     key pair the members sign etcd's tokens with (jwt.key, jwt.pub;
//     auth.go says why).
//   - MEMBER-tls: a member's certificate and key with the CA (tls.crt,
//     tls.key, ca.crt, the shape cert-manager writes), both a server
//     certificate for clients and peers and a client one for dialling its
//     peers, for every name the member is reached by; and the token keys.
//   - BASE-root: a user with etcd's root role and its password, with the
//     CA to trust (username, password, ca.crt): what an administrator needs
//     to connect (auth.go says why clients use passwords and not
//     certificates; credentials.go how they rotate).
//
// Renewal happens at two thirds of a certificate's life (ca.RenewAt): the
// operator issues a new key and certificate into the member's Secret.
package main

import (
	"cmp"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/ca"
)

const (
	// metricsPort serves /livez, /readyz and /metrics on plain http
	// (--listen-metrics-urls): the kubelet's probes have no credentials.
	metricsPort = 2381
	tlsDir      = "/etc/etcd/tls"
	// clusterDomain is the DNS domain of the Kubernetes cluster, in the
	// longest name a member's certificate covers.
	clusterDomain = "cluster.local"

	defaultCertLifetime = 90 * 24 * time.Hour
	defaultCALifetime   = 10 * 365 * 24 * time.Hour
	minCertLifetime     = time.Minute
)

// tlsSpec is spec.tls.
type tlsSpec struct {
	// CertificateLifetime is how long a member's certificate is valid;
	// CALifetime the CA's. Short ones are for tests.
	CertificateLifetime, CALifetime time.Duration
	// CredentialsRotation, changed to any new value, asks for new root
	// credentials; the old ones work for CredentialsOverlap more
	// (credentials.go).
	CredentialsRotation string
	CredentialsOverlap  time.Duration
	// CARotation, changed to any new value, asks for a new CA now
	// (carotation.go); it also rotates by itself at two thirds of its life.
	CARotation string
}

// parseTLS reads spec.tls: absent or null is plain http, an object (even
// empty) is TLS.
func parseTLS(raw json.RawMessage, version string) (*tlsSpec, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s struct {
		CertificateLifetime *string `json:"certificateLifetime"`
		CALifetime          *string `json:"caLifetime"`
		CredentialsRotation string  `json:"credentialsRotation"`
		CredentialsOverlap  *string `json:"credentialsOverlap"`
		CARotation          string  `json:"caRotation"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("spec.tls.%s must be a string, not %s", te.Field, te.Value)
		}
		return nil, fmt.Errorf("spec.tls must be an object such as {certificateLifetime: 2160h}, not %s", excerpt(raw))
	}
	t := &tlsSpec{CertificateLifetime: defaultCertLifetime, CALifetime: defaultCALifetime, CredentialsRotation: s.CredentialsRotation, CredentialsOverlap: defaultCredentialsOverlap, CARotation: s.CARotation}
	for _, f := range []struct {
		name string
		raw  *string
		d    *time.Duration
	}{{"certificateLifetime", s.CertificateLifetime, &t.CertificateLifetime}, {"caLifetime", s.CALifetime, &t.CALifetime}, {"credentialsOverlap", s.CredentialsOverlap, &t.CredentialsOverlap}} {
		if f.raw == nil {
			continue
		}
		d, err := time.ParseDuration(*f.raw)
		if err != nil || d < minCertLifetime {
			return nil, fmt.Errorf("spec.tls.%s must be a duration of at least %s such as 2160h, not %q", f.name, minCertLifetime, *f.raw)
		}
		*f.d = d
	}
	if t.CALifetime < t.CertificateLifetime {
		return nil, fmt.Errorf("spec.tls.caLifetime (%s) must not be shorter than spec.tls.certificateLifetime (%s)", t.CALifetime, t.CertificateLifetime)
	}
	// --peer-skip-client-san-verification (tlsFlags) has that name from
	// etcd v3.6 on.
	if v, ok := parseVersion(version); ok && (v[0] < 3 || v[0] == 3 && v[1] < 6) {
		return nil, fmt.Errorf("spec.tls needs etcd v3.6 or later, and spec.version is %s", version)
	}
	return t, nil
}

func caSecret(base string) string       { return base + "-ca" }
func rootSecret(base string) string     { return base + "-root" }
func memberSecret(member string) string { return member + "-tls" }

// tlsFlags are etcd's TLS flags; none without spec.tls.
func (p clusterPlan) tlsFlags() []string {
	if p.TLS == nil {
		return nil
	}
	return []string{
		"--cert-file=" + tlsDir + "/tls.crt",
		"--key-file=" + tlsDir + "/tls.key",
		"--peer-cert-file=" + tlsDir + "/tls.crt",
		"--peer-key-file=" + tlsDir + "/tls.key",
		// Peers must show a certificate of this cluster's CA. No
		// --trusted-ca-file for clients: with it etcd demands a client
		// certificate on every client URL, and the API server's Pod proxy,
		// the operator's way in, has none (auth.go).
		"--peer-trusted-ca-file=" + tlsDir + "/ca.crt",
		"--peer-client-cert-auth",
		// etcd would also match a connecting peer's certificate against
		// its address, a Pod IP that no certificate can name in advance;
		// the CA, which signs this cluster's members only, is the check.
		"--peer-skip-client-san-verification",
		fmt.Sprintf("--listen-metrics-urls=http://0.0.0.0:%d", metricsPort),
		// Tokens every member can check (auth.go), not etcd's simple ones.
		fmt.Sprintf("--auth-token=jwt,pub-key=%s/jwt.pub,priv-key=%s/jwt.key,sign-method=ES256,ttl=%s", tlsDir, tlsDir, tokenTTL),
	}
}

func (p clusterPlan) tlsVolumes(member string) []map[string]any {
	if p.TLS == nil {
		return nil
	}
	// The default file mode (0644): the files are readable by whatever
	// user the etcd image runs as, and by nothing outside the container.
	return []map[string]any{{"name": "tls", "secret": map[string]any{"secretName": memberSecret(member)}}}
}

func (p clusterPlan) tlsMounts() []map[string]any {
	if p.TLS == nil {
		return nil
	}
	return []map[string]any{{"name": "tls", "mountPath": tlsDir, "readOnly": true}}
}

func (p clusterPlan) tlsPorts() []map[string]any {
	if p.TLS == nil {
		return nil
	}
	return []map[string]any{{"name": "metrics", "containerPort": metricsPort, "protocol": "TCP"}}
}

// memberNames are the names a member is reached by: its Service's in every
// form, the client Service's (clients reach any member through it), and
// localhost for etcd's own gateway.
func (p clusterPlan) memberNames(member string) []string {
	var names []string
	for _, n := range []string{member, p.ClientService} {
		names = append(names, n, n+"."+p.namespace, n+"."+p.namespace+".svc", n+"."+p.namespace+".svc."+clusterDomain)
	}
	return append(names, "localhost")
}

// Kinds of Secret the operator makes.
const (
	secretCA       = "ca"
	secretRoot     = "root"
	secretLeaf     = "leaf"
	secretNextRoot = "next-root" // a rotation's next user and password, into BASE-root (credentials.go)
	secretNextCA   = "next-ca"   // a CA rotation's next CA, into BASE-ca (carotation.go)
)

// secretToMake is a Secret whose keys act makes as it sends it (tlsact.go):
// keys are random and certificates dated, and decide is neither.
type secretToMake struct {
	Kind string
	Name string
	Meta map[string]any
	// CA issues a leaf. Trust is the ca.crt of a leaf and of the root
	// Secret: the CA, and during a CA rotation the other one too
	// (carotation.go).
	CA       *ca.CA
	Trust    []byte
	Leaf     ca.Leaf
	Lifetime time.Duration // of a new CA
	// JWT are the token keys a leaf's Secret carries, from BASE-ca.
	JWT map[string][]byte
	// User is the next root user's name, for a next-root; Rotation the
	// spec.tls.credentialsRotation a root Secret answers. User and
	// Password, for a root Secret, are a restored backup's credentials
	// instead of root and a random password.
	User, Password, Rotation string
}

func (p clusterPlan) caToMake() *secretToMake {
	return &secretToMake{Kind: secretCA, Name: caSecret(p.Base), Meta: p.meta(caSecret(p.Base), ""), Lifetime: p.TLS.CALifetime, Rotation: p.TLS.CARotation}
}

// rootToMake is Secret BASE-root, with restored's credentials if the
// cluster is restored from a backup that has users.
func (p clusterPlan) rootToMake(issuer *ca.CA, restored *restoredCredentials) *secretToMake {
	// The first password answers the rotation asked for at the start.
	s := &secretToMake{Kind: secretRoot, Name: rootSecret(p.Base), Meta: p.meta(rootSecret(p.Base), ""), CA: issuer, Trust: p.Trust, Rotation: p.TLS.CredentialsRotation}
	if restored != nil {
		s.User, s.Password = restored.User, restored.Password
	}
	return s
}

func (p clusterPlan) leafToMake(issuer *ca.CA, jwt map[string][]byte, member string) *secretToMake {
	return &secretToMake{Kind: secretLeaf, Name: memberSecret(member), Meta: p.meta(memberSecret(member), member), CA: issuer, Trust: p.Trust, JWT: jwt,
		Leaf: ca.Leaf{CommonName: member, DNSNames: p.memberNames(member), IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
			Server: true, Client: true, Lifetime: p.TLS.CertificateLifetime}}
}

// data makes the Secret's keys at now.
func (s *secretToMake) data(now time.Time) (typ string, data map[string][]byte, err error) {
	switch s.Kind {
	case secretCA, secretNextCA:
		data, err := s.caData(now)
		return "kubernetes.io/tls", data, err
	case secretRoot:
		user, pw := cmp.Or(s.User, rootUser), s.Password
		if pw == "" {
			var err error
			if pw, err = newPassword(); err != nil {
				return "", nil, err
			}
		}
		data := map[string][]byte{"username": []byte(user), "password": []byte(pw), "ca.crt": s.trust()}
		if s.Rotation != "" {
			data[keyRotation] = []byte(s.Rotation)
		}
		return "Opaque", data, nil
	case secretNextRoot:
		pw, err := newPassword()
		if err != nil {
			return "", nil, err
		}
		return "Opaque", map[string][]byte{keyNextUser: []byte(s.User), keyNextPassword: []byte(pw)}, nil
	case secretLeaf:
		cert, key, err := s.CA.Issue(s.Leaf, now)
		if err != nil {
			return "", nil, err
		}
		return "kubernetes.io/tls", map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": s.trust(), "jwt.key": s.JWT["jwt.key"], "jwt.pub": s.JWT["jwt.pub"],
			keyIssuedAt: []byte(stamp(now))}, nil
	}
	return "", nil, fmt.Errorf("secret %s: unknown kind %q", s.Name, s.Kind)
}

// caData is a new CA's keys: BASE-ca's own, or a CA rotation's next one
// (carotation.go).
func (s *secretToMake) caData(now time.Time) (map[string][]byte, error) {
	name := strings.TrimSuffix(s.Name, "-ca") + " etcd CA"
	if s.Kind == secretNextCA {
		// Named by the time it is made: the old and the new CA differ in
		// name, in the bundle and in a person's openssl output.
		name += " " + now.UTC().Format("2006-01-02T15:04:05Z")
	}
	c, err := ca.New(name, s.Lifetime, now)
	if err != nil {
		return nil, err
	}
	if s.Kind == secretNextCA {
		return map[string][]byte{keyNextCACert: c.CertPEM(), keyNextCAKey: c.KeyPEM(), keyRotation: []byte(s.Rotation)}, nil
	}
	jwt, err := jwtKeys()
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{"tls.crt": c.CertPEM(), "tls.key": c.KeyPEM(), "jwt.key": jwt["jwt.key"], "jwt.pub": jwt["jwt.pub"]}
	if s.Rotation != "" {
		data[keyRotation] = []byte(s.Rotation)
	}
	return data, nil
}

// trust is the ca.crt a leaf or the root Secret gets.
func (s *secretToMake) trust() []byte {
	if len(s.Trust) > 0 {
		return s.Trust
	}
	return s.CA.CertPEM()
}

// newPassword is 24 random bytes, in base64.
func newPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// jwtKeys is a new ECDSA P-256 key pair in PEM, as etcd's ES256 tokens
// take it.
func jwtKeys() (map[string][]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"jwt.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}),
		"jwt.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	}, nil
}

// body is the Secret to create.
func (s *secretToMake) body(now time.Time) ([]byte, error) {
	typ, data, err := s.data(now)
	if err != nil {
		return nil, fmt.Errorf("make secret %s: %w", s.Name, err)
	}
	return mustJSON(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": s.Meta, "type": typ, "data": data}), nil
}

// tlsView is what a pass saw of a cluster's Secrets (observeTLS).
type tlsView struct {
	CA *ca.CA // nil if BASE-ca is missing or unreadable
	// Next is a CA rotation's new CA, trusted but not issuing yet;
	// Previous the certificate of the CA it replaced, trusted until no
	// leaf it signed is left; CARotation the spec.tls.caRotation BASE-ca
	// answers (carotation.go).
	Next       *ca.CA
	Previous   []byte
	CARotation string
	SwitchedAt time.Time // when Next became the CA
	// RootTrust is the ca.Fingerprint of BASE-root's ca.crt.
	RootTrust string
	// CAProblem says why BASE-ca cannot be used, if it exists.
	CAProblem string
	// JWT are BASE-ca's token keys (jwt.key, jwt.pub).
	JWT map[string][]byte
	// HasRoot: BASE-root exists; Root is the password in it, of user
	// Creds.User (root until a rotation, credentials.go).
	HasRoot bool
	Root    string
	Creds   credentialsView
	// Restored are the credentials of spec.restore.credentialsSecret,
	// read while BASE-root does not exist yet (observeTLS).
	Restored *restoredCredentials
	Leaves   map[string]leafView // by member name
}

// bundle is the CAs every member and client is to trust: the CA, and
// the next or the previous one while the CA rotates.
func (v *tlsView) bundle() []byte {
	if v.CA == nil {
		return nil
	}
	var next []byte
	if v.Next != nil {
		next = v.Next.CertPEM()
	}
	return ca.Bundle(v.CA.CertPEM(), next, v.Previous)
}

// restoredCredentials are a user and password a restored backup's etcd
// takes, or why the Secret that should hold them cannot be used.
type restoredCredentials struct {
	User, Password, Problem string
}

// leafView is a member's certificate as its Secret holds it.
type leafView struct {
	NotAfter time.Time
	// Renew: due at two thirds of its life, not usable (Problem), or
	// due for a CA rotation (Why); else RenewIn is how long until it is
	// due.
	Renew        bool
	RenewIn      time.Duration
	Problem, Why string
	// Trust is the ca.Fingerprint of its ca.crt.
	Trust string
	// IssuedAt is when the operator wrote it (its key issued-at): the
	// kubelet puts it into the Pod at its next sync.
	IssuedAt time.Time
}

// keyIssuedAt is the key of a member's Secret that says when it was
// written.
const keyIssuedAt = "issued-at"

// secret is the part of a Secret the operator reads.
type secret struct {
	Metadata ownedMeta         `json:"metadata"`
	Data     map[string][]byte `json:"data"`
}

// tlsOf reads a cluster's Secrets at now.
func tlsOf(secrets []secret, base string, now time.Time) *tlsView {
	v := &tlsView{Leaves: map[string]leafView{}}
	byName := map[string]secret{}
	for _, s := range secrets {
		byName[s.Metadata.Name] = s
	}
	if s, ok := byName[caSecret(base)]; ok {
		var err error
		v.CA, err = ca.Parse(s.Data["tls.crt"], s.Data["tls.key"])
		v.JWT = map[string][]byte{"jwt.key": s.Data["jwt.key"], "jwt.pub": s.Data["jwt.pub"]}
		switch {
		case err != nil:
			v.CAProblem = fmt.Sprintf("Secret %s: %v", caSecret(base), err)
		case len(v.JWT["jwt.key"]) == 0 || len(v.JWT["jwt.pub"]) == 0:
			v.CA, v.CAProblem = nil, fmt.Sprintf("Secret %s has no jwt.key and jwt.pub", caSecret(base))
		}
	}
	if s, ok := byName[rootSecret(base)]; ok {
		v.HasRoot, v.Root, v.Creds = true, string(s.Data["password"]), credentialsOf(s.Data, now)
		v.RootTrust = ca.Fingerprint(s.Data["ca.crt"])
	}
	if v.CA != nil {
		v.readRotation(byName[caSecret(base)].Data)
	}
	for name, s := range byName {
		if member, ok := strings.CutSuffix(name, "-tls"); ok && v.CA != nil {
			v.Leaves[member] = v.leafOf(member, s.Data, now)
		}
	}
	return v
}

// readRotation reads a CA rotation's keys of BASE-ca. One that cannot be
// read counts as absent: the rotation makes a new next CA, or renews the
// leaves of the previous one at once.
func (v *tlsView) readRotation(data map[string][]byte) {
	v.CARotation = string(data[keyRotation])
	if len(data[keyNextCACert]) > 0 {
		v.Next, _ = ca.Parse(data[keyNextCACert], data[keyNextCAKey])
	}
	if p := data[keyPreviousCA]; len(p) > 0 {
		v.Previous = p
	}
	v.SwitchedAt, _ = time.Parse(time.RFC3339, string(data[keySwitchedAt]))
}

// whyPreviousCA is a leafView's Why for a certificate to renew because
// the previous CA signed it.
const whyPreviousCA = "the CA rotates, and the previous CA issued it"

// trustNote names the CAs of the bundle, for messages.
func (v *tlsView) trustNote() string {
	switch {
	case v.Next != nil:
		return "both the CA and the new one (valid until " + stamp(v.Next.NotAfter()) + ")"
	case v.Previous != nil:
		return "both the CA and the previous one"
	}
	return "the CA alone (valid until " + stamp(v.CA.NotAfter()) + ")"
}

// leafOf checks a member's Secret against the CA.
func (v *tlsView) leafOf(member string, data map[string][]byte, now time.Time) leafView {
	info, err := ca.Check(data["tls.crt"], data["tls.key"], v.CA.CertPEM(), now)
	old := false
	if errors.Is(err, ca.ErrUnknownAuthority) && v.Previous != nil {
		if i, perr := ca.Check(data["tls.crt"], data["tls.key"], v.Previous, now); perr == nil {
			info, err, old = i, nil, true
		}
	}
	at := ca.RenewAt(info.NotBefore, info.NotAfter)
	l := leafView{NotAfter: info.NotAfter, Renew: !now.Before(at), RenewIn: at.Sub(now), Trust: ca.Fingerprint(data["ca.crt"])}
	l.IssuedAt, _ = time.Parse(time.RFC3339, string(data[keyIssuedAt]))
	switch {
	case err != nil:
		l.Problem = err.Error()
	case !info.Covers(member):
		l.Problem = "the certificate does not name " + member
	case !ca.Holds(data["ca.crt"], v.CA):
		l.Problem = "its ca.crt is not the cluster's CA"
	case !slices.Equal(data["jwt.pub"], v.JWT["jwt.pub"]) || !slices.Equal(data["jwt.key"], v.JWT["jwt.key"]):
		l.Problem = "its token keys are not the cluster's"
	case old:
		l.Why = whyPreviousCA
	case l.Trust != ca.Fingerprint(v.bundle()):
		l.Why = "the CA rotates, and its ca.crt is to trust " + v.trustNote()
	}
	l.Renew = l.Renew || l.Problem != "" || l.Why != ""
	return l
}

// tls is the TLS the members run. spec.tls decides for a cluster with no
// member yet; the members' peer URLs and Pods for one that runs, since a
// switch between http and https on a running cluster is not done yet
// (noteTLSSwitch); the last status for one of which nothing is seen now
// (its only Pod deleted, its data on a volume).
func (d *decision) tls() *tlsSpec {
	seen, on := false, false
	for _, m := range d.obs.Etcd.Listed {
		seen, on = true, on || m.PeerHTTPS
	}
	for _, p := range d.obs.Pods {
		if !p.Deleting {
			seen, on = true, on || p.TLS
		}
	}
	if !seen {
		// As the last status says it ran, or without one as asked.
		on = d.in.Prev.TLS != nil || d.in.Prev.ClusterID == "" && d.in.Spec.TLS != nil
	}
	switch {
	case on == (d.in.Spec.TLS != nil):
		return d.in.Spec.TLS
	case on:
		return &tlsSpec{CertificateLifetime: defaultCertLifetime, CALifetime: defaultCALifetime}
	}
	return nil
}

func (d *decision) tlsView() *tlsView {
	if d.obs.TLS == nil {
		return &tlsView{Leaves: map[string]leafView{}}
	}
	return d.obs.TLS
}

// tlsCA: a new cluster with spec.tls first gets its CA, which issues its
// members' certificates.
func (d *decision) tlsCA() (step, bool) {
	v := d.tlsView()
	if d.tls() == nil {
		return step{}, false
	}
	if r := v.Restored; r != nil && r.Problem != "" {
		return d.wait(phaseCreating, reasonBadSecret, r.Problem), true
	}
	if v.CA != nil {
		return step{}, false
	}
	if v.CAProblem != "" {
		msg := v.CAProblem + ": the operator cannot issue the members' certificates; delete the Secret, and it makes a new CA"
		return d.wait(phaseCreating, reasonBadSecret, msg), true
	}
	plan := d.plan(d.image())
	msg := "creating the cluster's certificate authority (Secret " + caSecret(d.in.Base) + ")"
	s := step{Action: actCreateCA, Create: []object{{Resource: "secrets", Name: caSecret(d.in.Base), Secret: plan.caToMake()}}}
	return d.progress(phaseCreating, reasonCreating, msg, s), true
}

// missingSecrets are the Secrets of names (members) and the root password
// that do not exist yet, to be created before the members' Pods.
func (d *decision) missingSecrets(names []string) []object {
	v := d.tlsView()
	if d.tls() == nil || v.CA == nil {
		return nil
	}
	plan := d.plan(d.image())
	var objs []object
	if !v.HasRoot {
		objs = append(objs, object{Resource: "secrets", Name: rootSecret(d.in.Base), Secret: plan.rootToMake(v.CA, v.Restored)})
	}
	for _, m := range names {
		if _, ok := v.Leaves[m]; !ok {
			objs = append(objs, object{Resource: "secrets", Name: memberSecret(m), Secret: plan.leafToMake(v.CA, v.JWT, m)})
		}
	}
	return objs
}

// certificates: every member of a TLS cluster has a certificate, renewed at
// two thirds of its life or at once if it cannot serve (wrong CA, a key
// that does not match, a name missing). A renewal restarts nothing: etcd
// reads the files at its next handshake, once the kubelet has written the
// Secret's new contents into the Pod. It never costs quorum, so it comes
// first, even before needQuorum: expired certificates may be why the
// quorum is lost.
func (d *decision) certificates() (step, bool) {
	v := d.tlsView()
	if d.tls() == nil {
		return step{}, false
	}
	if v.CA == nil {
		msg := cmp.Or(v.CAProblem, "Secret "+caSecret(d.in.Base)+" is gone") + ": the operator cannot issue or renew the members' certificates, and a new CA would not be trusted by the running members. Put the CA back"
		if d.obs.Etcd.Members == nil || !d.quorumOK() {
			s := d.unavailable() // the quorum's loss first, as needQuorum says it
			d.st.Message += "; and " + msg
			d.setProgressing(true, reasonBadSecret, msg)
			return step{Again: max(s.Again, pollAgain)}, true
		}
		d.setDegraded(true, reasonBadSecret, msg)
		return d.wait(phaseDegraded, reasonBadSecret, msg), true
	}
	plan := d.plan(d.image())
	// progress reports the step; without a quorum the status says that
	// first, as needQuorum would.
	progress := func(msg string, s step) step {
		if d.obs.Etcd.Members == nil || !d.quorumOK() {
			d.unavailable()
			d.st.Message += "; meanwhile " + msg
			return s
		}
		return d.progress(d.healthPhase(), reasonRenewingCertificate, msg, s)
	}
	for _, m := range d.tlsMembers() {
		l, ok := v.Leaves[m]
		switch {
		case !ok:
			msg := "issuing the certificate of member " + m + " (Secret " + memberSecret(m) + ")"
			s := step{Action: actIssueCertificate, Member: m, Create: []object{{Resource: "secrets", Name: memberSecret(m), Secret: plan.leafToMake(v.CA, v.JWT, m)}}}
			return progress(msg, s), true
		case l.Renew:
			why := cmp.Or(l.Problem, l.Why, "two thirds of its life are over")
			msg := fmt.Sprintf("renewing the certificate of member %s (Secret %s, valid until %s): %s", m, memberSecret(m), stamp(l.NotAfter), why)
			s := step{Action: actRenewCertificate, Member: m, Renew: plan.leafToMake(v.CA, v.JWT, m),
				News: []notice{{eventNormal, reasonCertificateRenewed, msg}}}
			return progress(msg, s), true
		}
	}
	return step{}, false
}

// healthPhase is the phase of a cluster that has a quorum, for a step
// that changes no member: Running only while spec.size members, and no
// more, are ready; Scaling while more members than spec.size wait to be
// removed.
func (d *decision) healthPhase() string {
	switch {
	case d.st.ReadyMembers < max(d.in.Spec.Size, len(d.obs.Etcd.Members)):
		return phaseDegraded
	case len(d.obs.Etcd.Members) > d.in.Spec.Size:
		return phaseScaling
	}
	return phaseRunning
}

// renewIn is how soon the next certificate is due: a settled cluster is
// looked at again then, since nothing in Kubernetes announces the date.
func (d *decision) renewIn() time.Duration {
	var next time.Duration
	for _, m := range d.tlsMembers() {
		if l, ok := d.tlsView().Leaves[m]; ok && !l.Renew && (next == 0 || l.RenewIn < next) {
			next = max(l.RenewIn, time.Second)
		}
	}
	return next
}

// tlsMembers are the members that need a certificate: those etcd lists,
// and those with a Pod.
func (d *decision) tlsMembers() []string {
	var names []string
	for _, m := range d.obs.Etcd.Listed {
		names = append(names, m.PeerHost)
	}
	for _, p := range d.obs.Pods {
		if !p.Deleting {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// noteTLSSwitch: spec.tls turned on or off for a cluster that runs the
// other way. Not done yet: the members keep what they run, and the status
// of a cluster with nothing else to do says so.
func (d *decision) noteTLSSwitch() {
	if on := d.tls() != nil; on == (d.in.Spec.TLS != nil) {
		return
	}
	msg := "spec.tls was added to a cluster that runs on plain http; switching a running cluster to TLS is not supported yet, so its members stay on http"
	if d.in.Spec.TLS == nil {
		msg = "spec.tls was removed from a cluster that runs on TLS; switching a running cluster to plain http is not supported yet, so its members stay on TLS"
	}
	d.st.Message = msg
	d.setProgressing(false, reasonTLSSwitchUnsupported, msg)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// reportTLS writes the status's tls part: each certificate's expiry and
// whether authentication is on.
func (d *decision) reportTLS() {
	if d.tls() == nil {
		return
	}
	v := d.tlsView()
	t := &tlsStatus{Auth: "off", CredentialsSecret: rootSecret(d.in.Base)}
	if prev := d.in.Prev.TLS; prev != nil && d.obs.Etcd.Auth == nil {
		t.Auth = prev.Auth // the leader did not say: as last seen
	}
	if a := d.obs.Etcd.Auth; a != nil && a.Enabled {
		t.Auth = "enabled"
	}
	if v.CA != nil {
		t.CANotAfter = stamp(v.CA.NotAfter())
		t.CARotation = d.caRotationStatus()
	}
	if v.HasRoot {
		t.User, t.CredentialsRotation = v.Creds.User, v.Creds.Rotation
	}
	for _, m := range d.tlsMembers() {
		if l, ok := v.Leaves[m]; ok {
			t.Certificates = append(t.Certificates, certificateStatus{Secret: memberSecret(m), NotAfter: stamp(l.NotAfter), Problem: l.Problem})
		}
	}
	d.st.TLS = t
}
