// Package ca is a small certificate authority for etcd clusters: it makes
// an ECDSA P-256 CA with crypto/x509, issues leaf certificates from it for
// servers, peers and clients, and checks certificates that someone else
// made, all as PEM in and PEM out.
//
// The CA's certificate and key are meant to live in a Secret; Parse loads
// them again, also from a Secret in the shape cert-manager writes (tls.crt,
// tls.key, ca.crt), whose key may be PKCS#8, SEC 1 or PKCS#1.
//
// Leaves are renewed at two thirds of their lifetime (RenewAt). etcd reads
// its leaf certificate and key again at every TLS handshake, so a renewed
// leaf needs no restart; but it reads its CA file only at start, so a CA is
// rotated through a bundle (Bundle) that holds the old and the new CA at
// once: first every member trusts both, then leaves are issued by the new
// one, and only then is the old CA dropped from the bundle.
//
// A leaf never outlives the CA that signs it: Issue cuts its NotAfter down
// to the CA's. Certificates start a little before the time they are made
// (a tenth of their lifetime, at most five minutes), so that a member whose
// clock is slightly behind still accepts them.
package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// maxBackdate bounds how long before its making a certificate starts.
const maxBackdate = 5 * time.Minute

// CA is a certificate authority: its certificate and the key that signs.
type CA struct {
	cert   *x509.Certificate
	key    crypto.Signer
	keyDER []byte // key in PKCS#8
}

// New makes a self-signed CA named commonName that is valid for lifetime
// (at least a second) from now. Its key is ECDSA P-256, and it may sign leaves only (its path
// length is zero).
func New(commonName string, lifetime time.Duration, now time.Time) (*CA, error) {
	if strings.TrimSpace(commonName) == "" {
		return nil, errors.New("the CA needs a common name")
	}
	if lifetime < time.Second {
		return nil, fmt.Errorf("the CA lifetime must be at least a second (certificates count time in seconds), not %v", lifetime)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the CA key: %w", err)
	}
	tmpl, err := template(commonName, key.Public(), now, now.Add(lifetime))
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sign the CA certificate %q: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("read back the CA certificate %q: %w", commonName, err)
	}
	return newCA(cert, key)
}

// Parse loads a CA from its certificate and key in PEM. certPEM may hold
// more than one certificate (a chain or a bundle): the CA's is the one
// whose public key matches the key. Parse refuses a certificate that is not
// a CA's, and a key that matches no certificate.
func Parse(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := parseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("CA certificate: %w (%s)", ErrNoCertificate, pemContents(certPEM))
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	for _, cert := range certs {
		if !keyMatches(key, cert) {
			continue
		}
		if !cert.IsCA || !cert.BasicConstraintsValid {
			return nil, fmt.Errorf("certificate %q is not a CA certificate: its basic constraints do not allow it to sign certificates", describe(cert))
		}
		if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
			return nil, fmt.Errorf("CA certificate %q may not sign certificates: its key usage lacks certificate signing", describe(cert))
		}
		return newCA(cert, key)
	}
	return nil, fmt.Errorf("%w: the CA key belongs to none of the certificates given (%s)", ErrKeyMismatch, describeAll(certs))
}

func newCA(cert *x509.Certificate, key crypto.Signer) (*CA, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the key of CA %q: %w", describe(cert), err)
	}
	return &CA{cert: cert, key: key, keyDER: der}, nil
}

// CertPEM is the CA certificate in PEM, for a bundle of trusted CAs.
func (ca *CA) CertPEM() []byte { return encodePEM("CERTIFICATE", ca.cert.Raw) }

// KeyPEM is the CA key in PEM, as PKCS#8 ("PRIVATE KEY").
func (ca *CA) KeyPEM() []byte { return encodePEM("PRIVATE KEY", ca.keyDER) }

// NotBefore is when the CA certificate starts to be valid.
func (ca *CA) NotBefore() time.Time { return ca.cert.NotBefore }

// NotAfter is when the CA certificate expires, and so every leaf it issued.
func (ca *CA) NotAfter() time.Time { return ca.cert.NotAfter }

// template is what every certificate made here shares: subject, serial,
// key identifier and validity, starting a little before now.
func template(commonName string, pub crypto.PublicKey, now, notAfter time.Time) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)))
	if err != nil {
		return nil, fmt.Errorf("draw a serial number: %w", err)
	}
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode the public key: %w", err)
	}
	keyID := sha256.Sum256(spki)
	return &x509.Certificate{
		SerialNumber:          serial.Add(serial, big.NewInt(1)), // 1 to 2^128-1
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-min(maxBackdate, notAfter.Sub(now)/10)),
		NotAfter:              notAfter,
		SubjectKeyId:          keyID[:20],
		BasicConstraintsValid: true,
	}, nil
}

// RenewAt is when a certificate valid from notBefore to notAfter is due
// for renewal: at two thirds of its lifetime.
func RenewAt(notBefore, notAfter time.Time) time.Time {
	life := notAfter.Sub(notBefore)
	return notBefore.Add(life - life/3)
}
