package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// AWS's published examples of SigV4 for S3 (the "Signature Calculations
// for the Authorization Header" page of the S3 API reference): the same
// credentials, date and requests give the same signatures.
func TestSignV4Vectors(t *testing.T) {
	const (
		access = "AKIAIOSFODNN7EXAMPLE"
		secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	)
	date := time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name, method, url string
		header            map[string]string
		payload           string
		signed, signature string
	}{
		{"GET object", "GET", "https://examplebucket.s3.amazonaws.com/test.txt",
			map[string]string{"Range": "bytes=0-9"}, emptyHash,
			"host;range;x-amz-content-sha256;x-amz-date", "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"},
		{"PUT object", "PUT", "https://examplebucket.s3.amazonaws.com/test$file.text",
			map[string]string{"Date": "Fri, 24 May 2013 00:00:00 GMT", "X-Amz-Storage-Class": "REDUCED_REDUNDANCY"},
			sha256Hex([]byte("Welcome to Amazon S3.")),
			"date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class", "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"},
		{"GET bucket lifecycle", "GET", "https://examplebucket.s3.amazonaws.com/?lifecycle", nil, emptyHash,
			"host;x-amz-content-sha256;x-amz-date", "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"},
		{"list objects", "GET", "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J", nil, emptyHash,
			"host;x-amz-content-sha256;x-amz-date", "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, tt.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			signV4(req, access, secret, "us-east-1", tt.payload, date)
			want := "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=" + tt.signed + ",Signature=" + tt.signature
			if got := req.Header.Get("Authorization"); got != want {
				t.Errorf("Authorization:\n got %s\nwant %s", got, want)
			}
		})
	}
}

func TestAWSEscape(t *testing.T) {
	tests := []struct {
		in   string
		path bool
		want string
	}{
		{"", true, "/"},
		{"/test$file.text", true, "/test%24file.text"},
		{"a b+c/d~e", true, "a%20b%2Bc/d~e"},
		{"a/b", false, "a%2Fb"},
		{"ü", false, "%C3%BC"},
	}
	for _, tt := range tests {
		if got := awsEscape(tt.in, tt.path); got != tt.want {
			t.Errorf("awsEscape(%q, %v) = %q, want %q", tt.in, tt.path, got, tt.want)
		}
	}
}

// What put sends, by size: always a multipart upload, its parts streamed
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
			f := newFakeS3(t, "bkt")
			s := f.client(t, "bkt")
			s.partSize = tt.partSize
			if tt.bufferPart > 0 {
				s.bufferedPart = tt.bufferPart
			}
			want := data
			if tt.size == 0 {
				want = nil
			}
			if err := s.put(context.Background(), "a/b.db", bytes.NewReader(want), tt.size); err != nil {
				t.Fatal(err)
			}
			got, ok := f.object("bkt", "a/b.db")
			if !ok || !bytes.Equal(got, want) {
				t.Fatalf("object: %d bytes (exists %v), want %d", len(got), ok, len(want))
			}
			if n := f.count("PUT /bkt/a/b.db?partNumber"); n != tt.wantParts {
				t.Errorf("%d parts, want %d", n, tt.wantParts)
			}
			if f.openUploads() != 0 {
				t.Errorf("%d uploads left open", f.openUploads())
			}
		})
	}
}

// errReader hands out data, then fails: a snapshot stream that breaks.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
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
			f := newFakeS3(t, "bkt")
			s := f.client(t, "bkt")
			s.partSize, s.bufferedPart = tt.partSize, 3000
			err := s.put(context.Background(), "k.db", &errReader{data: make([]byte, 9000), err: cut}, tt.size)
			if !errors.Is(err, cut) {
				t.Fatalf("put: %v, want the stream's error", err)
			}
			if keys := f.keys(); len(keys) != 0 {
				t.Errorf("objects left: %v", keys)
			}
			if f.openUploads() != 0 {
				t.Errorf("%d uploads left open", f.openUploads())
			}
		})
	}
}

