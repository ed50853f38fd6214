package s3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/etcd-operator/etcd-operator/internal/s3"
	"github.com/etcd-operator/etcd-operator/internal/s3/s3test"
)

// What Put sends, by size: always a multipart upload, its parts streamed
// when the size is known and buffered when not; the object is whole.
func TestS3Put(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16,000 bytes
	tests := []struct {
		name       string
		size       int64 // as told to put
		partSize   int64
		bufferPart int64
		wantParts  int
	}{
		{"one part", 16000, 16000, 0, 1},
		{"known size, parts streamed", 16000, 5000, 0, 4},
		{"known size, exact parts", 16000, 4000, 0, 4},
		{"unknown size, parts buffered", -1, 16000, 5000, 4},
		{"unknown size, one part", -1, 16000, 20000, 1},
		{"unknown size, exact parts", -1, 16000, 8000, 2},
		{"empty", 0, 16000, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := s3test.New(t, "bkt")
			s := f.Client(t, "bkt")
			s.PartSize = tt.partSize
			if tt.bufferPart > 0 {
				s.BufferedPart = tt.bufferPart
			}
			want := data
			if tt.size == 0 {
				want = nil
			}
			if err := s.Put(context.Background(), "a/b.db", bytes.NewReader(want), tt.size); err != nil {
				t.Fatal(err)
			}
			got, ok := f.Object("bkt", "a/b.db")
			if !ok || !bytes.Equal(got, want) {
				t.Fatalf("object: %d bytes (exists %v), want %d", len(got), ok, len(want))
			}
			if n := f.Count("PUT /bkt/a/b.db?partNumber"); n != tt.wantParts {
				t.Errorf("%d parts, want %d", n, tt.wantParts)
			}
			if f.OpenUploads() != 0 {
				t.Errorf("%d uploads left open", f.OpenUploads())
			}
		})
	}
}

// A stream that breaks midway leaves no object, and no upload open.
func TestS3PutCutStream(t *testing.T) {
	cut := errors.New("stream cut")
	tests := []struct {
		name     string
		size     int64
		partSize int64
	}{
		{"in the only part", 10000, 20000},
		{"known size, in the second part", 10000, 4000},
		{"known size, in the last part", 10000, 3000},
		{"unknown size", -1, 20000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := s3test.New(t, "bkt")
			s := f.Client(t, "bkt")
			s.PartSize, s.BufferedPart = tt.partSize, 3000
			err := s.Put(context.Background(), "k.db", io.MultiReader(bytes.NewReader(make([]byte, 9000)), iotest.ErrReader(cut)), tt.size)
			if !errors.Is(err, cut) {
				t.Fatalf("put: %v, want the stream's error", err)
			}
			if keys := f.Keys(); len(keys) != 0 {
				t.Errorf("objects left: %v", keys)
			}
			if f.OpenUploads() != 0 {
				t.Errorf("%d uploads left open", f.OpenUploads())
			}
		})
	}
}

type creds struct{ access, secret, region string }

// Refusals come back with S3's code, and nothing is stored.
func TestS3Refusals(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *creds) // the client's, not the server's
		bucket string
		fault  func(r *http.Request) (int, string)
		code   string
	}{
		{"wrong secret", func(c *creds) { c.secret = "wrong" }, "bkt", nil, "SignatureDoesNotMatch"},
		{"unknown access key", func(c *creds) { c.access = "NOPE" }, "bkt", nil, "InvalidAccessKeyId"},
		{"other region", func(c *creds) { c.region = "eu-west-1" }, "bkt", nil, "SignatureDoesNotMatch"},
		{"missing bucket", nil, "nope", nil, "NoSuchBucket"},
		{"complete fails", nil, "bkt", func(r *http.Request) (int, string) {
			if r.Method == http.MethodPost && r.URL.Query().Has("uploadId") {
				return http.StatusBadRequest, "InvalidPart"
			}
			return 0, ""
		}, "InvalidPart"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := s3test.New(t, "bkt")
			f.Fail(tt.fault)
			c := creds{f.Access, f.Secret, f.Region}
			if tt.change != nil {
				tt.change(&c)
			}
			s, err := s3.New(f.URL, tt.bucket, c.region, c.access, c.secret)
			if err != nil {
				t.Fatal(err)
			}
			s.PartSize = 1000
			err = s.Put(context.Background(), "k.db", bytes.NewReader(make([]byte, 3000)), 3000)
			if !s3.IsCode(err, tt.code) {
				t.Fatalf("put: %v, want %s", err, tt.code)
			}
			if keys := f.Keys(); len(keys) != 0 {
				t.Errorf("objects left: %v", keys)
			}
			if tt.bucket == "bkt" && tt.change == nil && f.OpenUploads() != 0 {
				t.Errorf("%d uploads left open", f.OpenUploads())
			}
		})
	}
}

