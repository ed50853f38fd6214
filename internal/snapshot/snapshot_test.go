package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"strings"
	"testing"

	"github.com/etcd-operator/etcd-operator/internal/snapshot/snapshottest"
)

func TestSnapshotReader(t *testing.T) {
	data := snapshottest.Data(10000)
	good := snapshottest.Stream(data, 1024)
	sum := sha256.Sum256(data)
	lines := strings.SplitAfter(good, "\n")
	tests := []struct {
		name   string
		stream string
		err    string // "" : the data and its sha256
	}{
		{"good", good, ""},
		{"chunks of the size of the data", snapshottest.Stream(data, 10000), ""},
		{"numbers instead of strings", strings.ReplaceAll(strings.ReplaceAll(good, `"remaining_bytes":"`, `"remaining_bytes":`), `","blob"`, `,"blob"`), ""},
		{"empty messages between", strings.Join(lines[:3], `{"result":{"blob":""}}`+"\n") + strings.Join(lines[3:], ""), ""},
		{"sha256 mismatch", strings.Replace(good, base64.StdEncoding.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(make([]byte, 32)), 1), "sha256 mismatch"},
		{"data changed", snapshottest.Stream(append([]byte{1}, data[1:]...), 1024)[:len(good)-len(lines[len(lines)-2])] + lines[len(lines)-2], "sha256 mismatch"},
		{"error line", strings.Join(lines[:4], "") + `{"error":{"code":14,"message":"etcdserver: server stopped"}}` + "\n", "server stopped"},
		{"cut midway, in a message", good[:len(good)/2], "cut after"},
		{"cut at a message's end", strings.Join(lines[:5], ""), "cut after"},
		{"cut before the sha256", strings.Join(lines[:len(lines)-2], ""), "cut after 10000 of 10032"},
		{"more than announced", strings.Join(lines[:len(lines)-1], "") + lines[len(lines)-2], "more than"},
		{"not JSON", "<html>proxy error</html>", "cut after"},
		{"a message with no result", strings.Join(lines[:3], "") + `{"other":1}` + "\n" + strings.Join(lines[3:], ""), "neither result nor error"},
		{"a blob that is not base64", strings.Join(lines[:3], "") + `{"result":{"blob":"!!!!"}}` + "\n", "blob"},
		{"a blob with escapes", strings.Replace(good, "/", `\/`, -1), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []byte
			s, err := NewReader(io.NopCloser(strings.NewReader(tt.stream)))
			if err == nil {
				if s.Size() != int64(len(data))+32 {
					t.Errorf("Size %d, want %d", s.Size(), len(data)+32)
				}
				got, err = io.ReadAll(s)
			}
			want := string(data) + string(sum[:])
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.err == "" && string(got) != want:
				t.Fatalf("got %d bytes, want the %d of the data and its sha256", len(got), len(want))
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want one with %q", err, tt.err)
			case tt.err != "" && len(got) >= len(data)+32:
				t.Fatalf("a bad stream handed out all %d bytes", len(got))
			}
		})
	}
}

// The first message is read at once: an error there is the open's.
func TestSnapshotReaderFirstMessage(t *testing.T) {
	for _, stream := range []string{"", `{"error":{"code":7,"message":"permission denied"}}`, `{"other":1}`} {
		if _, err := NewReader(io.NopCloser(strings.NewReader(stream))); err == nil {
			t.Errorf("%q: no error", stream)
		}
	}
}

// A Check passes a whole snapshot, and nothing cut, changed or extended.
func TestCheck(t *testing.T) {
	data := snapshottest.Data(5000)
	sum := sha256.Sum256(data)
	whole := append(bytes.Clone(data), sum[:]...)
	changed := bytes.Clone(whole)
	changed[10] ^= 1
	for _, tt := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"whole", whole, true},
		{"cut", whole[:len(whole)-1], false},
		{"changed", changed, false},
		{"extended", append(bytes.Clone(whole), 0), false},
		{"shorter than a hash", sum[:10], false},
	} {
		c := NewCheck()
		for b := tt.b; len(b) > 0; b = b[min(len(b), 777):] { // in pieces, as io.Copy writes
			c.Write(b[:min(len(b), 777)])
		}
		if c.Whole() != tt.ok || c.Len() != int64(len(tt.b)) {
			t.Errorf("%s: Whole %v, Len %d; want %v, %d", tt.name, c.Whole(), c.Len(), tt.ok, len(tt.b))
		}
	}
}
