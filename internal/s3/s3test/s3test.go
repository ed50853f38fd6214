// Package s3test is a fake S3 server for tests: path-style buckets and
// objects in memory, multipart uploads, ListObjectsV2 (in small pages), and
// SigV4 checked on every request, as a real server would: a request whose
// signature does not match what arrived is refused with
// SignatureDoesNotMatch. The payload hash is checked as S3 checks it:
// x-amz-content-sha256 must be there, and a hex sha256 must be that of the
// body that arrived (else XAmzContentSHA256Mismatch); UNSIGNED-PAYLOAD is
// taken anywhere, as S3 takes it, so the server records what each request
// claimed (Payloads) for a test to tell a signed body from an unsigned
// one. An object exists only once a PUT's whole body, or a completed
// multipart upload, has arrived.
package s3test

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
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

	"github.com/etcd-operator/etcd-operator/internal/s3"
)

// Server is one fake S3 endpoint.
type Server struct {
	URL                    string // http://127.0.0.1:PORT
	Access, Secret, Region string // the one key pair it knows, and its region

	srv      *httptest.Server
	mu       sync.Mutex
	buckets  map[string]bool
	objects  map[string][]byte // "bucket/key"
	uploads  map[string]*upload
	requests []string // "METHOD /bucket/key?query"
	payloads []Payload
	pageSize int
	fault    func(r *http.Request) (code int, s3code string) // 0: none
	catch    func(w http.ResponseWriter, r *http.Request) bool
	nextID   int
}

// Payload is what one request said of its body, and what arrived.
type Payload struct {
	Request string // "METHOD /bucket/key?query"
	Claimed string // its x-amz-content-sha256
	// Body is the hex sha256 of the body that arrived, for every request
	// the server reads whole before serving it: all but a PUT (of an
	// object or a part: a stream) sent as UNSIGNED-PAYLOAD, whose Body is "".
	Body string
}

type upload struct {
	bucket, key string
	parts       map[int][]byte
}

// New starts a server with the given buckets, stopped when the test ends.
func New(t testing.TB, buckets ...string) *Server {
	f := &Server{Access: "AKIDTEST", Secret: "test-secret-key", Region: "us-east-1",
		buckets: map[string]bool{}, objects: map[string][]byte{}, uploads: map[string]*upload{}, pageSize: 2}
	for _, b := range buckets {
		f.buckets[b] = true
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = f.srv.URL
	t.Cleanup(f.srv.Close)
	return f
}

// Client is a client of bucket with the server's credentials.
func (f *Server) Client(t testing.TB, bucket string) *s3.Client {
	t.Helper()
	s, err := s3.New(f.URL, bucket, f.Region, f.Access, f.Secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Object is the object under bucket/key, if there is one.
func (f *Server) Object(bucket, key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objects[bucket+"/"+key]
	return b, ok
}

// Keys are every object's "bucket/key", sorted.
func (f *Server) Keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// OpenUploads counts the multipart uploads neither completed nor aborted.
func (f *Server) OpenUploads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.uploads)
}

// Put stores an object as it is, as if someone had uploaded it.
func (f *Server) Put(bucket, key string, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objects[bucket+"/"+key] = b
}

// Remove deletes an object, as if someone else had.
func (f *Server) Remove(bucket, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.objects, bucket+"/"+key)
}

// RemoveBucket deletes a bucket: requests to it answer NoSuchBucket.
func (f *Server) RemoveBucket(bucket string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.buckets, bucket)
}