// Refusals come back with S3's code, and nothing is stored.
func TestS3Refusals(t *testing.T) {
	tests := []struct {
		name   string
		change func(s *s3Client)
		bucket string
		fault  func(r *http.Request) (int, string)
		code   string
	}{
		{"wrong secret", func(s *s3Client) { s.secret = "wrong" }, "bkt", nil, "SignatureDoesNotMatch"},
		{"unknown access key", func(s *s3Client) { s.access = "NOPE" }, "bkt", nil, "InvalidAccessKeyId"},
		{"other region", func(s *s3Client) { s.region = "eu-west-1" }, "bkt", nil, "SignatureDoesNotMatch"},
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
			f := newFakeS3(t, "bkt")
			f.fault = tt.fault
			s := f.client(t, tt.bucket)
			s.partSize = 1000
			if tt.change != nil {
				tt.change(s)
			}
			err := s.put(context.Background(), "k.db", bytes.NewReader(make([]byte, 3000)), 3000)
			if !isS3Code(err, tt.code) {
				t.Fatalf("put: %v, want %s", err, tt.code)
			}
			if keys := f.keys(); len(keys) != 0 {
				t.Errorf("objects left: %v", keys)
			}
			if tt.bucket == "bkt" && tt.change == nil && f.openUploads() != 0 {
				t.Errorf("%d uploads left open", f.openUploads())
			}
		})
	}
}

// A CompleteMultipartUpload that fails after its 200 OK is a failure.
func TestS3CompleteErrorIn200(t *testing.T) {
	f := newFakeS3(t, "bkt")
	s := f.client(t, "bkt")
	s.partSize = 1000
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Query().Has("uploadId") {
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "<?xml version=\"1.0\"?>\n<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>")
			return
		}
		f.serve(w, r)
	})
	err := s.put(context.Background(), "k.db", bytes.NewReader(make([]byte, 3000)), 3000)
	if !isS3Code(err, "InternalError") {
		t.Fatalf("put: %v, want InternalError", err)
	}
	if f.openUploads() != 0 {
		t.Errorf("%d uploads left open", f.openUploads())
	}
}

// list reads every page; delete and abortUploads clear what they name.
func TestS3ListDeleteAbort(t *testing.T) {
	f := newFakeS3(t, "bkt")
	s := f.client(t, "bkt")
	ctx := context.Background()
	for _, k := range []string{"p/c/3.db", "p/c/1.db", "p/c/2.db", "p/other/1.db", "q/1.db"} {
		if err := s.put(ctx, k, strings.NewReader(k), int64(len(k))); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := s.list(ctx, "p/c/")
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
	if f.count("continuation-token") == 0 {
		t.Error("the listing was not paged")
	}
	if err := s.delete(ctx, "p/c/1.db"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.object("bkt", "p/c/1.db"); ok {
		t.Error("p/c/1.db not deleted")
	}
	// Uploads an operator killed midway left: those under the prefix go.
	for _, k := range []string{"p/c/4.db", "p/other/2.db"} {
		var created struct{ UploadId string }
		if err := s.call(ctx, s3Request{method: http.MethodPost, key: k, query: map[string][]string{"uploads": {""}}}, &created); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.abortUploads(ctx, "p/c/"); err != nil {
		t.Fatal(err)
	}
	if f.openUploads() != 1 {
		t.Errorf("%d uploads open, want 1 (the other cluster's)", f.openUploads())
	}
}

// Failures worth repeating are repeated; others are not.
func TestS3Retries(t *testing.T) {
	f := newFakeS3(t, "bkt")
	s := f.client(t, "bkt")
	fails := 2
	f.fault = func(r *http.Request) (int, string) {
		if fails > 0 {
			fails--
			return http.StatusServiceUnavailable, "SlowDown"
		}
		return 0, ""
	}
	if _, err := s.list(context.Background(), ""); err != nil {
		t.Fatalf("list after two 503s: %v", err)
	}
	f.fault = func(r *http.Request) (int, string) { return http.StatusForbidden, "AccessDenied" }
	before := f.count("GET")
	if _, err := s.list(context.Background(), ""); !isS3Code(err, "AccessDenied") {
		t.Fatalf("list: %v", err)
	}
	if n := f.count("GET") - before; n != 1 {
		t.Errorf("a 403 was sent %d times", n)
	}
}
