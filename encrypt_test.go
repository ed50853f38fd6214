package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

var testKey = bytes.Repeat([]byte{7}, 32)

func seal(t *testing.T, plain []byte, key []byte) []byte {
	t.Helper()
	e, err := newEncryptReader(bytes.NewReader(plain), key)
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
	d, err := newDecryptReader(bytes.NewReader(sealed), key)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(d)
}

// Every size round-trips, at the length encryptedSize promises.
func TestEncryptRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, encChunk - 1, encChunk, encChunk + 1, 3*encChunk + 5} {
		plain := snapshotData(n)
		sealed := seal(t, plain, testKey)
		if int64(len(sealed)) != encryptedSize(int64(n)) {
			t.Errorf("%d bytes sealed to %d, encryptedSize says %d", n, len(sealed), encryptedSize(int64(n)))
		}
		got, err := open(sealed, testKey)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%d bytes: opened %d bytes, err %v", n, len(got), err)
		}
	}
}

// Any change to a sealed backup, or the wrong key, fails to open.
func TestEncryptRefusesChanges(t *testing.T) {
	plain := snapshotData(3*encChunk + 5)
	sealed := seal(t, plain, testKey)
	header := len(encMagic) + encSaltSize
	full := encChunk + encTagSize
	flip := func(i int) []byte {
		b := bytes.Clone(sealed)
		b[i] ^= 1
		return b
	}
	tests := map[string][]byte{
		"a flipped byte":               flip(header + full + 100),
		"a flipped salt":               flip(len(encMagic) + 3),
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

func TestParseEncryptionKey(t *testing.T) {
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
		k, err := parseEncryptionKey([]byte(tt.in))
		if (err == nil) != tt.ok || err == nil && len(k) != 32 {
			t.Errorf("parseEncryptionKey(%q) = %x, %v", tt.in, k, err)
		}
	}
}

// sealed: gzip then encryption, sizes known only without gzip, and the
// whole thing undone gives the snapshot back.
func TestSealedPipeline(t *testing.T) {
	plain := snapshotData(200000)
	for _, tt := range []struct {
		gz  bool
		key []byte
	}{{false, nil}, {true, nil}, {false, testKey}, {true, testKey}} {
		r, size, done, err := sealed(bytes.NewReader(plain), int64(len(plain)), tt.gz, tt.key)
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(r)
		done()
		if err != nil {
			t.Fatal(err)
		}
		if tt.gz != (size < 0) || size >= 0 && size != int64(len(out)) {
			t.Errorf("gzip %v, key %v: size %d for %d bytes", tt.gz, tt.key != nil, size, len(out))
		}
		back := io.Reader(bytes.NewReader(out))
		if tt.key != nil {
			if back, err = newDecryptReader(back, tt.key); err != nil {
				t.Fatal(err)
			}
		}
		if tt.gz {
			if back, err = gzip.NewReader(back); err != nil {
				t.Fatal(err)
			}
		}
		got, err := io.ReadAll(back)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("gzip %v, key %v: %d bytes back, err %v", tt.gz, tt.key != nil, len(got), err)
		}
	}
}
