// Package snapshottest makes what etcd's JSON gateway streams for a
// snapshot, for tests of the code that reads it.
package snapshottest

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
)

// Stream is what etcd's JSON gateway sends for a snapshot of data: a
// message per chunk with the bytes still to come, then the sha256.
func Stream(data []byte, chunk int) string {
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

// Data is n bytes of a database: not all alike, the same for the same n.
func Data(n int) []byte {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return data
}
