package e2e

// HTTP with JSON bodies, for the requests that go neither through the
// admin client (ControlPlane.Do) nor kubectl: to etcd members by Pod IP,
// to etcd's v3 JSON gateway, through kubectl proxy. The idea: the
// Kubernetes API and etcd both speak plain HTTP and JSON, so the tests,
// like the operator, need no client library.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// jsonClient is for one-off requests to etcd members and the like; a
// member that hangs fails the request instead of the test's deadline.
var jsonClient = &http.Client{Timeout: 10 * time.Second}

// DoJSON is the e2e module's one HTTP/JSON helper: it sends body (nil for
// none; []byte as it is; anything else as JSON) with method to url through
// c (nil: a client with a 10 s timeout; a PATCH as a JSON merge patch), fails unless the answer's status
// is want, and decodes the answer into v when v is not nil.
func DoJSON(c *http.Client, method, url string, body any, want int, v any) error {
	if c == nil {
		c = jsonClient
	}
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, url, err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return err
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
		if method == "PATCH" {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d: %.500s", method, url, resp.StatusCode, b)
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s %s: decode: %w", method, url, err)
	}
	return nil
}
