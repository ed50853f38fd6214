// Package kube talks to the Kubernetes API server with nothing but net/http.
//
// The Kubernetes API is plain HTTP and JSON. What a client library adds, and
// what this package does in a page, is being a good citizen of a shared server:
// a client-side rate limit, a timeout on every request, retries with capped,
// jittered backoff for 429 Too Many Requests (honouring Retry-After) and 5xx,
// and errors that carry the server's own Status reason and message.
//
// It also knows the two ways to reach the API server: through `kubectl
// proxy` (plain HTTP on loopback; kubectl adds the credentials), or from
// inside a Pod, over HTTPS verified against the cluster's CA, with the Pod's
// ServiceAccount token. That token is re-read for every request, because
// bound tokens rotate and one read at start-up expires.
package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/backoff"
)

// ServiceAccountDir is where the kubelet mounts a Pod's ServiceAccount
// credentials.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Client sends requests to one API server. It is safe for concurrent use.
type Client struct {
	// Limit, Timeout and Log may be set before the first request.
	Limit   *RateLimiter  // client-side rate limit (none by default)
	Timeout time.Duration // for each request but a stream (30s by default)
	Log     *slog.Logger  // where retries are logged (nowhere by default)
	// Attempts and RetryBase bound the retries: Attempts tries in all, the
	// waits growing from RetryBase to 50 times it.
	Attempts  int
	RetryBase time.Duration

	base      string // scheme://host[:port], no trailing slash
	http      *http.Client
	tokenFile string // empty through kubectl proxy
}

// Error is a failed request, with the API server's Status when it sent one.
type Error struct {
	Method, Path string
	Code         int
	Reason       string
	Message      string
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Code, e.Reason, msg)
}

// IsStatus reports whether err is an API error with the given HTTP code.
func IsStatus(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Status is the part of a metav1.Status that a client reads: the API
// server's answer to a failed request, and a watch's ERROR event.
type Status struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// ParseStatus reads a Status; a body that is not one gives an empty Status.
func ParseStatus(b []byte) Status {
	var s Status
	_ = json.Unmarshal(b, &s)
	return s
}

// InCluster builds the client a Pod uses: the API server's address
// from the environment the kubelet sets, its CA and the token from the
// ServiceAccount volume.
func InCluster(dir string) (*Client, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("in-cluster CA: no certificate in %s", filepath.Join(dir, "ca.crt"))
	}
	tokenFile := filepath.Join(dir, "token")
	if _, err := readToken(tokenFile); err != nil {
		return nil, err
	}
	c := New("https://"+net.JoinHostPort(host, port), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	c.tokenFile = tokenFile
	return c, nil
}

func readToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("service account token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("service account token: %s is empty", file)
	}
	return token, nil
}

// New returns a client of the API server at base (through kubectl proxy:
// http://127.0.0.1:8001), verifying its certificate with tlsConfig if set.
func New(base string, tlsConfig *tls.Config) *Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	// Workers send requests in parallel; keep a connection for each of them
	// instead of opening and closing one per request.
	transport.MaxIdleConnsPerHost = 64
	return &Client{
		base:      strings.TrimRight(base, "/"),
		http:      &http.Client{Transport: transport},
		Limit:     NewRateLimiter(0, 1),
		Timeout:   30 * time.Second,
		Attempts:  6,
		RetryBase: 200 * time.Millisecond,
		Log:       slog.New(slog.DiscardHandler),
	}
}

// Do sends one request and returns the response body of a 2xx answer. 429,
// 5xx and connection failures are retried; anything else is returned at
// once as an *Error. A POST retried after a lost answer may meet 409
// AlreadyExists, which the caller treats as done.
func (c *Client) Do(ctx context.Context, method, path string, body []byte, contentType string) ([]byte, error) {
	retry := backoff.Backoff{Min: c.RetryBase, Max: 50 * c.RetryBase} // 200ms to 10s by default
	for attempt := 1; ; attempt++ {
		respBody, wait, err := c.try(ctx, method, path, body, contentType)
		if err == nil || wait < 0 || attempt >= c.Attempts || ctx.Err() != nil {
			return respBody, err
		}
		if wait == 0 {
			wait = retry.Delay()
		}
		c.Log.Warn("API request failed; retrying", "method", method, "path", path, "attempt", attempt, "in", wait.Round(time.Millisecond), "err", err)
		if !backoff.Sleep(ctx, wait) {
			return nil, ctx.Err()
		}
	}
}

