package encryption

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

var testKey = bytes.Repeat([]byte{7}, 32)

func seal(t *testing.T, plain []byte, key []byte) []byte {
	t.Helper()
	e, err := Encrypt(bytes.NewReader(plain), key)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := io.ReadAll(e)
	if err != nil {
		t.Fatal(err)
	}
	return sealed
}

func open(sealed, key []byte) ([]byte, error) {
	d, err := Decrypt(bytes.NewReader(sealed), key)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(d)
}

// Every size round-trips, at the length SealedSize promises.
func TestEncryptRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, chunkSize - 1, chunkSize, chunkSize + 1, 3*chunkSize + 5} {
		plain := plainData(n)
		sealed := seal(t, plain, testKey)
		if int64(len(sealed)) != SealedSize(int64(n)) {
			t.Errorf("%d bytes sealed to %d, SealedSize says %d", n, len(sealed), SealedSize(int64(n)))
		}
		got, err := open(sealed, testKey)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%d bytes: opened %d bytes, err %v", n, len(got), err)
		}
	}
}

// Any change to a sealed backup, or the wrong key, fails to open.
func TestEncryptRefusesChanges(t *testing.T) {
	plain := plainData(3*chunkSize + 5)
	sealed := seal(t, plain, testKey)
	header := len(magic) + saltSize
	full := chunkSize + tagSize
	flip := func(i int) []byte {
		b := bytes.Clone(sealed)
		b[i] ^= 1
		return b
	}
	tests := map[string][]byte{
		"a flipped byte":               flip(header + full + 100),
		"a flipped salt":               flip(len(magic) + 3),
		"the last chunk dropped":       sealed[:header+3*full],
		"cut inside a chunk":           sealed[:header+2*full+10],
		"two chunks swapped":           append(append(append(bytes.Clone(sealed[:header]), sealed[header+full:header+2*full]...), sealed[header:header+full]...), sealed[header+2*full:]...),
		"a chunk appended":             append(bytes.Clone(sealed), sealed[header:header+full]...),
		"no header":                    sealed[:10],
		"another backup's last chunk":  append(bytes.Clone(sealed[:header+3*full]), seal(t, plain[:5], testKey)[header:]...),
		"the wrong key":                nil,
		"a plain snapshot, not sealed": plain,
	}
	for name, b := range tests {
		key := testKey
		if b == nil {
			b, key = sealed, bytes.Repeat([]byte{8}, 32)
		}
		if got, err := open(b, key); err == nil {
			t.Errorf("%s: opened %d bytes without error", name, len(got))
		}
	}
}

func TestParseKey(t *testing.T) {
	hexKey := strings.Repeat("ab", 32)
	tests := []struct {
		in string
		ok bool
	}{
		{string(testKey), true},
		{hexKey, true},
		{hexKey + "\n", true},
		{"short", false},
		{strings.Repeat("zz", 32), false},
	}
	for _, tt := range tests {
		k, err := ParseKey([]byte(tt.in))
		if (err == nil) != tt.ok || err == nil && len(k) != 32 {
			t.Errorf("ParseKey(%q) = %x, %v", tt.in, k, err)
		}
	}
}

// plainData is n bytes that are not all alike, the same for the same n.
func plainData(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{1}).Read(b)
	return b
}
