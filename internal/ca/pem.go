package ca

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
)

// Bundle joins CA certificates, each given as PEM holding one or more, into
// one PEM bundle: every certificate once, in the order first seen. Blocks
// that are not certificates are left out.
func Bundle(certs ...[]byte) []byte {
	var out []byte
	seen := map[string]bool{}
	for _, data := range certs {
		for rest := data; ; {
			block, r := pem.Decode(rest)
			if block == nil {
				break
			}
			rest = r
			if block.Type != "CERTIFICATE" || seen[string(block.Bytes)] {
				continue
			}
			seen[string(block.Bytes)] = true
			out = append(out, encodePEM("CERTIFICATE", block.Bytes)...)
		}
	}
	return out
}

// Fingerprint names the set of certificates in PEM data, whatever their
// order and however often each appears: two bundles trust the same CAs
// exactly when their fingerprints are equal. It is the hex of a SHA-256
// over the sorted certificates' own SHA-256, shortened to 32 characters.
func Fingerprint(bundlePEM []byte) string {
	var sums []string
	for rest := bundlePEM; ; {
		block, r := pem.Decode(rest)
		if block == nil {
			break
		}
		rest = r
		if block.Type == "CERTIFICATE" {
			sum := sha256.Sum256(block.Bytes)
			sums = append(sums, string(sum[:]))
		}
	}
	slices.Sort(sums)
	sums = slices.Compact(sums)
	all := sha256.Sum256([]byte(strings.Join(sums, "")))
	return hex.EncodeToString(all[:16])
}

// Holds says whether the PEM bundle holds the CA's certificate.
func Holds(bundlePEM []byte, ca *CA) bool {
	certs, _ := parseCerts(bundlePEM)
	return slices.ContainsFunc(certs, func(c *x509.Certificate) bool { return c.Equal(ca.cert) })
}

func encodePEM(blockType string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
}

// parseCerts reads every CERTIFICATE block in data, in order, skipping
// other blocks.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := data; ; {
		block, r := pem.Decode(rest)
		if block == nil {
			return certs, nil
		}
		rest = r
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d in the PEM data cannot be read: %w", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
}

// parseKey reads the first private key block in data.
func parseKey(data []byte) (crypto.Signer, error) {
	for rest := data; ; {
		block, r := pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("%w (%s)", ErrNoKey, pemContents(data))
		}
		rest = r
		if strings.HasSuffix(block.Type, "PRIVATE KEY") {
			return decodeKey(block)
		}
	}
}

func decodeKey(block *pem.Block) (crypto.Signer, error) {
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a %s block is not supported: the key must be unencrypted PKCS#8 (PRIVATE KEY), SEC 1 (EC PRIVATE KEY) or PKCS#1 (RSA PRIVATE KEY)", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("the %s block cannot be read: %w", block.Type, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the %s block holds a %T key, which cannot sign", block.Type, key)
	}
	return signer, nil
}

// pemContents says what data holds instead, for an error message.
func pemContents(data []byte) string {
	var types []string
	for rest := data; ; {
		block, r := pem.Decode(rest)
		if block == nil {
			break
		}
		rest = r
		types = append(types, block.Type)
	}
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return "it is empty"
	case len(types) == 0:
		return "it holds no PEM block"
	}
	return "its PEM blocks are: " + strings.Join(types, ", ")
}

func keyMatches(key crypto.Signer, cert *x509.Certificate) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// describe names a certificate in messages: by common name, else by its
// first DNS name, else by serial number.
func describe(c *x509.Certificate) string {
	switch {
	case c.Subject.CommonName != "":
		return c.Subject.CommonName
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	}
	return "serial " + c.SerialNumber.Text(16)
}

// describeAll lists certificates in messages, by distinguished name.
func describeAll(certs []*x509.Certificate) string {
	names := make([]string, len(certs))
	for i, c := range certs {
		names[i] = fmt.Sprintf("%q", c.Subject.String())
	}
	return strings.Join(names, ", ")
}
