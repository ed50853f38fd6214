package e2e

// What the operator sends, counted: a reverse proxy between the operator
// and kubectl proxy records every request, and countRequests sorts them
// into reads, list pages, watches, writes and Events. This is how the
// benchmark and the restart tests show that a restart or a healthy cluster
// costs the API server nothing, and when the operator has gone idle.

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

// requestCount sorts what the operator sent through the counting proxy.
type requestCount struct {
	All, Lists, Watches, Reads, Writes, Events int
}

// collections are the resources the operator lists.
var collections = map[string]bool{"pods": true, "services": true, "etcdclusters": true, "persistentvolumeclaims": true}

func countRequests(reqs []string) requestCount {
	var c requestCount
	for _, q := range reqs {
		c.All++
		switch {
		case strings.HasPrefix(q, "GET ") && strings.Contains(q, "watch="):
			c.Watches++
		case strings.HasPrefix(q, "GET ") && collections[path.Base(strings.SplitN(q, "?", 2)[0])]:
			c.Lists++
			c.Reads++
		case strings.HasPrefix(q, "GET "):
			c.Reads++
		case strings.HasPrefix(q, "POST ") && strings.Contains(q, "/proxy/"):
			c.Reads++ // a question to an etcd member
		default:
			c.Writes++
			if strings.Contains(q, "/events?") {
				c.Events++
			}
		}
	}
	return c
}

func (c requestCount) String() string {
	return fmt.Sprintf("%d requests (%d reads, %d list pages, %d watches, %d writes, %d of them Events)", c.All, c.Reads, c.Lists, c.Watches, c.Writes, c.Events)
}

// counter is a reverse proxy between the operator and kubectl proxy that
// counts the requests going through it.
type counter struct {
	srv      *http.Server
	url      string
	mu       sync.Mutex
	requests []string // "METHOD path?query"
	last     time.Time
}

func newCounter(target string) (*counter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &counter{url: "http://" + l.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // watches stream
	// A watch cut when an operator stops is no news.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.requests = append(c.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		c.last = time.Now()
		c.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go c.srv.Serve(l)
	return c, nil
}

func (c *counter) reset() {
	c.mu.Lock()
	c.requests = nil
	c.mu.Unlock()
}

func (c *counter) snapshot() ([]string, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.requests), c.last
}

// waitIdle waits until the operator has sent nothing new for two seconds.
func waitIdle(c *counter, timeout time.Duration) error {
	return Eventually(timeout, "the operator to go idle", func() (bool, error) {
		reqs, last := c.snapshot()
		return len(reqs) > 0 && time.Since(last) > 2*time.Second, nil
	})
}
