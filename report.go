// Report: telling users what the operator did, through the API itself.
//
// An operator's logs are read by whoever runs it; its users read the objects
// they wrote. Two Kubernetes mechanisms carry the news to them:
//
//   - The status subresource. The CRD declares `subresources: {status: {}}`,
//     which splits the object in two: users write spec, the operator writes
//     status (at .../etcdclusters/NAME/status), and neither can overwrite the
//     other. status.observedGeneration records which spec (metadata.generation
//     counts spec changes) the status describes, so a restarted operator can
//     tell "done" from "to do" without a single request. `kubectl get`
//     shows status.phase; `kubectl describe` shows status.message.
//   - Events: small core/v1 objects pointing at the EtcdCluster
//     (involvedObject) that `kubectl describe` lists under the object and
//     `kubectl get events` shows for the namespace. They are best-effort, as
//     in client-go: posted in the background at a modest rate of their own,
//     after the work they describe (a burst of new clusters gets its objects
//     first), dropped rather than let them slow the real work down.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

// Event types.
const (
	eventNormal  = "Normal"
	eventWarning = "Warning"
)

// patchStatus is the one writer of the status subresource: a JSON merge
// patch, which needs no resourceVersion and touches only the fields it
// names. The passes write a clusterStatus, the backup schedule its own
// two fields (backupStatus), and neither overwrites the other's.
func (c *controller) patchStatus(ctx context.Context, ec *EtcdCluster, fields any) error {
	path := clustersPath(ec.Metadata.Namespace) + "/" + url.PathEscape(ec.Metadata.Name) + "/status"
	body := mustJSON(map[string]any{"status": fields})
	if _, err := c.client.Do(ctx, http.MethodPatch, path, body, "application/merge-patch+json"); err != nil {
		return fmt.Errorf("update status of %s: %w", ec.key(), err)
	}
	return nil
}

// recorder posts Events from one background goroutine.
type recorder struct {
	client   *kube.Client
	log      *slog.Logger
	queue    chan pendingEvent
	limit    *kube.RateLimiter
	instance string
	dropped  atomic.Int64
	// patience bounds how long an Event waits for the work it describes
	// to be over.
	patience time.Duration
}

type pendingEvent struct {
	namespace string
	body      []byte
	at        time.Time
}

func newRecorder(c *kube.Client, log *slog.Logger) *recorder {
	host, _ := os.Hostname()
	// 10 Events a second after a burst of 25: a burst of clusters gets its
	// objects first and its Events soon after.
	return &recorder{client: c, log: log, queue: make(chan pendingEvent, 1024), limit: kube.NewRateLimiter(10, 25), instance: host, patience: time.Minute}
}

// record queues an Event about ec. It never blocks: when the queue is full
// the Event is dropped (the log still has what happened), and the first
// drop and every hundredth after it are logged with the count so far.
func (r *recorder) record(ec *EtcdCluster, typ, reason, message string) {
	now := time.Now().UTC().Format(time.RFC3339)
	body := mustJSON(map[string]any{
		"apiVersion": "v1",
		"kind":       "Event",
		// The base name is a valid label however long the cluster's name;
		// the server appends five random characters.
		"metadata": map[string]any{"generateName": baseName(ec.Metadata.Name) + ".", "namespace": ec.Metadata.Namespace},
		"involvedObject": map[string]any{
			"apiVersion": apiVersion, "kind": kind,
			"name": ec.Metadata.Name, "namespace": ec.Metadata.Namespace,
			"uid": ec.Metadata.UID, "resourceVersion": ec.Metadata.ResourceVersion,
		},
		"type": typ, "reason": reason, "message": message,
		"source":             map[string]any{"component": "etcd-operator"},
		"reportingComponent": "etcd-operator",
		"reportingInstance":  r.instance,
		"firstTimestamp":     now, "lastTimestamp": now, "count": 1,
	})
	select {
	case r.queue <- pendingEvent{namespace: ec.Metadata.Namespace, body: body, at: time.Now()}:
	default:
		if n := r.dropped.Add(1); n == 1 || n%100 == 0 {
			r.log.Warn("event queue full; dropping events", "cluster", ec.key(), "reason", reason, "droppedSoFar", n)
		}
	}
}

// run posts the queued Events, each once idle is closed (the work queue
// has nothing waiting or in hand) or r.patience after it was recorded.
// Events describe the work and cost the API server as much as the work's
// own requests: a burst of clusters gets its objects first. The price: an
// operator stopped during a burst loses the Events still waiting (the log
// has what they said).
func (r *recorder) run(ctx context.Context, idle func() <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.queue:
			if idle != nil && !r.await(ctx, idle(), ev.at.Add(r.patience)) {
				return
			}
			if r.limit.Wait(ctx) != nil {
				return
			}
			path := "/api/v1/namespaces/" + url.PathEscape(ev.namespace) + "/events"
			if _, err := r.client.Do(ctx, http.MethodPost, path, ev.body, "application/json"); err != nil && ctx.Err() == nil {
				r.log.Warn("posting event failed", "err", err)
			}
		}
	}
}

// await waits for idle to close or for the deadline, and reports false
// if ctx ended first.
func (r *recorder) await(ctx context.Context, idle <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}
