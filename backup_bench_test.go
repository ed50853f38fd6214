package main

// The backup pipeline's cost, without etcd or S3 in the way: a gateway
// stream made on the fly, through snapshotReader, gzip and encryption as
// asked, into an S3 that counts and discards. It reports the throughput
// and the peak heap growth while streaming (the target is under
// 16 MiB of RSS for a 512 MiB database):
//
//	go test -run XXX -bench BackupPipeline -benchtime 1x .

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/s3"
	"github.com/etcd-operator/etcd-operator/internal/snapshot"
)

// streamGen writes the gateway's stream for size bytes as it is read.
type streamGen struct {
	size, sent int64
	chunk      []byte
	hash       hash.Hash
	line       []byte
	done       bool
}

func newStreamGen(size int64) *streamGen {
	chunk := make([]byte, 32<<10)
	for i := range chunk {
		chunk[i] = byte(i % 251) // compresses, like a database's pages do somewhat
	}
	return &streamGen{size: size, chunk: chunk, hash: sha256.New()}
}

func (g *streamGen) Read(p []byte) (int, error) {
	for len(g.line) == 0 {
		if g.done {
			return 0, io.EOF
		}
		g.nextLine()
	}
	n := copy(p, g.line)
	g.line = g.line[n:]
	return n, nil
}

func (g *streamGen) nextLine() {
	if g.sent == g.size {
		g.line = fmt.Appendf(g.line[:0], `{"result":{"blob":"%s"}}`+"\n", base64.StdEncoding.EncodeToString(g.hash.Sum(nil)))
		g.done = true
		return
	}
	b := g.chunk[:min(int64(len(g.chunk)), g.size-g.sent)]
	g.hash.Write(b)
	g.sent += int64(len(b))
	g.line = fmt.Appendf(g.line[:0], `{"result":{"remaining_bytes":"%d","blob":"%s"}}`+"\n", g.size-g.sent, base64.StdEncoding.EncodeToString(b))
}

// discardS3 answers a multipart upload and keeps only the byte count.
func discardS3(b *testing.B) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodPost && q.Has("uploads"):
			io.WriteString(w, "<InitiateMultipartUploadResult><UploadId>u</UploadId></InitiateMultipartUploadResult>")
		case r.Method == http.MethodPut:
			c, _ := io.Copy(io.Discard, r.Body)
			n.Add(c)
			w.Header().Set("ETag", `"e"`)
		case r.Method == http.MethodHead:
			w.Header().Set("Content-Length", strconv.FormatInt(n.Load(), 10))
		}
	}))
	b.Cleanup(srv.Close)
	return srv, &n
}

func BenchmarkBackupPipeline(b *testing.B) {
	const size = 512 << 20
	for _, tt := range []struct {
		name string
		gz   bool
		key  []byte
	}{{"plain", false, nil}, {"gzip", true, nil}, {"encrypted", false, testKey}, {"gzip+encrypted", true, testKey}} {
		b.Run(tt.name, func(b *testing.B) {
			srv, _ := discardS3(b)
			s, err := s3.New(srv.URL, "bkt", "us-east-1", "a", "s")
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(size)
			for b.Loop() {
				peak := heapPeak(func() {
					snap, err := snapshot.NewReader(io.NopCloser(newStreamGen(size)))
					if err != nil {
						b.Fatal(err)
					}
					body, n, done, err := sealed(snap, snap.Size(), tt.gz, tt.key)
					if err != nil {
						b.Fatal(err)
					}
					defer done()
					if err := s.Put(context.Background(), "k", body, n); err != nil {
						b.Fatal(err)
					}
				})
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			}
		})
	}
}

// heapPeak runs f and returns the most heap in use above the start.
func heapPeak(f func()) uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base, peak := m.HeapInuse, m.HeapInuse
	stop := make(chan struct{})
	sampled := make(chan uint64)
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				sampled <- peak
				return
			case <-t.C:
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
	}()
	f()
	close(stop)
	return <-sampled - base
}
