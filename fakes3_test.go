package main

// A fake S3 server for the backup tests: path-style buckets and objects in
// memory, multipart uploads, ListObjectsV2 (in small pages), and SigV4
// checked on every request, as a real server would: a request whose
// signature does not match what arrived is refused with
// SignatureDoesNotMatch. An object exists only once a PUT's whole body, or
// a completed multipart upload, has arrived.

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeS3 struct {
	srv                    *httptest.Server
	access, secret, region string
	mu                     sync.Mutex
	buckets                map[string]bool
	objects                map[string][]byte // "bucket/key"
	uploads                map[string]*fakeUpload
	requests               []string // "METHOD /bucket/key?query"
	pageSize               int
	fault                  func(r *http.Request) (code int, s3code string) // 0: none
	nextID                 int
}

type fakeUpload struct {
	bucket, key string
	parts       map[int][]byte
}

func newFakeS3(t *testing.T, buckets ...string) *fakeS3 {
	f := &fakeS3{access: "AKIDTEST", secret: "test-secret-key", region: "us-east-1",
		buckets: map[string]bool{}, objects: map[string][]byte{}, uploads: map[string]*fakeUpload{}, pageSize: 2}
	for _, b := range buckets {
		f.buckets[b] = true
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// client is an s3Client for bucket with the fake's credentials.
func (f *fakeS3) client(t *testing.T, bucket string) *s3Client {
	t.Helper()
	s, err := newS3Client(f.srv.URL, bucket, f.region, f.access, f.secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fakeS3) object(bucket, key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objects[bucket+"/"+key]
	return b, ok
}

func (f *fakeS3) keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (f *fakeS3) openUploads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.uploads)
}

// count counts the requests whose "METHOD path?query" contains s.
func (f *fakeS3) count(s string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		if strings.Contains(r, s) {
			n++
		}
	}
	return n
}

func s3Fail(w http.ResponseWriter, status int, code, msg string) {
	w.WriteHeader(status)
	fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>", code, msg)
}

func (f *fakeS3) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	fault := f.fault
	f.mu.Unlock()
	if code, msg := f.checkSignature(r); code != "" {
		s3Fail(w, http.StatusForbidden, code, msg)
		return
	}
	if fault != nil {
		if status, code := fault(r); status != 0 {
			s3Fail(w, status, code, "injected")
			return
		}
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	f.mu.Lock()
	ok := f.buckets[bucket]
	f.mu.Unlock()
	if !ok {
		s3Fail(w, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
		return
	}
	if key == "" {
		f.serveBucket(w, r, bucket)
		return
	}
	f.serveObject(w, r, bucket, key)
}

// checkSignature recomputes the request's signature from what arrived.
func (f *fakeS3) checkSignature(r *http.Request) (code, msg string) {
	auth := r.Header.Get("Authorization")
	cred, _, _ := strings.Cut(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 Credential="), ",")
	access, _, _ := strings.Cut(cred, "/")
	if access != f.access {
		return "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
	}
	_, signed, _ := strings.Cut(auth, "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	for _, must := range []string{"host", "x-amz-content-sha256", "x-amz-date"} {
		if !slices.Contains(strings.Split(signed, ";"), must) {
			return "AccessDenied", "header " + must + " is not signed"
		}
	}
	t, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "AccessDenied", "bad X-Amz-Date"
	}
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	for _, h := range strings.Split(signed, ";") {
		if h != "host" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	signV4(again, access, f.secret, f.region, r.Header.Get("X-Amz-Content-Sha256"), t)
	if again.Header.Get("Authorization") != auth {
		return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."
	}
	return "", ""
}

func (f *fakeS3) serveBucket(w http.ResponseWriter, r *http.Request, bucket string) {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodGet && q.Has("uploads"):
		f.listUploads(w, bucket, q.Get("prefix"))
	case r.Method == http.MethodGet && q.Get("list-type") == "2":
		f.listObjects(w, bucket, q.Get("prefix"), q.Get("continuation-token"))
	default:
		s3Fail(w, http.StatusNotImplemented, "NotImplemented", r.Method+" on a bucket")
	}
}

func (f *fakeS3) listObjects(w http.ResponseWriter, bucket, prefix, token string) {
	var keys []string
	for _, k := range f.keys() {
		if rest, ok := strings.CutPrefix(k, bucket+"/"); ok && strings.HasPrefix(rest, prefix) && rest > token {
			keys = append(keys, rest)
		}
	}
	type content struct {
		Key  string
		Size int
	}
	var page struct {
		XMLName               xml.Name `xml:"ListBucketResult"`
		Contents              []content
		IsTruncated           bool
		NextContinuationToken string `xml:",omitempty"`
	}
	for i, k := range keys {
		if i == f.pageSize {
			page.IsTruncated, page.NextContinuationToken = true, keys[i-1]
			break
		}
		b, _ := f.object(bucket, k)
		page.Contents = append(page.Contents, content{Key: k, Size: len(b)})
	}
	writeXML(w, page)
}

func (f *fakeS3) listUploads(w http.ResponseWriter, bucket, prefix string) {
	type upload struct{ Key, UploadId string }
	var l struct {
		XMLName xml.Name `xml:"ListMultipartUploadsResult"`
		Upload  []upload
	}
	f.mu.Lock()
	for id, u := range f.uploads {
		if u.bucket == bucket && strings.HasPrefix(u.key, prefix) {
			l.Upload = append(l.Upload, upload{Key: u.key, UploadId: id})
		}
	}
	f.mu.Unlock()
	writeXML(w, l)
}

func writeXML(w http.ResponseWriter, v any) {
	b, _ := xml.Marshal(v)
	w.Header().Set("Content-Type", "application/xml")
	w.Write(b)
}

func (f *fakeS3) serveObject(w http.ResponseWriter, r *http.Request, bucket, key string) {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Has("uploads"):
		f.mu.Lock()
		f.nextID++
		id := "upload-" + strconv.Itoa(f.nextID)
		f.uploads[id] = &fakeUpload{bucket: bucket, key: key, parts: map[int][]byte{}}
		f.mu.Unlock()
		writeXML(w, struct {
			XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
			UploadId string
		}{UploadId: id})
	case r.Method == http.MethodPut && q.Has("uploadId"):
		f.putPart(w, r, q.Get("uploadId"), q.Get("partNumber"))
	case r.Method == http.MethodPost && q.Has("uploadId"):
		f.complete(w, r, bucket, key, q.Get("uploadId"))
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		f.mu.Lock()
		delete(f.uploads, q.Get("uploadId"))
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut:
		body, ok := readBody(w, r)
		if ok {
			f.mu.Lock()
			f.objects[bucket+"/"+key] = body
			f.mu.Unlock()
		}
	default:
		f.serveStored(w, r, bucket, key)
	}
}

