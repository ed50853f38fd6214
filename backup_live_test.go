package main

// Backups against real servers: a real S3-compatible server (versitygw)
// and a real cluster behind a real API server. The e2e module starts them
// and runs these tests with their addresses in the environment
// (e2e/backup_test.go); without those, they are skipped. They exercise the
// operator's own code (the S3 client, the snapshot stream, one step of the
// schedule, the schedule's goroutine) from inside its package, until the
// control loop calls it.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func liveEnv(t *testing.T, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		v := os.Getenv(n)
		if v == "" {
			t.Skipf("%s is not set: the e2e tests run this against real servers", n)
		}
		out = append(out, v)
	}
	return out
}

func liveS3(t *testing.T, bucket string) *s3Client {
	t.Helper()
	env := liveEnv(t, "LIVE_S3_URL", "LIVE_S3_ACCESS", "LIVE_S3_SECRET")
	smallParts(t)
	s, err := newS3Client(env[0], bucket, "us-east-1", env[1], env[2])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The S3 client against a real server: one PUT, multipart with known and
// unknown sizes, cut streams leaving nothing, and the refusals.
func TestLiveS3(t *testing.T) {
	bucket := liveEnv(t, "LIVE_S3_BUCKET")[0]
	s := liveS3(t, bucket)
	ctx := context.Background()
	prefix := "live-s3-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/"
	for _, tt := range []struct {
		name       string
		n, told    int64
		multiparts int
	}{{"one part", 1000, 1000, 0}, {"multipart, known size", 12 << 20, 12 << 20, 1}, {"multipart, unknown size", 11 << 20, -1, 1}} {
		data := snapshotData(int(tt.n))
		key := prefix + strings.ReplaceAll(tt.name, " ", "-")
		if err := s.put(ctx, key, bytes.NewReader(data), tt.told); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := liveGet(t, s, key); !bytes.Equal(got, data) {
			t.Errorf("%s: read back %d bytes, want %d", tt.name, len(got), len(data))
		}
	}
	cut := errors.New("stream cut")
	for _, tt := range []struct {
		name      string
		cut, told int64
	}{{"in the only part", 2 << 20, 3 << 20}, {"known size, in the second part", 7 << 20, 12 << 20}, {"unknown size, in the second part", 7 << 20, -1}} {
		key := prefix + "cut-" + strings.ReplaceAll(tt.name, " ", "-")
		if err := s.put(ctx, key, &errReader{data: make([]byte, tt.cut), err: cut}, tt.told); !errors.Is(err, cut) {
			t.Errorf("cut %s: %v", tt.name, err)
		}
		if _, err := s.head(ctx, key); err == nil {
			t.Errorf("cut %s: the object exists", tt.name)
		}
	}
	// versitygw v1.8.0 may store a part whose body was cut after the
	// upload was aborted (it answers that PUT 200), which makes the upload
	// open again: no object, and the next backup aborts it first, as here.
	if err := s.abortUploads(ctx, prefix); err != nil {
		t.Fatal(err)
	}
	liveNoUploads(t, s, prefix)
	objs, err := s.list(ctx, prefix)
	if err != nil || len(objs) != 3 {
		t.Fatalf("list: %v, %v; want the 3 objects put", objs, err)
	}
	for _, o := range objs {
		if err := s.delete(ctx, o.Key); err != nil {
			t.Fatal(err)
		}
	}
	wrong := liveS3(t, bucket)
	wrong.secret += "x"
	if _, err := wrong.list(ctx, prefix); !isS3Code(err, "SignatureDoesNotMatch") {
		t.Errorf("wrong secret: %v", err)
	}
	if _, err := liveS3(t, "no-such-bucket").list(ctx, ""); !isS3Code(err, "NoSuchBucket") {
		t.Errorf("missing bucket: %v", err)
	}
}

// smallParts makes parts of S3's smallest size, 5 MiB, so that a test
// cluster's database takes several.
func smallParts(t *testing.T) {
	part, buffered := s3PartSize, s3BufferedPart
	s3PartSize, s3BufferedPart = 5<<20, 5<<20
	t.Cleanup(func() { s3PartSize, s3BufferedPart = part, buffered })
}

func liveGet(t *testing.T, s *s3Client, key string) []byte {
	t.Helper()
	r, err := s.get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func liveNoUploads(t *testing.T, s *s3Client, prefix string) {
	t.Helper()
	var l struct{ Upload []struct{ Key string } }
	if err := s.call(context.Background(), s3Request{method: http.MethodGet, query: url.Values{"uploads": {""}, "prefix": {prefix}}}, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Upload) != 0 {
		t.Errorf("multipart uploads left open: %v", l.Upload)
	}
}
