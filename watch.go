// Watch: list, then watch from the list's resourceVersion.
//
// This is the pattern behind every Kubernetes controller (client-go calls it
// a reflector). A LIST returns the objects as they are and a resourceVersion,
// a position in the API server's history. A WATCH from that position streams
// every change after it as one JSON event per line: ADDED, MODIFIED, DELETED,
// BOOKMARK (no change, only a newer resourceVersion to resume from) and ERROR.
// The API server ends watches on its own after a while, so the watcher
// resumes from the last resourceVersion it saw; when that position is too old
// to resume from, the server answers 410 Gone ("Expired") and the watcher
// lists again. The 2016 demo did one watch with no list and no resume.
//
// The watcher only reads. Every object it sees goes into one channel, in
// order, for the control loop in loop.go to act on. The operator runs
// four: one for the EtcdClusters users write, and one each for the member
// Pods, Services and PersistentVolumeClaims it made (label-selected, so it
// never sees others). The Pod watch is how it notices within seconds that a
// member died, restarted or turned unready, without polling a single
// healthy cluster; the Pod, Service and PVC watches together keep the cache
// (cache.go) that each pass observes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/backoff"
	"github.com/etcd-operator/etcd-operator/internal/kube"
)

// event is what a watcher hands to the control loop.
type event[T any] struct {
	Type   string // ADDED, MODIFIED or DELETED; LISTING and LISTED around a list (marks)
	Object T
}

// watchEvent is one line of a watch stream.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// errExpired means the resourceVersion to resume from is no longer in the
// API server's history: the watcher must list again.
var errExpired = errors.New("resourceVersion expired (410)")

var errStalled = errors.New("watch stalled")

type watcher[T any] struct {
	client *kube.Client
	path   string // the collection, e.g. /apis/coreos.com/v1/namespaces/default/etcdclusters
	// selector is a label selector: only matching objects are listed and
	// watched (the API server filters; the operator holds nothing else).
	selector string
	// decode turns one object into T and returns its resourceVersion.
	decode func(json.RawMessage) (T, string, error)
	// stall bounds how long a watch may stay silent. The server is asked to
	// end each watch well before that, so only a broken one reaches it.
	stall    time.Duration
	pageSize int
	log      *slog.Logger
	// listed, if set, is called after each complete list.
	listed func()
	// marks: a list is sent between a LISTING and a LISTED event, for a
	// cache that must drop what the list no longer names (cache.go).
	marks bool
}

func clustersPath(namespace string) string {
	if namespace == "" {
		return "/apis/" + apiVersion + "/etcdclusters"
	}
	return "/apis/" + apiVersion + "/namespaces/" + url.PathEscape(namespace) + "/etcdclusters"
}

// run lists and watches until ctx ends, then closes events. It never gives
// up: every failure is logged and retried after a capped, jittered backoff.
func (w *watcher[T]) run(ctx context.Context, events chan<- event[T]) {
	defer close(events)
	retry := backoff.Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second}
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			var err error
			if rv, err = w.list(ctx, events); err != nil {
				if ctx.Err() == nil {
					w.log.Error("list failed; retrying", "path", w.path, "err", err, "hint", listHint(w.resource(), err))
					retry.Wait(ctx)
				}
				continue
			}
		}
		started := time.Now()
		next, n, err := w.watch(ctx, rv, events)
		// A watch that carried events or lasted a while was healthy: go on
		// at once. One that ended at once, again and again, gets a backoff,
		// so that a misbehaving server is never hammered.
		healthy := n > 0 || time.Since(started) > 5*time.Second
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errExpired):
			w.log.Info("watch position expired; listing again", "resourceVersion", rv)
			next = ""
		case err != nil:
			w.log.Warn("watch ended; resuming", "resourceVersion", next, "err", err)
			healthy = false
		default:
			w.log.Debug("watch closed by server; resuming", "resourceVersion", next, "events", n)
		}
		rv = next
		if healthy {
			retry.Reset()
		} else {
			retry.Wait(ctx)
		}
	}
}

