// Package s3 stores objects in S3 or any S3-compatible server, with nothing
// but net/http and crypto.
//
// Like the Kubernetes API, S3 is plain HTTP. What an SDK adds is the
// signature: with AWS Signature Version 4 (SigV4) every request carries an
// HMAC-SHA256 of a canonical form of itself (method, path, query, the
// headers it names, a hash of the body), keyed by a key derived from the
// secret, the day, the region and the service. Nothing secret travels, and a
// server that recomputes the same HMAC knows who sent the request and that
// nobody changed it. The body's hash can be the literal UNSIGNED-PAYLOAD,
// which lets a body of known length be streamed as it is produced.
//
// Requests are path-style (http://HOST/BUCKET/KEY), which every
// S3-compatible server understands. A stream is sent as a multipart
// upload, part by part, and a failed one is aborted, so that no object
// that looks complete is ever left behind: an object exists only once S3
// has all of it.
package s3

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/backoff"
)

// The default part sizes: variables only so that the live tests can make
// several parts of a test cluster's database.
var (
	// DefaultPartSize is the part size of a stream whose length is known: each
	// part is streamed straight from the snapshot, nothing is held, and a
	// database of etcd's largest quota (8 GiB) takes 128 parts.
	DefaultPartSize int64 = 64 << 20
	// DefaultBufferedPart is the part size of a stream whose length is not
	// known in advance (gzip): S3 needs each part's length before its
	// body, so such a part is held in memory. S3's smallest, 5 MiB, keeps
	// memory low and still allows objects of 48 GiB.
	DefaultBufferedPart int64 = 5 << 20
)

const (
	maxParts     = 10000
	unsignedBody = "UNSIGNED-PAYLOAD"
)

// emptyHash is the sha256 of no bytes: the payload hash of a bodiless request.
var emptyHash = hex.EncodeToString(sha256.New().Sum(nil))

// Client is one bucket of one endpoint, with the credentials to sign for it.
type Client struct {
	endpoint       *url.URL // scheme://host[:port]
	bucket, region string
	access, secret string
	http           *http.Client
	now            func() time.Time
	// PartSize and BufferedPart are the part sizes of a stream of known
	// and of unknown length (DefaultPartSize, DefaultBufferedPart).
	PartSize, BufferedPart int64
}

// Error is an answer other than 2xx, with S3's own error code.
type Error struct {
	Op      string // "PUT bucket/key"
	Status  int
	Code    string // NoSuchBucket, SignatureDoesNotMatch, ...
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("S3 %s: %d %s: %s", e.Op, e.Status, e.Code, e.Message)
}

