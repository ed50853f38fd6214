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
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/s3"
	"github.com/etcd-operator/etcd-operator/internal/snapshot/snapshottest"
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

func liveS3(t *testing.T, bucket string) *s3.Client {
	t.Helper()
	env := liveEnv(t, "LIVE_S3_URL", "LIVE_S3_ACCESS", "LIVE_S3_SECRET")
	smallParts(t)
	s, err := s3.New(env[0], bucket, "us-east-1", env[1], env[2])
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
		data := snapshottest.Data(int(tt.n))
		key := prefix + strings.ReplaceAll(tt.name, " ", "-")
		if err := s.Put(ctx, key, bytes.NewReader(data), tt.told); err != nil {
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
		if err := s.Put(ctx, key, io.MultiReader(bytes.NewReader(make([]byte, tt.cut)), iotest.ErrReader(cut)), tt.told); !errors.Is(err, cut) {
			t.Errorf("cut %s: %v", tt.name, err)
		}
		if _, err := s.Head(ctx, key); err == nil {
			t.Errorf("cut %s: the object exists", tt.name)
		}
	}
	// versitygw v1.8.0 may store a part whose body was cut after the
	// upload was aborted (it answers that PUT 200), which makes the upload
	// open again: no object, and the next backup aborts it first, as here.
	if err := s.AbortUploads(ctx, prefix); err != nil {
		t.Fatal(err)
	}
	liveNoUploads(t, s, prefix)
	objs, err := s.List(ctx, prefix)
	if err != nil || len(objs) != 3 {
		t.Fatalf("list: %v, %v; want the 3 objects put", objs, err)
	}
	for _, o := range objs {
		if err := s.Delete(ctx, o.Key); err != nil {
			t.Fatal(err)
		}
	}
	env := liveEnv(t, "LIVE_S3_URL", "LIVE_S3_ACCESS", "LIVE_S3_SECRET")
	wrong, err := s3.New(env[0], bucket, "us-east-1", env[1], env[2]+"x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.List(ctx, prefix); !s3.IsCode(err, "SignatureDoesNotMatch") {
		t.Errorf("wrong secret: %v", err)
	}
	if _, err := liveS3(t, "no-such-bucket").List(ctx, ""); !s3.IsCode(err, "NoSuchBucket") {
		t.Errorf("missing bucket: %v", err)
	}
}

// smallParts makes parts of S3's smallest size, 5 MiB, so that a test
// cluster's database takes several.
func smallParts(t *testing.T) {
	part, buffered := s3.DefaultPartSize, s3.DefaultBufferedPart
	s3.DefaultPartSize, s3.DefaultBufferedPart = 5<<20, 5<<20
	t.Cleanup(func() { s3.DefaultPartSize, s3.DefaultBufferedPart = part, buffered })
}

func liveGet(t *testing.T, s *s3.Client, key string) []byte {
	t.Helper()
	r, err := s.Get(context.Background(), key)
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

func liveNoUploads(t *testing.T, s *s3.Client, prefix string) {
	t.Helper()
	open, err := s.Uploads(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 0 {
		t.Errorf("multipart uploads left open: %v", open)
	}
}
