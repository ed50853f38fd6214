package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// t0 is the time the tests run at: certificates are checked against it,
// not against the clock.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func mustCA(t *testing.T, commonName string, lifetime time.Duration) *CA {
	t.Helper()
	ca, err := New(commonName, lifetime, t0)
	if err != nil {
		t.Fatalf("New(%q): %v", commonName, err)
	}
	return ca
}

func mustIssue(t *testing.T, ca *CA, l Leaf) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(l, t0)
	if err != nil {
		t.Fatalf("Issue(%q): %v", l.name(), err)
	}
	return certPEM, keyPEM
}

func mustParseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	certs, err := parseCerts(certPEM)
	if err != nil || len(certs) == 0 {
		t.Fatalf("parse certificate: %v (%d certificates)", err, len(certs))
	}
	return certs[0]
}

func certPool(t *testing.T, pems ...[]byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(Bundle(pems...)) {
		t.Fatal("no CA certificate for the pool")
	}
	return pool
}

// member is a member's leaf: a server for clients and peers, and a client
// for its peers and for the gateway.
func member(lifetime time.Duration) Leaf {
	return Leaf{
		CommonName: "etcd-0",
		DNSNames:   []string{"etcd-0", "etcd-0.ns", "etcd-0.ns.svc", "*.etcd.ns.svc.cluster.local"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1)},
		Server:     true,
		Client:     true,
		Lifetime:   lifetime,
	}
}

// A leaf verifies for the extended key usages it was issued with, and
// for no other.
func TestIssuedLeafVerifiesForItsUsage(t *testing.T) {
	ca := mustCA(t, "etcd-ca", 24*time.Hour)
	server := Leaf{CommonName: "etcd-0", DNSNames: []string{"etcd-0.ns.svc"}, Server: true, Lifetime: time.Hour}
	client := Leaf{CommonName: "root", Client: true, Lifetime: time.Hour}
	for _, tc := range []struct {
		name           string
		leaf           Leaf
		server, client bool
	}{
		{"server only", server, true, false},
		{"client only", client, false, true},
		{"member, server and client", member(time.Hour), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, keyPEM := mustIssue(t, ca, tc.leaf)
			cert := mustParseCert(t, certPEM)
			for usage, want := range map[x509.ExtKeyUsage]bool{x509.ExtKeyUsageServerAuth: tc.server, x509.ExtKeyUsageClientAuth: tc.client} {
				_, err := cert.Verify(x509.VerifyOptions{Roots: certPool(t, ca.CertPEM()), CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{usage}})
				if (err == nil) != want {
					t.Errorf("verify for usage %v: error %v, want it to verify: %v", usage, err, want)
				}
			}
			info, err := Check(certPEM, keyPEM, ca.CertPEM(), t0)
			if err != nil || info.Server != tc.server || info.Client != tc.client {
				t.Errorf("Check: server %v, client %v, error %v; want server %v, client %v", info.Server, info.Client, err, tc.server, tc.client)
			}
		})
	}
}

// handshake runs a TLS handshake over a pipe and passes a few bytes, and
// returns what each side saw go wrong.
func handshake(serverConfig, clientConfig *tls.Config) (serverErr, clientErr error) {
	sc, cc := net.Pipe()
	defer sc.Close()
	defer cc.Close()
	deadline := time.Now().Add(10 * time.Second)
	sc.SetDeadline(deadline)
	cc.SetDeadline(deadline)
	done := make(chan error, 1)
	go func() {
		server := tls.Server(sc, serverConfig)
		err := server.Handshake()
		if err == nil {
			_, err = server.Write([]byte("ok"))
		}
		done <- err
	}()
	client := tls.Client(cc, clientConfig)
	err := client.Handshake()
	if err == nil {
		_, err = io.ReadFull(client, make([]byte, 2))
	}
	cc.Close() // unblocks a server still writing its alert
	return <-done, err
}

// offer has a client send its certificate even when the server asks for
// another CA's, so that it is the server's verification that refuses it.
func offer(pair tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
}

