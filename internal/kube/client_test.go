// Tests of the API client: retries of what may succeed later and of nothing
// else, a timeout on every request, the in-cluster identity (the cluster CA
// and a token read for every request), and the client-side rate limit.
package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The client retries what may succeed later, and nothing else.
func TestClientRetries(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answers    []int // HTTP codes, in order; then 200
		retryAfter string
		wantTries  int
		wantErr    string
	}{
		{name: "429 with Retry-After", answers: []int{429}, retryAfter: "1", wantTries: 2},
		{name: "503 then success", answers: []int{503, 503}, wantTries: 3},
		{name: "500 for good", answers: []int{500, 500, 500, 500}, wantTries: 4, wantErr: "500 InternalServerError: boom"},
		{name: "404 is final", answers: []int{404}, wantTries: 1, wantErr: "404 NotFound: boom"},
		{name: "403 is final", answers: []int{403}, wantTries: 1, wantErr: "403 Forbidden: boom"},
		{name: "409 is final", answers: []int{409}, wantTries: 1, wantErr: "409 Conflict: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var times []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n := len(times)
				times = append(times, time.Now())
				mu.Unlock()
				if n < len(tc.answers) {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					writeStatus(w, tc.answers[n], strings.ReplaceAll(http.StatusText(tc.answers[n]), " ", ""), "boom")
					return
				}
				w.Write([]byte(`{}`))
			}))
			defer srv.Close()
			c := New(srv.URL, nil)
			c.RetryBase, c.Attempts = time.Millisecond, 4
			_, err := c.Do(context.Background(), "GET", "/x", nil, "")
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			if len(times) != tc.wantTries {
				t.Errorf("%d tries, want %d", len(times), tc.wantTries)
			}
			if tc.retryAfter != "" && len(times) > 1 {
				if gap := times[1].Sub(times[0]); gap < time.Second {
					t.Errorf("retried after %v, before the 1s Retry-After", gap)
				}
			}
		})
	}
}

// Each request has a timeout; a hung request is retried, not waited on
// forever.
func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var mu sync.Mutex
	tries := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tries++
		first := tries == 1
		mu.Unlock()
		if first {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	c := New(srv.URL, nil)
	c.Timeout, c.RetryBase = 100*time.Millisecond, time.Millisecond
	b, err := c.Do(context.Background(), "GET", "/x", nil, "")
	if err != nil || string(b) != `{"ok":true}` {
		t.Fatalf("do = %s, %v; want the answer of a later try", b, err)
	}
	// Under load a later try may time out too; the first one must have.
	mu.Lock()
	defer mu.Unlock()
	if tries < 2 {
		t.Errorf("%d tries, want the hung one and another", tries)
	}
}

// In a Pod the client speaks HTTPS verified against the cluster CA, and
// reads the (rotating) token for every request.
func TestInClusterClient(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()

	writeSA := func(t *testing.T, cert []byte, token string) string {
		dir := t.TempDir()
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert})
		if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	u, _ := url.Parse(srv.URL)
	t.Setenv("KUBERNETES_SERVICE_HOST", u.Hostname())
	t.Setenv("KUBERNETES_SERVICE_PORT", u.Port())

	t.Run("token is read for every request", func(t *testing.T) {
		dir := writeSA(t, srv.Certificate().Raw, "token-one")
		c, err := InCluster(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do(context.Background(), "GET", "/api", nil, ""); err != nil {
			t.Fatal(err)
		}
		// The kubelet replaces the file when it rotates the token.
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte("token-two"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do(context.Background(), "GET", "/api", nil, ""); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"Bearer token-one", "Bearer token-two"}; !slices.Equal(auth, want) {
			t.Errorf("Authorization headers = %q, want %q", auth, want)
		}
	})
	t.Run("server not signed by the cluster CA", func(t *testing.T) {
		c, err := InCluster(writeSA(t, selfSignedCA(t), "secret-token"))
		if err != nil {
			t.Fatal(err)
		}
		c.Attempts = 1
		_, err = c.Do(context.Background(), "GET", "/api", nil, "")
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("err = %v, want a certificate verification error", err)
		}
		if err != nil && strings.Contains(err.Error(), "secret-token") {
			t.Errorf("the error shows the token: %v", err)
		}
	})
	t.Run("no token", func(t *testing.T) {
		dir := writeSA(t, srv.Certificate().Raw, "x")
		os.Remove(filepath.Join(dir, "token"))
		if _, err := InCluster(dir); err == nil || !strings.Contains(err.Error(), "service account token") {
			t.Errorf("err = %v, want a service account token error", err)
		}
	})
}

// selfSignedCA makes a CA certificate that signed nothing. (Every httptest
// server uses the same built-in certificate, so another one would not do.)
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestRateLimiter(t *testing.T) {
	// 10 requests at 1000/s with a burst of 5: the first 5 go at once, the
	// other 5 each wait one more interval, so the whole takes >= 5ms.
	r := NewRateLimiter(1000, 5)
	start := time.Now()
	for range 10 {
		if err := r.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 4*time.Millisecond {
		t.Errorf("10 requests took %v; the limit allows no less than 4ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := NewRateLimiter(0.001, 1)
	_ = slow.Wait(context.Background()) // takes the one token
	if err := slow.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("wait on a cancelled context = %v, want context.Canceled", err)
	}
}

// writeStatus answers as the API server does when a request fails.
func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code})
}

// WithHeader's headers reach the server, and the Authorization header stays
// the client's own.
func TestWithHeader(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	c := New(srv.URL, nil)
	ctx := WithHeader(WithHeader(context.Background(), "Grpc-Metadata-Token", "old"), "Grpc-Metadata-Token", "t1")
	if _, err := c.Once(ctx, http.MethodPost, "/x", nil, ""); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h.Get("Grpc-Metadata-Token") != "t1" || len(h.Values("Grpc-Metadata-Token")) != 1 {
		t.Errorf("Grpc-Metadata-Token = %q, want t1 once", h.Values("Grpc-Metadata-Token"))
	}
	if _, err := c.Once(context.Background(), http.MethodPost, "/x", nil, ""); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h.Get("Grpc-Metadata-Token") != "" {
		t.Errorf("a request without WithHeader sent %q", h.Get("Grpc-Metadata-Token"))
	}
}