// A CompleteMultipartUpload that fails after its 200 OK is a failure.
func TestS3CompleteErrorIn200(t *testing.T) {
	f := s3test.New(t, "bkt")
	s := f.Client(t, "bkt")
	s.PartSize = 1000
	f.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || !r.URL.Query().Has("uploadId") {
			return false
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "<?xml version=\"1.0\"?>\n<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>")
		return true
	})
	err := s.Put(context.Background(), "k.db", bytes.NewReader(make([]byte, 3000)), 3000)
	if !s3.IsCode(err, "InternalError") {
		t.Fatalf("put: %v, want InternalError", err)
	}
	if f.OpenUploads() != 0 {
		t.Errorf("%d uploads left open", f.OpenUploads())
	}
}

// List reads every page; Delete and AbortUploads clear what they name.
func TestS3ListDeleteAbort(t *testing.T) {
	f := s3test.New(t, "bkt")
	s := f.Client(t, "bkt")
	ctx := context.Background()
	for _, k := range []string{"p/c/3.db", "p/c/1.db", "p/c/2.db", "p/other/1.db", "q/1.db"} {
		if err := s.Put(ctx, k, strings.NewReader(k), int64(len(k))); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := s.List(ctx, "p/c/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
		if o.Size != int64(len(o.Key)) {
			t.Errorf("%s: size %d", o.Key, o.Size)
		}
	}
	if strings.Join(keys, " ") != "p/c/1.db p/c/2.db p/c/3.db" {
		t.Errorf("list: %v", keys)
	}
	if f.Count("continuation-token") == 0 {
		t.Error("the listing was not paged")
	}
	if err := s.Delete(ctx, "p/c/1.db"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Object("bkt", "p/c/1.db"); ok {
		t.Error("p/c/1.db not deleted")
	}
	// Uploads an operator killed midway left: those under the prefix go.
	f.Begin("bkt", "p/c/4.db")
	f.Begin("bkt", "p/other/2.db")
	if err := s.AbortUploads(ctx, "p/c/"); err != nil {
		t.Fatal(err)
	}
	if f.OpenUploads() != 1 {
		t.Errorf("%d uploads open, want 1 (the other cluster's)", f.OpenUploads())
	}
	if open, err := s.Uploads(ctx, "p/"); err != nil || strings.Join(open, " ") != "p/other/2.db" {
		t.Errorf("Uploads = %v, %v; want the other cluster's", open, err)
	}
}

// Failures worth repeating are repeated; others are not.
func TestS3Retries(t *testing.T) {
	f := s3test.New(t, "bkt")
	s := f.Client(t, "bkt")
	fails := 2
	f.Fail(func(r *http.Request) (int, string) {
		if fails > 0 {
			fails--
			return http.StatusServiceUnavailable, "SlowDown"
		}
		return 0, ""
	})
	if _, err := s.List(context.Background(), ""); err != nil {
		t.Fatalf("list after two 503s: %v", err)
	}
	f.Fail(func(r *http.Request) (int, string) { return http.StatusForbidden, "AccessDenied" })
	before := f.Count("GET")
	if _, err := s.List(context.Background(), ""); !s3.IsCode(err, "AccessDenied") {
		t.Fatalf("list: %v", err)
	}
	if n := f.Count("GET") - before; n != 1 {
		t.Errorf("a 403 was sent %d times", n)
	}
}

// Every request whose body is small is signed with the sha256 of its body:
// CompleteMultipartUpload's list of parts, and the bodiless ones (the hash
// of no bytes). Only a part's stream goes as UNSIGNED-PAYLOAD. S3 takes
// UNSIGNED-PAYLOAD anywhere, and so does the fake: it is this test that
// tells a signed body from an unsigned one.
func TestS3SignsSmallBodies(t *testing.T) {
	f := s3test.New(t, "bkt")
	s := f.Client(t, "bkt")
	s.PartSize = 1000
	ctx := context.Background()
	if err := s.Put(ctx, "a/k.db", bytes.NewReader(make([]byte, 2500)), 2500); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, "a/"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(ctx, "a/k.db"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, "a/k.db"); err != nil {
		t.Fatal(err)
	} else {
		r.Close()
	}
	if err := s.AbortUploads(ctx, "a/"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/k.db"); err != nil {
		t.Fatal(err)
	}
	complete := f.Payloads("POST /bkt/a/k.db?uploadId=")
	if len(complete) != 1 {
		t.Fatalf("%d CompleteMultipartUpload requests, want 1", len(complete))
	}
	for _, p := range f.Payloads("") {
		if p.Body == "" {
			continue // a part's stream, as UNSIGNED-PAYLOAD
		}
		if p.Claimed != p.Body {
			t.Errorf("%s: x-amz-content-sha256 %s, want the sha256 of its body, %s", p.Request, p.Claimed, p.Body)
		}
	}
	if parts := f.Payloads("PUT /bkt/a/k.db?partNumber="); len(parts) != 3 {
		t.Errorf("%d parts, want 3", len(parts))
	}
}