func issuePair(t *testing.T, ca *CA, l Leaf) tls.Certificate {
	t.Helper()
	certPEM, keyPEM := mustIssue(t, ca, l)
	return keyPair(t, certPEM, keyPEM)
}

func keyPair(t *testing.T, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("tls.X509KeyPair: %v", err)
	}
	return pair
}

// Mutual TLS works with issued certificates, the member's own server
// certificate included (the gateway dials with it); a client certificate
// from another CA, one without clientAuth, or a name the server's
// certificate does not hold, is refused.
func TestMutualTLSHandshake(t *testing.T) {
	ca, other := mustCA(t, "etcd-ca", 24*time.Hour), mustCA(t, "other-ca", 24*time.Hour)
	memberPair := issuePair(t, ca, member(time.Hour))
	client := Leaf{CommonName: "root", Client: true, Lifetime: time.Hour}
	serverOnly := Leaf{CommonName: "etcd-1", DNSNames: []string{"etcd-1"}, Server: true, Lifetime: time.Hour}
	for _, tc := range []struct {
		name       string
		client     tls.Certificate
		serverName string
		wantErr    string // in the server's or the client's error
	}{
		{"client from the same CA", issuePair(t, ca, client), "etcd-0.ns.svc", ""},
		{"member's server certificate as client", memberPair, "etcd-0", ""},
		{"wildcard name", memberPair, "etcd-1.etcd.ns.svc.cluster.local", ""},
		{"IP address", memberPair, "127.0.0.1", ""},
		{"client from another CA", issuePair(t, other, client), "etcd-0", "unknown authority"},
		{"server-only certificate as client", issuePair(t, ca, serverOnly), "etcd-0", "incompatible key usage"},
		{"name not in the server certificate", memberPair, "etcd-0.other.svc", "not etcd-0.other.svc"},
		{"wildcard covers one label only", memberPair, "a.b.etcd.ns.svc.cluster.local", "not a.b.etcd.ns.svc.cluster.local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serverErr, clientErr := handshake(&tls.Config{
				Certificates: []tls.Certificate{memberPair},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    certPool(t, ca.CertPEM()),
				Time:         func() time.Time { return t0 },
			}, &tls.Config{
				GetClientCertificate: offer(tc.client),
				RootCAs:              certPool(t, ca.CertPEM()),
				ServerName:           tc.serverName,
				Time:                 func() time.Time { return t0 },
			})
			errs := errors.Join(serverErr, clientErr)
			if tc.wantErr == "" && errs != nil || tc.wantErr != "" && (errs == nil || !strings.Contains(errs.Error(), tc.wantErr)) {
				t.Errorf("handshake: server error %v, client error %v; want an error with %q", serverErr, clientErr, tc.wantErr)
			}
		})
	}
}