// IsCode reports whether err is an S3 answer with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// ParseEndpoint reads an endpoint: http(s)://HOST[:PORT], no path.
func ParseEndpoint(endpoint string) (*url.URL, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return nil, fmt.Errorf("%q must be http(s)://HOST[:PORT]", endpoint)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// New returns a client of bucket at endpoint (http(s)://HOST[:PORT]),
// signing with the access key and secret for region.
func New(endpoint, bucket, region, access, secret string) (*Client, error) {
	u, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A body may stream for long, but its answer must come: completing a
	// large multipart upload can take S3 a few minutes.
	transport.ResponseHeaderTimeout = 5 * time.Minute
	return &Client{
		endpoint: u,
		bucket:   bucket, region: region, access: access, secret: secret,
		http:     &http.Client{Transport: transport},
		now:      time.Now,
		PartSize: DefaultPartSize, BufferedPart: DefaultBufferedPart,
	}, nil
}

// request is one request: a small body is signed with its hash, a
// streamed one (stream, of length size) is sent as UNSIGNED-PAYLOAD.
type request struct {
	method, key string
	query       url.Values
	body        []byte
	stream      io.Reader
	size        int64
}

func (r request) op(bucket string) string { return r.method + " " + bucket + "/" + r.key }

// send signs and sends r, and returns the answer of a 2xx; anything else
// is an *Error. The caller closes the body.
func (s *Client) send(ctx context.Context, r request) (*http.Response, error) {
	req, err := s.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("S3 %s: %w", r.op(s.bucket), err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return nil, errorOf(r.op(s.bucket), resp.StatusCode, b)
}

func (s *Client) newRequest(ctx context.Context, r request) (*http.Request, error) {
	u := *s.endpoint
	u.Path = "/" + s.bucket
	u.RawPath = "/" + awsEscape(s.bucket, false)
	if r.key != "" {
		u.Path += "/" + r.key
		u.RawPath += "/" + awsEscape(r.key, true)
	}
	u.RawQuery = r.query.Encode()
	var body io.Reader = http.NoBody
	hash := emptyHash
	switch {
	case r.stream != nil:
		body, hash = r.stream, unsignedBody
	case r.body != nil:
		body, hash = bytes.NewReader(r.body), sha256Hex(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("S3 %s: %w", r.op(s.bucket), err)
	}
	switch {
	case r.stream != nil:
		req.ContentLength = r.size
		if r.size == 0 {
			req.Body = http.NoBody
		}
	case r.body != nil:
		req.Header.Set("Content-Type", "application/xml")
	}
	Sign(req, s.access, s.secret, s.region, hash, s.now())
	return req, nil
}

// call sends a request with a small body (or none) and decodes the XML
// answer into v (when not nil). Failures worth repeating (the network, 5xx,
// 503 SlowDown) are tried again a few times: such a request can be repeated.
func (s *Client) call(ctx context.Context, r request, v any) error {
	retry := backoff.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		err := s.callOnce(ctx, r, v)
		var e *Error
		final := errors.As(err, &e) && e.Status < 500
		if err == nil || final || attempt == 4 || ctx.Err() != nil {
			return err
		}
		if !backoff.Sleep(ctx, retry.Delay()) {
			return err
		}
	}
}

func (s *Client) callOnce(ctx context.Context, r request, v any) error {
	resp, err := s.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("S3 %s: read answer: %w", r.op(s.bucket), err)
	}
	// CompleteMultipartUpload can fail after its 200 OK has been sent: the
	// error then comes as the body.
	if rootElement(b) == "Error" {
		return errorOf(r.op(s.bucket), resp.StatusCode, b)
	}
	if v == nil || len(b) == 0 {
		return nil
	}
	if err := xml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("S3 %s: decode answer: %w", r.op(s.bucket), err)
	}
	return nil
}

// rootElement is the name of an XML document's first element.
func rootElement(b []byte) string {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		t, err := d.Token()
		if err != nil {
			return ""
		}
		if se, ok := t.(xml.StartElement); ok {
			return se.Name.Local
		}
	}
}

func errorOf(op string, status int, body []byte) *Error {
	var x struct{ Code, Message string }
	_ = xml.Unmarshal(body, &x) // a HEAD's error has no body
	e := &Error{Op: op, Status: status, Code: x.Code, Message: x.Message}
	if e.Code == "" {
		e.Code = strings.ReplaceAll(http.StatusText(status), " ", "")
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// Put stores the stream r under key. size is r's exact length, or -1 when
// it is not known. It is always a multipart upload, even of one part, and
// aborted if anything fails: an object then appears only once all of it
// has arrived. (A plain PUT whose body is cut midway is not safe: versitygw
// v1.8.0 keeps what arrived as the object. It may also store a cut part
// after the abort, opening the upload again; AbortUploads, which every
// backup calls first, clears that.)
func (s *Client) Put(ctx context.Context, key string, r io.Reader, size int64) (err error) {
	var created struct{ UploadId string }
	if err := s.call(ctx, request{method: http.MethodPost, key: key, query: url.Values{"uploads": {""}}}, &created); err != nil {
		return err
	}
	if created.UploadId == "" {
		return fmt.Errorf("S3 POST %s/%s?uploads: no UploadId in the answer", s.bucket, key)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.abort(ctx, key, created.UploadId))
		}
	}()
	parts, err := s.sendParts(ctx, key, created.UploadId, r, size)
	if err != nil {
		return err
	}
	body, _ := xml.Marshal(struct {
		XMLName xml.Name `xml:"CompleteMultipartUpload"`
		Part    []completedPart
	}{Part: parts})
	return s.call(ctx, request{method: http.MethodPost, key: key, query: url.Values{"uploadId": {created.UploadId}}, body: body}, nil)
}

