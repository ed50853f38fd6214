package main

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"testing"
)

// gatewayStream is what etcd's JSON gateway sends for a snapshot of data:
// a message per chunk with the bytes still to come, then the sha256.
func gatewayStream(data []byte, chunk int) string {
	var b strings.Builder
	for sent := 0; sent < len(data); {
		n := min(chunk, len(data)-sent)
		sent += n
		fmt.Fprintf(&b, `{"result":{"remaining_bytes":"%d","blob":"%s","version":"3.6.0"}}`+"\n", len(data)-sent, base64.StdEncoding.EncodeToString(data[sent-n:sent]))
	}
	sum := sha256.Sum256(data)
	fmt.Fprintf(&b, `{"result":{"blob":"%s","version":"3.6.0"}}`+"\n", base64.StdEncoding.EncodeToString(sum[:]))
	return b.String()
}

func snapshotData(n int) []byte {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return data
}

func TestSnapshotReader(t *testing.T) {
	data := snapshotData(10000)
	good := gatewayStream(data, 1024)
	sum := sha256.Sum256(data)
	lines := strings.SplitAfter(good, "\n")
	tests := []struct {
		name   string
		stream string
		err    string // "" : the data and its sha256
	}{
		{"good", good, ""},
		{"chunks of the size of the data", gatewayStream(data, 10000), ""},
		{"numbers instead of strings", strings.ReplaceAll(strings.ReplaceAll(good, `"remaining_bytes":"`, `"remaining_bytes":`), `","blob"`, `,"blob"`), ""},
		{"empty messages between", strings.Join(lines[:3], `{"result":{"blob":""}}`+"\n") + strings.Join(lines[3:], ""), ""},
		{"sha256 mismatch", strings.Replace(good, base64.StdEncoding.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(make([]byte, 32)), 1), "sha256 mismatch"},
		{"data changed", gatewayStream(append([]byte{1}, data[1:]...), 1024)[:len(good)-len(lines[len(lines)-2])] + lines[len(lines)-2], "sha256 mismatch"},
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
			s, err := newSnapshotReader(io.NopCloser(strings.NewReader(tt.stream)))
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
		if _, err := newSnapshotReader(io.NopCloser(strings.NewReader(stream))); err == nil {
			t.Errorf("%q: no error", stream)
		}
	}
}