// A member's certificate holds every name asked for, and Covers honours
// a wildcard in the first label only.
func TestCovers(t *testing.T) {
	ca := mustCA(t, "etcd-ca", 24*time.Hour)
	l := member(time.Hour)
	certPEM, keyPEM := mustIssue(t, ca, l)
	info, err := Check(certPEM, keyPEM, ca.CertPEM(), t0)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if !slices.Equal(info.DNSNames, l.DNSNames) {
		t.Errorf("DNS names %q, want %q", info.DNSNames, l.DNSNames)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"etcd-0", true},
		{"etcd-0.ns", true},
		{"etcd-0.ns.svc", true},
		{"ETCD-0.NS.SVC.", true},
		{"etcd-2.etcd.ns.svc.cluster.local", true},
		{"*.etcd.ns.svc.cluster.local", true},
		{"etcd.ns.svc.cluster.local", false},
		{".etcd.ns.svc.cluster.local", false},
		{"a.b.etcd.ns.svc.cluster.local", false},
		{"etcd-1", false},
		{"etcd-0.other", false},
		{"127.0.0.1", true},
		{"::ffff:127.0.0.1", true},
		{"127.0.0.2", false},
		{"", false},
	} {
		if got := info.Covers(tc.name); got != tc.want {
			t.Errorf("Covers(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Renewal is due at two thirds of the lifetime, also for a short-lived
// leaf whose start was moved back for clock skew.
func TestRenewAt(t *testing.T) {
	for _, tc := range []struct {
		notBefore, notAfter, want time.Time
	}{
		{t0, t0.Add(90 * 24 * time.Hour), t0.Add(60 * 24 * time.Hour)},
		{t0, t0.Add(3 * time.Hour), t0.Add(2 * time.Hour)},
		{t0.Add(-time.Second), t0.Add(2 * time.Second), t0.Add(time.Second)},
		{t0, t0, t0},
	} {
		if got := RenewAt(tc.notBefore, tc.notAfter); !got.Equal(tc.want) {
			t.Errorf("RenewAt(%v, %v) = %v, want %v", tc.notBefore, tc.notAfter, got, tc.want)
		}
	}
	ca := mustCA(t, "etcd-ca", time.Hour)
	for _, lifetime := range []time.Duration{3 * time.Second, time.Minute, 90 * 24 * time.Hour} {
		cert := mustParseCert(t, first(mustIssue(t, ca, member(lifetime))))
		renew := RenewAt(cert.NotBefore, cert.NotAfter)
		if !renew.After(t0) || !renew.Before(cert.NotAfter) {
			t.Errorf("leaf for %v, valid %v to %v: renewal at %v, want after %v and before it expires", lifetime, cert.NotBefore, cert.NotAfter, renew, t0)
		}
	}
}

func first(a, _ []byte) []byte { return a }

// checkError fails t unless err is the one sentinel want (nil for none)
// and its message holds every text; with no texts, err must be nil.
func checkError(t *testing.T, err, want error, texts []string) {
	t.Helper()
	for _, sentinel := range []error{ErrNoCertificate, ErrNoKey, ErrKeyMismatch, ErrUnknownAuthority, ErrExpired, ErrNotYetValid} {
		if errors.Is(err, sentinel) != (sentinel == want) {
			t.Errorf("error %v: errors.Is(%q) = %v", err, sentinel, sentinel != want)
		}
	}
	if len(texts) == 0 && err != nil || len(texts) > 0 && err == nil {
		t.Fatalf("error %v, want one with %q", err, texts)
	}
	for _, text := range texts {
		if !strings.Contains(err.Error(), text) {
			t.Errorf("error %q does not say %q", err, text)
		}
	}
}

// Check tells every problem apart, with a message that names it.
func TestCheck(t *testing.T) {
	ca, other := mustCA(t, "etcd-ca", 24*time.Hour), mustCA(t, "other-ca", 24*time.Hour)
	certPEM, keyPEM := mustIssue(t, ca, member(time.Hour))
	_, otherKey := mustIssue(t, ca, member(time.Hour))
	otherCert, otherCertKey := mustIssue(t, other, member(time.Hour))
	garbled := encodePEM("CERTIFICATE", []byte("not DER"))
	for _, tc := range []struct {
		name            string
		cert, key, cas  []byte
		now             time.Time
		want            error
		wantInMessage   []string
		wantNoInfoAtAll bool
	}{
		{name: "valid", cert: certPEM, key: keyPEM, cas: ca.CertPEM(), now: t0},
		{name: "leaf followed by its CA", cert: Bundle(certPEM, ca.CertPEM()), key: keyPEM, cas: ca.CertPEM(), now: t0},
		{name: "bundle with another CA too", cert: certPEM, key: keyPEM, cas: Bundle(other.CertPEM(), ca.CertPEM()), now: t0},
		{"no certificate", nil, keyPEM, ca.CertPEM(), t0, ErrNoCertificate, []string{"no certificate", "it is empty"}, true},
		{"key in place of the certificate", keyPEM, keyPEM, ca.CertPEM(), t0, ErrNoCertificate, []string{"no certificate", "PRIVATE KEY"}, true},
		{"garbled certificate", garbled, keyPEM, ca.CertPEM(), t0, nil, []string{"certificate 1", "cannot be read"}, true},
		{"no key", certPEM, []byte("\n"), ca.CertPEM(), t0, ErrNoKey, []string{"no private key", "it is empty"}, false},
		{"certificate in place of the key", certPEM, certPEM, ca.CertPEM(), t0, ErrNoKey, []string{"no private key", "CERTIFICATE"}, false},
		{"key of another certificate", certPEM, otherKey, ca.CertPEM(), t0, ErrKeyMismatch, []string{"does not match", `"etcd-0"`}, false},
		{"signed by another CA", otherCert, otherCertKey, ca.CertPEM(), t0, ErrUnknownAuthority, []string{"not signed by any CA", `"CN=other-ca"`, `"CN=etcd-ca"`}, false},
		{"empty CA bundle", certPEM, keyPEM, nil, t0, ErrUnknownAuthority, []string{"holds no certificate"}, false},
		{"expired", certPEM, keyPEM, ca.CertPEM(), t0.Add(61 * time.Minute), ErrExpired, []string{"expired", "until 2026-03-01T13:00:00Z", "now 2026-03-01T13:01:00Z"}, false},
		{"not yet valid", certPEM, keyPEM, ca.CertPEM(), t0.Add(-time.Hour), ErrNotYetValid, []string{"not valid yet", "from 2026-03-01T11:55:00Z"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Check(tc.cert, tc.key, tc.cas, tc.now)
			checkError(t, err, tc.want, tc.wantInMessage)
			if info.NotAfter.IsZero() != tc.wantNoInfoAtAll {
				t.Errorf("info %+v, want it filled in: %v", info, !tc.wantNoInfoAtAll)
			}
		})
	}
}

// During a CA rotation a bundle of the old and the new CA verifies leaves
// of both, at the TLS handshake too; either CA alone only its own.
func TestCARotation(t *testing.T) {
	old, next := mustCA(t, "etcd-ca-1", 24*time.Hour), mustCA(t, "etcd-ca-2", 48*time.Hour)
	oldCert, oldKey := mustIssue(t, old, member(time.Hour))
	newCert, newKey := mustIssue(t, next, member(time.Hour))
	bundle := Bundle(old.CertPEM(), next.CertPEM(), old.CertPEM())
	for _, tc := range []struct {
		name      string
		cert, key []byte
		cas       []byte
		trusted   bool
	}{
		{"old leaf, bundle", oldCert, oldKey, bundle, true},
		{"new leaf, bundle", newCert, newKey, bundle, true},
		{"old leaf, old CA", oldCert, oldKey, old.CertPEM(), true},
		{"new leaf, old CA", newCert, newKey, old.CertPEM(), false},
		{"old leaf, new CA", oldCert, oldKey, next.CertPEM(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check(tc.cert, tc.key, tc.cas, t0)
			if tc.trusted && err != nil || !tc.trusted && !errors.Is(err, ErrUnknownAuthority) {
				t.Errorf("Check: %v, want trusted: %v", err, tc.trusted)
			}
			serverErr, clientErr := handshake(&tls.Config{
				Certificates: []tls.Certificate{keyPair(t, oldCert, oldKey)},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    certPool(t, tc.cas),
				Time:         func() time.Time { return t0 },
			}, &tls.Config{
				GetClientCertificate: offer(keyPair(t, tc.cert, tc.key)),
				RootCAs:              certPool(t, bundle),
				ServerName:           "etcd-0",
				Time:                 func() time.Time { return t0 },
			})
			if (serverErr == nil && clientErr == nil) != tc.trusted {
				t.Errorf("handshake with the client's leaf: server error %v, client error %v; want trusted: %v", serverErr, clientErr, tc.trusted)
			}
		})
	}
}

// Bundle keeps each certificate once, in the order first seen, and drops
// what is not a certificate.
func TestBundle(t *testing.T) {
	a, b, c := mustCA(t, "a", time.Hour), mustCA(t, "b", time.Hour), mustCA(t, "c", time.Hour)
	got := Bundle(a.CertPEM(), append(b.CertPEM(), a.KeyPEM()...), Bundle(a.CertPEM(), c.CertPEM()), nil, b.CertPEM())
	want := slices.Concat(a.CertPEM(), b.CertPEM(), c.CertPEM())
	if !bytes.Equal(got, want) {
		t.Errorf("Bundle:\n%s\nwant:\n%s", got, want)
	}
	if got := Bundle(); len(got) != 0 {
		t.Errorf("Bundle() = %q, want nothing", got)
	}
}

// Fingerprint names a set of CAs: the order and repeats in a bundle do not
// change it, another CA does. Holds finds a CA in a bundle.
func TestFingerprintAndHolds(t *testing.T) {
	a, b, c := mustCA(t, "a", time.Hour), mustCA(t, "b", time.Hour), mustCA(t, "c", time.Hour)
	ab := Fingerprint(Bundle(a.CertPEM(), b.CertPEM()))
	for _, tc := range []struct {
		name   string
		bundle []byte
		same   bool
	}{
		{"the same order", slices.Concat(a.CertPEM(), b.CertPEM()), true},
		{"the other order", slices.Concat(b.CertPEM(), a.CertPEM()), true},
		{"a repeat and a key", slices.Concat(b.CertPEM(), a.KeyPEM(), a.CertPEM(), b.CertPEM()), true},
		{"one CA only", a.CertPEM(), false},
		{"a third CA", Bundle(a.CertPEM(), b.CertPEM(), c.CertPEM()), false},
		{"another pair", Bundle(a.CertPEM(), c.CertPEM()), false},
		{"nothing", nil, false},
	} {
		if got := Fingerprint(tc.bundle); (got == ab) != tc.same || len(got) != 32 {
			t.Errorf("%s: Fingerprint = %s, of a and b %s; want the same: %v", tc.name, got, ab, tc.same)
		}
	}
	bundle := Bundle(a.CertPEM(), b.CertPEM())
	if !Holds(bundle, a) || !Holds(bundle, b) || Holds(bundle, c) || Holds(nil, a) {
		t.Errorf("Holds: a %v, b %v, c %v, in nothing %v; want true, true, false, false", Holds(bundle, a), Holds(bundle, b), Holds(bundle, c), Holds(nil, a))
	}
}

// rsaCA makes a CA the way someone else might: RSA, its key in PKCS#1.
func rsaCA(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "rsa-ca"},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return encodePEM("CERTIFICATE", der), encodePEM("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
}

// Parse loads a CA again, from its own PEM, a bundle, or a key in another
// encoding, and the CA issues leaves that verify.
func TestParse(t *testing.T) {
	ca, other := mustCA(t, "etcd-ca", 24*time.Hour), mustCA(t, "other-ca", 24*time.Hour)
	sec1, err := x509.MarshalECPrivateKey(ca.key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	rsaCert, rsaKey := rsaCA(t)
	for _, tc := range []struct {
		name      string
		cert, key []byte
	}{
		{"own PEM", ca.CertPEM(), ca.KeyPEM()},
		{"bundle with another CA first", Bundle(other.CertPEM(), ca.CertPEM()), ca.KeyPEM()},
		{"SEC 1 key", ca.CertPEM(), encodePEM("EC PRIVATE KEY", sec1)},
		{"RSA CA with a PKCS#1 key", rsaCert, rsaKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parsed, err := Parse(tc.cert, tc.key)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			certPEM, keyPEM := mustIssue(t, parsed, member(time.Hour))
			if _, err := Check(certPEM, keyPEM, tc.cert, t0); err != nil {
				t.Errorf("leaf of the parsed CA: %v", err)
			}
			again, err := Parse(parsed.CertPEM(), parsed.KeyPEM())
			if err != nil || !bytes.Equal(again.CertPEM(), parsed.CertPEM()) || !bytes.Equal(again.KeyPEM(), parsed.KeyPEM()) {
				t.Errorf("Parse of its own PEM: %v, or it changed", err)
			}
		})
	}
}

// Parse refuses what is not a CA, and a key that is not the CA's.
func TestParseRefuses(t *testing.T) {
	ca, other := mustCA(t, "etcd-ca", 24*time.Hour), mustCA(t, "other-ca", 24*time.Hour)
	leafCert, leafKey := mustIssue(t, ca, member(time.Hour))
	encrypted := encodePEM("ENCRYPTED PRIVATE KEY", []byte("secret"))
	for _, tc := range []struct {
		name      string
		cert, key []byte
		want      error
		wantText  string
	}{
		{"leaf certificate", leafCert, leafKey, nil, `"etcd-0" is not a CA certificate`},
		{"another CA's key", ca.CertPEM(), other.KeyPEM(), ErrKeyMismatch, `none of the certificates given ("CN=etcd-ca")`},
		{"no certificate", nil, ca.KeyPEM(), ErrNoCertificate, "CA certificate: no certificate"},
		{"no key", ca.CertPEM(), ca.CertPEM(), ErrNoKey, "CA key: no private key"},
		{"encrypted key", ca.CertPEM(), encrypted, nil, "ENCRYPTED PRIVATE KEY block is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parsed, err := Parse(tc.cert, tc.key)
			if parsed != nil {
				t.Errorf("Parse returned a CA (%s) along with error %v", describe(parsed.cert), err)
			}
			checkError(t, err, tc.want, []string{tc.wantText})
		})
	}
}

// A leaf never outlives its CA, and an expired CA issues nothing.
func TestLeafNeverOutlivesCA(t *testing.T) {
	ca := mustCA(t, "etcd-ca", time.Hour)
	for _, tc := range []struct {
		lifetime     time.Duration
		wantNotAfter time.Time
	}{
		{10 * time.Minute, t0.Add(10 * time.Minute)},
		{time.Hour, ca.NotAfter()},
		{24 * time.Hour, ca.NotAfter()},
	} {
		cert := mustParseCert(t, first(mustIssue(t, ca, member(tc.lifetime))))
		if !cert.NotAfter.Equal(tc.wantNotAfter) {
			t.Errorf("leaf for %v: NotAfter %v, want %v", tc.lifetime, cert.NotAfter, tc.wantNotAfter)
		}
	}
	for _, tc := range []struct {
		now  time.Time
		want string
	}{
		{ca.NotAfter(), "expired at 2026-03-01T13:00:00Z"},
		{ca.NotBefore().Add(-time.Second), "not valid until 2026-03-01T11:55:00Z"},
	} {
		if _, _, err := ca.Issue(member(time.Minute), tc.now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Issue at %v: %v, want an error with %q", tc.now, err, tc.want)
		}
	}
}

// Issue refuses a leaf that could not be used, saying why.
func TestIssueRefuses(t *testing.T) {
	ca := mustCA(t, "etcd-ca", time.Hour)
	ok := member(time.Hour)
	for _, tc := range []struct {
		name   string
		change func(*Leaf)
		want   string
	}{
		{"no lifetime", func(l *Leaf) { l.Lifetime = 0 }, "lifetime must be at least a second"},
		{"lifetime under a second", func(l *Leaf) { l.Lifetime = time.Second - 1 }, "lifetime must be at least a second"},
		{"neither server nor client", func(l *Leaf) { l.Server, l.Client = false, false }, "neither"},
		{"server without names", func(l *Leaf) { l.DNSNames, l.IPs, l.Client = nil, nil, false }, "needs at least one DNS name or IP"},
		{"client without names", func(l *Leaf) { l.CommonName, l.DNSNames, l.Server = "", nil, false }, "needs a common name"},
		{"empty DNS name", func(l *Leaf) { l.DNSNames = []string{""} }, `DNS name ""`},
		{"wildcard inside", func(l *Leaf) { l.DNSNames = []string{"etcd.*.svc"} }, "wildcard may only be the whole first label"},
		{"partial wildcard", func(l *Leaf) { l.DNSNames = []string{"etcd-*.ns.svc"} }, "wildcard may only be the whole first label"},
		{"bare wildcard", func(l *Leaf) { l.DNSNames = []string{"*"} }, "wildcard"},
		{"empty label", func(l *Leaf) { l.DNSNames = []string{"etcd..svc"} }, `label ""`},
		{"underscore", func(l *Leaf) { l.DNSNames = []string{"etcd_0"} }, `label "etcd_0"`},
		{"hyphen first", func(l *Leaf) { l.DNSNames = []string{"-etcd"} }, `label "-etcd"`},
		{"bad IP", func(l *Leaf) { l.IPs = []net.IP{{1, 2, 3}} }, "not a valid IPv4 or IPv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ok
			tc.change(&l)
			if _, _, err := ca.Issue(l, t0); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Issue: %v, want an error with %q", err, tc.want)
			}
		})
	}
	if _, _, err := ca.Issue(ok, t0); err != nil {
		t.Errorf("Issue of a good leaf: %v", err)
	}
}

