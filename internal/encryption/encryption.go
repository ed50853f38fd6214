// Package encryption seals a stream for storage at rest: AES-256-GCM in
// chunks, so that it streams.
//
// GCM seals a message whole: it cannot hand out ciphertext before it has
// seen the end of its input, and a 512 MiB snapshot must not sit in
// memory. So the stream is cut into 64 KiB chunks, each sealed on its own
// with a nonce made of its number and a flag on the last one (the STREAM
// construction): chunks cannot be reordered, dropped or cut off at the end
// without Open failing. Each object gets a random salt, and its key is
// derived from the Secret's key and that salt with HKDF, so that no two
// objects share a key and nonces never repeat. The sealed size follows
// from the plain size, so an encrypted snapshot is still uploaded with a
// known length.
//
// Layout: "etcdop-enc1\n" (12 bytes), a 32-byte salt, then the chunks:
// every full chunk sealed (64 KiB + 16), and a last, shorter (possibly
// empty) chunk sealed with the last flag.
package encryption

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

const (
	magic     = "etcdop-enc1\n"
	saltSize  = 32
	chunkSize = 64 << 10
	tagSize   = 16
	hkdfInfo  = "etcd-operator backup v1"
)

// ParseKey reads a key as a Secret holds it: 32 bytes, as they are or as 64
// hexadecimal digits.
func ParseKey(b []byte) ([]byte, error) {
	if len(b) == 32 {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	if k, err := hex.DecodeString(s); err == nil && len(k) == 32 {
		return k, nil
	}
	return nil, fmt.Errorf("the encryption key must be 32 bytes, or 64 hexadecimal digits, not %d bytes", len(b))
}

// SealedSize is the sealed length of n plain bytes: a sealed stream is
// still uploaded with a known length.
func SealedSize(n int64) int64 {
	return int64(len(magic)) + saltSize + n/chunkSize*(chunkSize+tagSize) + n%chunkSize + tagSize
}

func chunkAEAD(key, salt []byte) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, key, salt, hkdfInfo, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func chunkNonce(n uint64, last bool) []byte {
	nonce := make([]byte, 12)
	binary.BigEndian.PutUint64(nonce[3:11], n)
	if last {
		nonce[11] = 1
	}
	return nonce
}

// encryptReader seals src chunk by chunk as it is read.
type encryptReader struct {
	src  io.Reader
	aead cipher.AEAD
	buf  []byte // one chunk, sealed in place
	out  []byte // sealed bytes not yet handed out
	n    uint64
	done bool
}

// Encrypt returns a reader of src sealed with key (32 bytes) as it is read.
func Encrypt(src io.Reader, key []byte) (io.Reader, error) {
	salt := make([]byte, saltSize)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	aead, err := chunkAEAD(key, salt)
	if err != nil {
		return nil, err
	}
	return &encryptReader{src: src, aead: aead, buf: make([]byte, chunkSize+tagSize), out: append([]byte(magic), salt...)}, nil
}

func (e *encryptReader) Read(p []byte) (int, error) {
	for len(e.out) == 0 {
		if e.done {
			return 0, io.EOF
		}
		n, err := io.ReadFull(e.src, e.buf[:chunkSize])
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			e.done = true
		case err != nil:
			return 0, err
		}
		e.out = e.aead.Seal(e.buf[:0], chunkNonce(e.n, e.done), e.buf[:n], nil)
		e.n++
	}
	n := copy(p, e.out)
	e.out = e.out[n:]
	return n, nil
}

// decryptReader opens what encryptReader sealed; any change, reordering
// or truncation is an error.
type decryptReader struct {
	src  io.Reader
	aead cipher.AEAD
	buf  []byte
	out  []byte
	n    uint64
	done bool
}

// Decrypt returns a reader of what Encrypt sealed with key; any change,
// reordering or truncation is an error.
func Decrypt(src io.Reader, key []byte) (io.Reader, error) {
	head := make([]byte, len(magic)+saltSize)
	if _, err := io.ReadFull(src, head); err != nil || string(head[:len(magic)]) != magic {
		return nil, errors.New("not an encrypted backup (no header)")
	}
	aead, err := chunkAEAD(key, head[len(magic):])
	if err != nil {
		return nil, err
	}
	return &decryptReader{src: src, aead: aead, buf: make([]byte, chunkSize+tagSize)}, nil
}

func (d *decryptReader) Read(p []byte) (int, error) {
	for len(d.out) == 0 {
		if d.done {
			return 0, io.EOF
		}
		if err := d.open(); err != nil {
			return 0, err
		}
	}
	n := copy(p, d.out)
	d.out = d.out[n:]
	return n, nil
}

// open reads and opens one chunk: a full one is followed by more, and
// the stream ends with a shorter one, sealed as the last.
func (d *decryptReader) open() error {
	n, err := io.ReadFull(d.src, d.buf[:chunkSize+tagSize])
	switch {
	case err == io.EOF:
		return errors.New("encrypted backup cut short: no last chunk")
	case err == io.ErrUnexpectedEOF:
		d.done = true
	case err != nil:
		return err
	}
	out, err := d.aead.Open(d.buf[:0], chunkNonce(d.n, d.done), d.buf[:n], nil)
	if err != nil {
		return fmt.Errorf("encrypted backup: chunk %d does not open (wrong key, or the object was changed): %w", d.n, err)
	}
	d.out = out
	d.n++
	return nil
}