// list sends every EtcdCluster as an ADDED event and returns the
// resourceVersion to watch from. It reads in pages so that memory stays
// flat however many clusters there are.
func (w *watcher[T]) list(ctx context.Context, events chan<- event[T]) (string, error) {
	if w.marks && !send(ctx, events, event[T]{Type: "LISTING"}) {
		return "", ctx.Err()
	}
	cont := ""
	for {
		rv, next, err := w.listPage(ctx, cont, events)
		if err != nil {
			return "", err
		}
		if next == "" {
			w.log.Info("listed "+w.resource(), "path", w.path, "resourceVersion", rv)
			if w.marks && !send(ctx, events, event[T]{Type: "LISTED"}) {
				return "", ctx.Err()
			}
			if w.listed != nil {
				w.listed()
			}
			return rv, nil
		}
		cont = next
	}
}

// listPage reads the page that cont names (the first if empty), sends its
// objects as ADDED events, and returns the list's resourceVersion and the
// continue token of the next page ("" after the last).
func (w *watcher[T]) listPage(ctx context.Context, cont string, events chan<- event[T]) (rv, next string, err error) {
	q := url.Values{"limit": {fmt.Sprint(w.pageSize)}}
	if w.selector != "" {
		q.Set("labelSelector", w.selector)
	}
	if cont != "" {
		q.Set("continue", cont)
	}
	body, err := w.client.Do(ctx, http.MethodGet, w.path+"?"+q.Encode(), nil, "")
	if err != nil {
		return "", "", fmt.Errorf("list %s: %w", w.resource(), err)
	}
	var page struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
			Continue        string `json:"continue"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return "", "", fmt.Errorf("list %s: decode: %w", w.resource(), err)
	}
	if page.Metadata.ResourceVersion == "" {
		return "", "", fmt.Errorf("list %s: no metadata.resourceVersion in the answer", w.resource())
	}
	for _, item := range page.Items {
		obj, _, err := w.decode(item)
		if err != nil {
			w.log.Error("skipping undecodable object", "path", w.path, "object", excerpt(item), "err", err)
			continue
		}
		if !send(ctx, events, event[T]{Type: "ADDED", Object: obj}) {
			return "", "", ctx.Err()
		}
	}
	return page.Metadata.ResourceVersion, page.Metadata.Continue, nil
}

// watch streams events from rv until the stream ends. It returns the last
// resourceVersion seen and how many events it read; on errExpired the caller
// must list again.
func (w *watcher[T]) watch(ctx context.Context, rv string, events chan<- event[T]) (string, int, error) {
	// Ask the server to end the watch at a random point before the stall
	// bound (spreading reconnects, as client-go does), so that a silent but
	// healthy watch is never mistaken for a stalled one.
	timeout := w.stall/2 + rand.N(w.stall/4+1)
	q := url.Values{
		"watch":               {"1"},
		"resourceVersion":     {rv},
		"allowWatchBookmarks": {"true"},
		"timeoutSeconds":      {fmt.Sprint(max(1, int(timeout.Seconds())))},
	}
	if w.selector != "" {
		q.Set("labelSelector", w.selector)
	}
	// The stall timer runs from the request on (a server may never even
	// answer), and every byte that arrives pushes it back. If it fires, it
	// cancels the request, which unblocks the read.
	streamCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(w.stall, func() { cancel(errStalled) })
	defer stall.Stop()
	body, err := w.client.Stream(streamCtx, http.MethodGet, w.path+"?"+q.Encode(), nil, "")
	if err != nil {
		var apiErr *kube.Error
		switch {
		case errors.As(err, &apiErr) && apiErr.Code == http.StatusGone:
			return rv, 0, errExpired
		case errors.Is(context.Cause(streamCtx), errStalled):
			return rv, 0, fmt.Errorf("no answer for %s: %w", w.stall, errStalled)
		}
		return rv, 0, fmt.Errorf("watch %s: %w", w.resource(), err)
	}
	defer body.Close()
	stall.Reset(w.stall)
	rv, n, err := w.decodeStream(ctx, &stallReader{r: body, timer: stall, d: w.stall}, rv, events)
	if errors.Is(context.Cause(streamCtx), errStalled) {
		return rv, n, fmt.Errorf("no data for %s: %w", w.stall, errStalled)
	}
	return rv, n, err
}

// decode reads watch events from one stream until it ends. One decoder for
// the whole stream: it buffers what it has read past the current event, so
// a decoder per event (as in 2016) loses data. A stream cut in the middle of
// an event ends with an error, and the caller resumes from the last event
// that arrived whole.
func (w *watcher[T]) decodeStream(ctx context.Context, stream io.Reader, rv string, events chan<- event[T]) (string, int, error) {
	dec := json.NewDecoder(stream)
	n := 0
	for {
		var we watchEvent
		if err := dec.Decode(&we); err != nil {
			switch {
			case ctx.Err() != nil:
				return rv, n, ctx.Err()
			case err == io.EOF:
				return rv, n, nil
			default:
				return rv, n, fmt.Errorf("read watch stream after resourceVersion %s: %w", rv, err)
			}
		}
		n++
		switch we.Type {
		case "ADDED", "MODIFIED", "DELETED":
			obj, objRV, err := w.decode(we.Object)
			if err != nil {
				w.log.Error("skipping undecodable object", "path", w.path, "event", we.Type, "object", excerpt(we.Object), "err", err)
				continue
			}
			if objRV != "" {
				rv = objRV
			}
			if !send(ctx, events, event[T]{Type: we.Type, Object: obj}) {
				return rv, n, ctx.Err()
			}
		case "BOOKMARK":
			// Nothing changed; the server only says where we are now.
			var b struct {
				Metadata objectMeta `json:"metadata"`
			}
			if json.Unmarshal(we.Object, &b) == nil && b.Metadata.ResourceVersion != "" {
				rv = b.Metadata.ResourceVersion
			}
		case "ERROR":
			st := kube.ParseStatus(we.Object)
			if st.Code == http.StatusGone {
				return rv, n, errExpired
			}
			return rv, n, fmt.Errorf("watch error event: %d %s: %s", st.Code, st.Reason, st.Message)
		default:
			w.log.Warn("ignoring watch event of unknown type", "type", we.Type)
		}
	}
}

// listHint says what a newcomer most likely has to do about a failed list.
func listHint(resource string, err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens there: start kubectl proxy, or pass -master"
	case kube.IsStatus(err, http.StatusNotFound) && resource == "etcdclusters":
		return "no EtcdCluster resource: kubectl apply -f examples/crd.yaml"
	case kube.IsStatus(err, http.StatusForbidden):
		return "not allowed to list " + resource + ": see the Role in examples/deploy.yaml"
	}
	return ""
}

// resource names the watched collection in messages: "etcdclusters", "pods".
func (w *watcher[T]) resource() string { return w.path[strings.LastIndexByte(w.path, '/')+1:] }

func decodeCluster(raw json.RawMessage) (*EtcdCluster, error) {
	var ec EtcdCluster
	if err := json.Unmarshal(raw, &ec); err != nil {
		return nil, err
	}
	if ec.Metadata.Name == "" {
		return nil, errors.New("no metadata.name")
	}
	return &ec, nil
}

// clusterRV is the watcher's decode function for EtcdClusters.
func clusterRV(raw json.RawMessage) (*EtcdCluster, string, error) {
	ec, err := decodeCluster(raw)
	if err != nil {
		return nil, "", err
	}
	return ec, ec.Metadata.ResourceVersion, nil
}

func send[T any](ctx context.Context, events chan<- event[T], ev event[T]) bool {
	select {
	case events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// stallReader pushes the stall deadline back whenever bytes arrive.
type stallReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
	}
	return n, err
}