// readBody reads a whole body of the declared length, as S3 needs one.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength < 0 {
		s3Fail(w, http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header.")
		return nil, false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil || int64(len(body)) != r.ContentLength {
		s3Fail(w, http.StatusBadRequest, "IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header.")
		return nil, false
	}
	return body, true
}

func (f *fakeS3) putPart(w http.ResponseWriter, r *http.Request, id, number string) {
	n, _ := strconv.Atoi(number)
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.uploads[id]
	if u == nil {
		s3Fail(w, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.")
		return
	}
	u.parts[n] = body
	w.Header().Set("ETag", etag(body))
}

func etag(b []byte) string {
	sum := md5.Sum(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func (f *fakeS3) complete(w http.ResponseWriter, r *http.Request, bucket, key, id string) {
	var c struct {
		Part []completedPart
	}
	if err := xml.NewDecoder(r.Body).Decode(&c); err != nil {
		s3Fail(w, http.StatusBadRequest, "MalformedXML", err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.uploads[id]
	if u == nil {
		s3Fail(w, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.")
		return
	}
	var all []byte
	for i, p := range c.Part {
		if p.PartNumber != i+1 || etag(u.parts[p.PartNumber]) != p.ETag {
			s3Fail(w, http.StatusBadRequest, "InvalidPart", "part "+strconv.Itoa(p.PartNumber))
			return
		}
		all = append(all, u.parts[p.PartNumber]...)
	}
	f.objects[bucket+"/"+key] = all
	delete(f.uploads, id)
	writeXML(w, struct {
		XMLName xml.Name `xml:"CompleteMultipartUploadResult"`
		Key     string
	}{Key: key})
}

func (f *fakeS3) serveStored(w http.ResponseWriter, r *http.Request, bucket, key string) {
	body, ok := f.object(bucket, key)
	switch {
	case !ok && r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent) // S3 deletes what is not there without complaint
	case !ok:
		s3Fail(w, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	case r.Method == http.MethodDelete:
		f.mu.Lock()
		delete(f.objects, bucket+"/"+key)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodHead || r.Method == http.MethodGet:
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if r.Method == http.MethodGet {
			w.Write(body)
		}
	default:
		s3Fail(w, http.StatusNotImplemented, "NotImplemented", r.Method)
	}
}
