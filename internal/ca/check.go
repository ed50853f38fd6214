package ca

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// The errors Check and Parse return wrap these, with details after them,
// so that a caller can tell the cases apart with errors.Is.
var (
	ErrNoCertificate    = errors.New("no certificate found in the PEM data")
	ErrNoKey            = errors.New("no private key found in the PEM data")
	ErrKeyMismatch      = errors.New("the private key does not match the certificate")
	ErrUnknownAuthority = errors.New("the certificate is not signed by any CA in the bundle")
	ErrExpired          = errors.New("the certificate has expired")
	ErrNotYetValid      = errors.New("the certificate is not valid yet")
)

// Info describes a leaf certificate.
type Info struct {
	NotBefore, NotAfter time.Time
	DNSNames            []string
	IPs                 []net.IP
	// Server and Client say whether the certificate may be used for the
	// server or the client side of TLS (its extended key usage allows
	// serverAuth or clientAuth, or has no restriction at all).
	Server, Client bool
	// Issuer is the distinguished name of the CA that signed it.
	Issuer string
}

// Check checks a leaf certificate and its key, as a Secret holds them:
// certPEM starts with the leaf and may go on with intermediate CAs, keyPEM
// holds its key, and caBundlePEM the CAs to trust, one or more. Check
// returns an error, wrapping one of the Err values, if the certificate or
// the key is missing, if the key does not match, if the certificate is
// outside its validity at now, or if no CA in the bundle signed it. The Info
// is filled in whenever the certificate could be read, even with an error.
func Check(certPEM, keyPEM, caBundlePEM []byte, now time.Time) (Info, error) {
	chain, err := parseCerts(certPEM)
	if err != nil {
		return Info{}, err
	}
	if len(chain) == 0 {
		return Info{}, fmt.Errorf("%w (%s)", ErrNoCertificate, pemContents(certPEM))
	}
	leaf := chain[0]
	info := infoOf(leaf)
	key, err := parseKey(keyPEM)
	if err != nil {
		return info, err
	}
	if !keyMatches(key, leaf) {
		return info, fmt.Errorf("%w %q", ErrKeyMismatch, describe(leaf))
	}
	switch {
	case now.Before(leaf.NotBefore):
		return info, fmt.Errorf("%w: %q is valid from %s, and it is now %s", ErrNotYetValid, describe(leaf), stamp(leaf.NotBefore), stamp(now))
	case now.After(leaf.NotAfter):
		return info, fmt.Errorf("%w: %q was valid until %s, and it is now %s", ErrExpired, describe(leaf), stamp(leaf.NotAfter), stamp(now))
	}
	return info, verifyChain(chain, caBundlePEM, now)
}

// verifyChain checks that a CA in the bundle signed chain[0], possibly
// through the intermediates in chain[1:].
func verifyChain(chain []*x509.Certificate, caBundlePEM []byte, now time.Time) error {
	cas, err := parseCerts(caBundlePEM)
	if err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	if len(cas) == 0 {
		return fmt.Errorf("%w: the CA bundle holds no certificate (%s)", ErrUnknownAuthority, pemContents(caBundlePEM))
	}
	roots, intermediates := x509.NewCertPool(), x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	_, err = chain[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: intermediates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	var unknown x509.UnknownAuthorityError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &unknown):
		return fmt.Errorf("%w: %q was issued by %q, and the bundle holds %s",
			ErrUnknownAuthority, describe(chain[0]), chain[0].Issuer.String(), describeAll(cas))
	}
	return fmt.Errorf("certificate %q does not verify against the CA bundle: %w", describe(chain[0]), err)
}

func infoOf(c *x509.Certificate) Info {
	return Info{
		NotBefore: c.NotBefore,
		NotAfter:  c.NotAfter,
		DNSNames:  c.DNSNames,
		IPs:       c.IPAddresses,
		Server:    allows(c, x509.ExtKeyUsageServerAuth),
		Client:    allows(c, x509.ExtKeyUsageClientAuth),
		Issuer:    c.Issuer.String(),
	}
}

// allows says whether crypto/x509 would accept c for usage: a certificate
// without extended key usage is accepted for any.
func allows(c *x509.Certificate, usage x509.ExtKeyUsage) bool {
	if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
		return true
	}
	return slices.Contains(c.ExtKeyUsage, usage) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny)
}

// Covers says whether the certificate is valid for name, a host name or an
// IP address. A wildcard SAN such as *.cluster.ns.svc covers exactly one
// label in its place: a.cluster.ns.svc, but neither cluster.ns.svc nor
// a.b.cluster.ns.svc. Host names compare without regard to case.
func (i Info) Covers(name string) bool {
	if ip := net.ParseIP(name); ip != nil {
		return slices.ContainsFunc(i.IPs, ip.Equal)
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	first, rest, _ := strings.Cut(name, ".")
	for _, san := range i.DNSNames {
		san = strings.ToLower(san)
		if san == name {
			return true
		}
		if suffix, ok := strings.CutPrefix(san, "*."); ok && first != "" && rest == suffix {
			return true
		}
	}
	return false
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