// Fail makes the server answer a request with the status and S3 code fault
// returns for it, unless that status is 0; nil answers every request again.
func (f *Server) Fail(fault func(r *http.Request) (status int, code string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fault
}

// Intercept lets catch answer a request before the server does (it returns
// true when it did): an answer no fault code makes, such as an error sent
// after a 200 OK.
func (f *Server) Intercept(catch func(w http.ResponseWriter, r *http.Request) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.catch = catch
}

// Begin starts a multipart upload that nobody completes or aborts, as an
// uploader killed midway leaves one.
func (f *Server) Begin(bucket, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	f.uploads["upload-"+strconv.Itoa(f.nextID)] = &upload{bucket: bucket, key: key, parts: map[int][]byte{}}
}

// Count counts the requests whose "METHOD path?query" contains s.
func (f *Server) Count(s string) int {
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

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	line := r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery
	f.mu.Lock()
	f.requests = append(f.requests, line)
	fault, catch := f.fault, f.catch
	f.mu.Unlock()
	if catch != nil && catch(w, r) {
		return
	}
	claimed, got, ok := f.readPayload(w, r, line)
	if !ok {
		return
	}
	if code, msg := f.checkSignature(r); code != "" {
		s3Fail(w, http.StatusForbidden, code, msg)
		return
	}
	if claimed != "UNSIGNED-PAYLOAD" && claimed != got {
		s3Fail(w, http.StatusBadRequest, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.")
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
	ok = f.buckets[bucket]
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

// readPayload checks x-amz-content-sha256 and, unless it is a PUT's
// stream sent as UNSIGNED-PAYLOAD, reads the body whole to hash it (r.Body
// then reads it again). It records both, and answers a bad header itself.
func (f *Server) readPayload(w http.ResponseWriter, r *http.Request, line string) (claimed, got string, ok bool) {
	claimed = r.Header.Get("X-Amz-Content-Sha256")
	switch {
	case claimed == "":
		s3Fail(w, http.StatusBadRequest, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
		return "", "", false
	case strings.HasPrefix(claimed, "STREAMING-"):
		s3Fail(w, http.StatusNotImplemented, "NotImplemented", "the fake does not decode aws-chunked bodies")
		return "", "", false
	case claimed != "UNSIGNED-PAYLOAD" && !isSHA256Hex(claimed):
		s3Fail(w, http.StatusBadRequest, "InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD or a valid sha256 value.")
		return "", "", false
	}
	if r.Method != http.MethodPut || claimed != "UNSIGNED-PAYLOAD" {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			s3Fail(w, http.StatusBadRequest, "IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header.")
			return "", "", false
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256(body)
		got = hex.EncodeToString(sum[:])
	}
	f.mu.Lock()
	f.payloads = append(f.payloads, Payload{Request: line, Claimed: claimed, Body: got})
	f.mu.Unlock()
	return claimed, got, true
}

// isSHA256Hex reports a hash as x-amz-content-sha256 gives one: 64 hex
// digits.
func isSHA256Hex(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

// Payloads returns what the requests whose "METHOD path?query" contains s
// said of their bodies, in order.
func (f *Server) Payloads(s string) []Payload {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Payload
	for _, p := range f.payloads {
		if strings.Contains(p.Request, s) {
			out = append(out, p)
		}
	}
	return out
}

// checkSignature recomputes the request's signature from what arrived.
func (f *Server) checkSignature(r *http.Request) (code, msg string) {
	auth := r.Header.Get("Authorization")
	cred, _, _ := strings.Cut(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 Credential="), ",")
	access, _, _ := strings.Cut(cred, "/")
	if access != f.Access {
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
	s3.Sign(again, access, f.Secret, f.Region, r.Header.Get("X-Amz-Content-Sha256"), t)
	if again.Header.Get("Authorization") != auth {
		return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."
	}
	return "", ""
}

func (f *Server) serveBucket(w http.ResponseWriter, r *http.Request, bucket string) {
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

func (f *Server) listObjects(w http.ResponseWriter, bucket, prefix, token string) {
	var keys []string
	for _, k := range f.Keys() {
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
		b, _ := f.Object(bucket, k)
		page.Contents = append(page.Contents, content{Key: k, Size: len(b)})
	}
	writeXML(w, page)
}

func (f *Server) listUploads(w http.ResponseWriter, bucket, prefix string) {
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

func (f *Server) serveObject(w http.ResponseWriter, r *http.Request, bucket, key string) {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Has("uploads"):
		f.mu.Lock()
		f.nextID++
		id := "upload-" + strconv.Itoa(f.nextID)
		f.uploads[id] = &upload{bucket: bucket, key: key, parts: map[int][]byte{}}
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

func (f *Server) putPart(w http.ResponseWriter, r *http.Request, id, number string) {
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

func (f *Server) complete(w http.ResponseWriter, r *http.Request, bucket, key, id string) {
	var c struct {
		Part []struct {
			PartNumber int
			ETag       string
		}
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

func (f *Server) serveStored(w http.ResponseWriter, r *http.Request, bucket, key string) {
	body, ok := f.Object(bucket, key)
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
