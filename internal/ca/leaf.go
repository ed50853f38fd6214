package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Leaf asks for a certificate to be issued. A member's certificate is
// usually both: Server for its clients and peers, and Client because it
// dials its peers, and because under mutual TLS the etcd gateway dials etcd
// with the server certificate.
type Leaf struct {
	// CommonName is the subject's name. etcd takes a client certificate's
	// common name as the user name.
	CommonName string
	// DNSNames and IPs are the names peers and clients use to reach a
	// server, such as name, name.ns, name.ns.svc and
	// *.cluster.ns.svc.cluster.local. A wildcard may only be the whole
	// first label.
	DNSNames []string
	IPs      []net.IP
	// Server and Client ask for the serverAuth and clientAuth extended key
	// usages; at least one is needed.
	Server, Client bool
	// Lifetime is how long the leaf is valid, at least a second, cut down
	// to what is left of the CA's own lifetime.
	Lifetime time.Duration
}

// Issue makes a new ECDSA P-256 key and a certificate for it signed by the
// CA, valid from now for l.Lifetime but never past the CA's NotAfter. It
// refuses to issue from a CA that has expired or is not yet valid.
func (ca *CA) Issue(l Leaf, now time.Time) (certPEM, keyPEM []byte, err error) {
	if err := l.validate(); err != nil {
		return nil, nil, fmt.Errorf("certificate %q: %w", l.name(), err)
	}
	if err := ca.validAt(now); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate the key of certificate %q: %w", l.name(), err)
	}
	notAfter := now.Add(l.Lifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl, err := template(l.CommonName, key.Public(), now, notAfter)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate %q: %w", l.name(), err)
	}
	tmpl.DNSNames, tmpl.IPAddresses = l.DNSNames, l.IPs
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = l.extKeyUsage()
	tmpl.AuthorityKeyId = ca.cert.SubjectKeyId
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate %q with CA %q: %w", l.name(), describe(ca.cert), err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the key of certificate %q: %w", l.name(), err)
	}
	return encodePEM("CERTIFICATE", der), encodePEM("PRIVATE KEY", keyDER), nil
}

func (ca *CA) validAt(now time.Time) error {
	switch {
	case now.Before(ca.cert.NotBefore):
		return fmt.Errorf("CA %q is not valid until %s (it is now %s), so it cannot issue certificates yet",
			describe(ca.cert), stamp(ca.cert.NotBefore), stamp(now))
	case !now.Before(ca.cert.NotAfter):
		return fmt.Errorf("CA %q expired at %s (it is now %s), so it cannot issue certificates: rotate the CA",
			describe(ca.cert), stamp(ca.cert.NotAfter), stamp(now))
	}
	return nil
}

func (l Leaf) extKeyUsage() []x509.ExtKeyUsage {
	var usage []x509.ExtKeyUsage
	if l.Server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client {
		usage = append(usage, x509.ExtKeyUsageClientAuth)
	}
	return usage
}

// name is how messages call the leaf.
func (l Leaf) name() string {
	if l.CommonName == "" && len(l.DNSNames) > 0 {
		return l.DNSNames[0]
	}
	return l.CommonName
}

func (l Leaf) validate() error {
	switch {
	case l.Lifetime < time.Second:
		return fmt.Errorf("the lifetime must be at least a second (certificates count time in seconds), not %v", l.Lifetime)
	case !l.Server && !l.Client:
		return errors.New("a certificate must be for a server, a client or both, and this one is for neither")
	case l.Server && len(l.DNSNames) == 0 && len(l.IPs) == 0:
		return errors.New("a server certificate needs at least one DNS name or IP address")
	case l.Client && l.CommonName == "" && len(l.DNSNames) == 0:
		return errors.New("a client certificate needs a common name or a DNS name")
	}
	for _, name := range l.DNSNames {
		if err := checkDNSName(name); err != nil {
			return err
		}
	}
	for _, ip := range l.IPs {
		if len(ip) != net.IPv4len && len(ip) != net.IPv6len {
			return fmt.Errorf("IP address %v is not a valid IPv4 or IPv6 address", []byte(ip))
		}
	}
	return nil
}

// checkDNSName accepts a host name of letters, digits and hyphens, whose
// first label may be a wildcard.
func checkDNSName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("DNS name %q must be 1 to 253 characters long", name)
	}
	labels := strings.Split(name, ".")
	for i, label := range labels {
		switch {
		case label == "*" && i == 0 && len(labels) > 1:
		case strings.Contains(label, "*"):
			return fmt.Errorf("DNS name %q is not valid: a wildcard may only be the whole first label, as in *.example.svc", name)
		case !validLabel(label):
			return fmt.Errorf("DNS name %q is not valid: label %q must be 1 to 63 letters, digits or hyphens, not starting or ending with a hyphen", name, label)
		}
	}
	return nil
}

func validLabel(label string) bool {
	if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
		return false
	}
	for _, c := range label {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