type completedPart struct {
	PartNumber int
	ETag       string
}

// sendParts streams r as parts: with its length known, each part straight
// from r; without, each part read into one buffer first.
func (s *Client) sendParts(ctx context.Context, key, id string, r io.Reader, size int64) ([]completedPart, error) {
	var parts []completedPart
	var buf []byte
	for n, sent := 1, int64(0); ; n++ {
		var body io.Reader
		var length int64
		if size >= 0 {
			if sent == size && n > 1 {
				return parts, nil
			}
			// Limited: the transport reads a body to its end.
			length = min(s.PartSize, size-sent)
			body = io.LimitReader(r, length)
		} else {
			if buf == nil {
				buf = make([]byte, s.BufferedPart)
			}
			got, err := io.ReadFull(r, buf)
			if got == 0 && err == io.EOF && n > 1 {
				return parts, nil
			}
			if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
				return nil, err
			}
			length, body = int64(got), bytes.NewReader(buf[:got])
		}
		if n > maxParts {
			return nil, fmt.Errorf("S3 PUT %s/%s: more than %d parts", s.bucket, key, maxParts)
		}
		etag, err := s.sendPart(ctx, key, id, n, body, length)
		if err != nil {
			return nil, err
		}
		parts = append(parts, completedPart{PartNumber: n, ETag: etag})
		sent += length
		if size < 0 && length < s.BufferedPart {
			return parts, nil
		}
	}
}

func (s *Client) sendPart(ctx context.Context, key, id string, n int, body io.Reader, length int64) (string, error) {
	q := url.Values{"partNumber": {strconv.Itoa(n)}, "uploadId": {id}}
	resp, err := s.send(ctx, request{method: http.MethodPut, key: key, query: q, stream: body, size: length})
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	if etag == "" {
		return "", fmt.Errorf("S3 PUT %s/%s part %d: no ETag in the answer", s.bucket, key, n)
	}
	return etag, nil
}

// abort ends a multipart upload and drops its parts. It gets a context of
// its own: the upload's may be what failed.
func (s *Client) abort(ctx context.Context, key, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := s.call(ctx, request{method: http.MethodDelete, key: key, query: url.Values{"uploadId": {id}}}, nil)
	if err != nil && !IsCode(err, "NoSuchUpload") {
		return fmt.Errorf("abort the multipart upload: %w", err)
	}
	return nil
}

// AbortUploads aborts the multipart uploads under prefix that an earlier
// try (an operator killed mid-upload) left unfinished.
func (s *Client) AbortUploads(ctx context.Context, prefix string) error {
	uploads, err := s.uploads(ctx, prefix)
	if err != nil {
		return err
	}
	for _, u := range uploads {
		if err := s.abort(ctx, u.Key, u.UploadId); err != nil {
			return err
		}
	}
	return nil
}

// Uploads lists the keys of the multipart uploads under prefix that are
// neither completed nor aborted.
func (s *Client) Uploads(ctx context.Context, prefix string) ([]string, error) {
	uploads, err := s.uploads(ctx, prefix)
	var keys []string
	for _, u := range uploads {
		keys = append(keys, u.Key)
	}
	return keys, err
}

type upload struct{ Key, UploadId string }