// Once sends one request, with no retry, and returns the body of a 2xx
// answer: for a caller that tries again on its own (the next pass).
func (c *Client) Once(ctx context.Context, method, path string, body []byte, contentType string) ([]byte, error) {
	b, _, err := c.try(ctx, method, path, body, contentType)
	return b, err
}

// try makes one attempt. wait < 0 means the error is final; wait > 0 is the
// delay the server asked for with Retry-After; 0 means "back off".
func (c *Client) try(ctx context.Context, method, path string, body []byte, contentType string) ([]byte, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	resp, err := c.send(ctx, method, path, body, contentType)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return b, 0, nil
	}
	e := responseError(method, path, resp.StatusCode, b)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return nil, retryAfter(resp.Header.Get("Retry-After")), e
	default:
		return nil, -1, e
	}
}

// Stream sends a request whose answer is long-lived (a watch, etcd's
// snapshot through a Pod proxy) and returns its body once the answer is
// 200. It has no timeout: the caller bounds it by watching for silence.
func (c *Client) Stream(ctx context.Context, method, path string, body []byte, contentType string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, method, path, body, contentType)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, responseError(method, path, resp.StatusCode, b)
	}
	return resp.Body, nil
}

func (c *Client) send(ctx context.Context, method, path string, body []byte, contentType string) (*http.Response, error) {
	if err := c.Limit.Wait(ctx); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "etcd-operator")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range headers(ctx) {
		req.Header[k] = v
	}
	if c.tokenFile != "" {
		token, err := readToken(c.tokenFile)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error prints the URL, never the headers: the token stays out.
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

type headerKey struct{}

// WithHeader returns a context whose requests carry one more header: for
// the rare request that needs one, such as a credential for the server
// behind a proxy.
func WithHeader(ctx context.Context, name, value string) context.Context {
	h := headers(ctx).Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set(name, value)
	return context.WithValue(ctx, headerKey{}, h)
}

func headers(ctx context.Context) http.Header {
	h, _ := ctx.Value(headerKey{}).(http.Header)
	return h
}

func responseError(method, path string, code int, body []byte) *Error {
	st := ParseStatus(body)
	e := &Error{Method: method, Path: path, Code: code, Reason: st.Reason, Message: st.Message}
	if e.Reason == "" {
		e.Reason = strings.ReplaceAll(http.StatusText(code), " ", "")
	}
	if e.Message == "" && len(body) > 0 && st == (Status{}) {
		e.Message = strings.TrimSpace(excerpt(body))
	}
	return e
}

// retryAfter reads a Retry-After of whole seconds, capped at one minute.
func retryAfter(h string) time.Duration {
	s, err := strconv.Atoi(h)
	if err != nil || s <= 0 {
		return 0
	}
	return min(time.Duration(s)*time.Second, time.Minute)
}

// RateLimiter spaces requests at most qps per second on average, allowing
// bursts of up to burst requests.
type RateLimiter struct {
	mu       sync.Mutex
	interval time.Duration // 0: unlimited
	burst    int
	next     time.Time // when the bucket is full again, minus one interval
}

// NewRateLimiter returns a limit of qps on average (0: none) with bursts
// of burst requests.
func NewRateLimiter(qps float64, burst int) *RateLimiter {
	r := &RateLimiter{burst: max(burst, 1)}
	if qps > 0 {
		r.interval = time.Duration(float64(time.Second) / qps)
	}
	return r
}

// Wait takes a token, waiting for one if the bucket is empty, or returns
// ctx's error.
func (r *RateLimiter) Wait(ctx context.Context) error {
	if r.interval == 0 {
		return ctx.Err()
	}
	r.mu.Lock()
	now := time.Now()
	// A full bucket holds burst tokens: never let "next" fall further
	// behind now than that.
	if earliest := now.Add(-time.Duration(r.burst-1) * r.interval); r.next.Before(earliest) {
		r.next = earliest
	}
	at := r.next
	r.next = r.next.Add(r.interval)
	r.mu.Unlock()
	if d := at.Sub(now); d > 0 && !backoff.Sleep(ctx, d) {
		return ctx.Err()
	}
	return ctx.Err()
}

// excerpt is at most the first 40 bytes of an answer, for a message.
func excerpt(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// Base is the API server's address: scheme://host[:port].
func (c *Client) Base() string { return c.base }