// The CA and its leaves carry what the package promises.
func TestCertificateFields(t *testing.T) {
	ca := mustCA(t, "etcd-ca", 365*24*time.Hour)
	c := ca.cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero || c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("CA: IsCA %v, basic constraints %v, max path %d (zero %v), key usage %v", c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero, c.KeyUsage)
	}
	if !c.NotBefore.Equal(t0.Add(-5*time.Minute)) || !c.NotAfter.Equal(t0.Add(365*24*time.Hour)) || c.Subject.CommonName != "etcd-ca" {
		t.Errorf("CA %q valid %v to %v", c.Subject.CommonName, c.NotBefore, c.NotAfter)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() || len(c.SubjectKeyId) != 20 {
		t.Errorf("CA key %T, subject key id %x", c.PublicKey, c.SubjectKeyId)
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 || c.SerialNumber.Cmp(mustCA(t, "etcd-ca", time.Hour).cert.SerialNumber) == 0 {
		t.Errorf("CA serial %v, want a positive random 128-bit number", c.SerialNumber)
	}
	if short := mustCA(t, "short", 10*time.Second).cert; !short.NotBefore.Equal(t0.Add(-time.Second)) {
		t.Errorf("CA for 10s starts at %v, want a tenth of its lifetime before %v", short.NotBefore, t0)
	}
	leaf := mustParseCert(t, first(mustIssue(t, ca, member(time.Hour))))
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() || leaf.IsCA || leaf.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("leaf key %T, IsCA %v, key usage %v", leaf.PublicKey, leaf.IsCA, leaf.KeyUsage)
	}
	if !bytes.Equal(leaf.AuthorityKeyId, c.SubjectKeyId) || leaf.Subject.CommonName != "etcd-0" || !leaf.NotBefore.Equal(t0.Add(-5*time.Minute)) {
		t.Errorf("leaf %q: authority key id %x, want %x; starts %v", leaf.Subject.CommonName, leaf.AuthorityKeyId, c.SubjectKeyId, leaf.NotBefore)
	}
	if block, _ := pem.Decode(ca.KeyPEM()); block == nil || block.Type != "PRIVATE KEY" {
		t.Errorf("KeyPEM: %q, want a PKCS#8 PRIVATE KEY block", ca.KeyPEM())
	}
	for _, bad := range []struct {
		name     string
		lifetime time.Duration
		want     string
	}{{" ", time.Hour, "common name"}, {"etcd-ca", 0, "lifetime must be at least a second"}} {
		if _, err := New(bad.name, bad.lifetime, t0); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("New(%q, %v): %v, want an error with %q", bad.name, bad.lifetime, err, bad.want)
		}
	}
}