func (s *Client) uploads(ctx context.Context, prefix string) ([]upload, error) {
	var l struct{ Upload []upload }
	err := s.call(ctx, request{method: http.MethodGet, query: url.Values{"uploads": {""}, "prefix": {prefix}}}, &l)
	return l.Upload, err
}

// Object is one entry of a listing.
type Object struct {
	Key          string
	Size         int64
	LastModified string
}

// List returns every object under prefix (ListObjectsV2, page by page),
// sorted by key.
func (s *Client) List(ctx context.Context, prefix string) ([]Object, error) {
	var all []Object
	token := ""
	for {
		q := url.Values{"list-type": {"2"}, "prefix": {prefix}}
		if token != "" {
			q.Set("continuation-token", token)
		}
		var page struct {
			Contents              []Object
			IsTruncated           bool
			NextContinuationToken string
		}
		if err := s.call(ctx, request{method: http.MethodGet, query: q}, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Contents...)
		if !page.IsTruncated || page.NextContinuationToken == "" {
			slices.SortFunc(all, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
			return all, nil
		}
		token = page.NextContinuationToken
	}
}

// Delete deletes an object; a missing one is no error, as S3 answers.
func (s *Client) Delete(ctx context.Context, key string) error {
	return s.call(ctx, request{method: http.MethodDelete, key: key}, nil)
}

// Head returns an object's size.
func (s *Client) Head(ctx context.Context, key string) (int64, error) {
	resp, err := s.send(ctx, request{method: http.MethodHead, key: key})
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.ContentLength, nil
}

// Get opens an object for reading; the caller closes it.
func (s *Client) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	resp, err := s.send(ctx, request{method: http.MethodGet, key: key})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Sign signs req for S3 in region with AWS Signature Version 4: it sets
// X-Amz-Date, X-Amz-Content-Sha256 (payloadHash) and Authorization. Every
// header already set is signed, with the host.
func Sign(req *http.Request, access, secret, region, payloadHash string, t time.Time) {
	amzDate := t.UTC().Format("20060102T150405Z")
	day := amzDate[:8]
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	signed, headers := canonicalHeaders(req)
	canonical := strings.Join([]string{req.Method, awsEscape(req.URL.Path, true), canonicalQuery(req.URL.Query()), headers, signed, payloadHash}, "\n")
	scope := day + "/" + region + "/s3/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + sha256Hex([]byte(canonical))
	key := []byte("AWS4" + secret)
	for _, s := range []string{day, region, "s3", "aws4_request"} {
		key = hmacSHA256(key, s)
	}
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+access+"/"+scope+
		",SignedHeaders="+signed+",Signature="+hex.EncodeToString(hmacSHA256(key, toSign)))
}

// canonicalHeaders returns the signed header names (host and every header
// set, lower case, sorted, joined by ;) and their canonical lines.
func canonicalHeaders(req *http.Request) (signed, lines string) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	values := map[string]string{"host": host}
	for name, vs := range req.Header {
		name = strings.ToLower(name)
		if name == "authorization" || name == "user-agent" {
			continue
		}
		trimmed := make([]string, len(vs))
		for i, v := range vs {
			trimmed[i] = strings.Join(strings.Fields(v), " ")
		}
		values[name] = strings.Join(trimmed, ",")
	}
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		b.WriteString(name + ":" + values[name] + "\n")
	}
	return strings.Join(names, ";"), b.String()
}

func canonicalQuery(q url.Values) string {
	var pairs []string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, awsEscape(k, false)+"="+awsEscape(v, false))
		}
	}
	slices.Sort(pairs)
	return strings.Join(pairs, "&")
}

// awsEscape percent-encodes every byte but the unreserved ones (and '/'
// in a path), as SigV4 prescribes; url.PathEscape keeps more as it is.
func awsEscape(s string, path bool) string {
	if s == "" && path {
		return "/"
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 || path && c == '/' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func hmacSHA256(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
