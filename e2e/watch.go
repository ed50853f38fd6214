package e2e

// The tests' watch: list to learn the collection's resourceVersion, then
// watch from it, the same list-then-watch pattern the operator uses, so
// that nothing between the two is missed. The tests use it to keep every
// status the operator writes, however briefly it stood.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// WatchEvent is one event of a watch stream.
type WatchEvent struct {
	Type   string          // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	Object json.RawMessage // the object as the server sent it
}

// Watch is the e2e module's one watch helper: it lists path (a collection,
// e.g. /api/v1/namespaces/NS/pods, optionally with a query) to learn its
// current resourceVersion, then watches from there as admin. The returned
// channel gets every event after that and is closed when the stream ends
// or ctx is done. When Watch returns, the watch is established: whatever
// happens afterwards is seen.
func (cp *ControlPlane) Watch(ctx context.Context, path string) (<-chan WatchEvent, error) {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	var l struct {
		Metadata struct{ ResourceVersion string }
	}
	if err := cp.Get(path+sep+"limit=1", &l); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "GET", cp.APIServerURL+path+sep+"watch=1&resourceVersion="+l.Metadata.ResourceVersion, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	// No client timeout: a watch lasts as long as ctx.
	resp, err := (&http.Client{Transport: cp.http.Transport}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return nil, fmt.Errorf("watch %s: %s", path, resp.Status)
	}
	ch := make(chan WatchEvent)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var ev WatchEvent
			if dec.Decode(&ev) != nil {
				return
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}
