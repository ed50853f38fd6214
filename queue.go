// Queue: the work queue between the control loop and its workers.
//
// Every Kubernetes controller puts one between its watches and its work
// (client-go's workqueue, used by k8s.io/sample-controller). Events only
// say which cluster to look at; the queue holds each cluster once however
// many events name it, hands it to one worker at a time, and keeps the
// newest event of a cluster that is being worked on for when that worker
// is done. A failure is retried after a delay that doubles with each
// failure of that cluster, so one broken cluster cannot flood the API
// server and the others are not held up.
package main

import (
	"runtime/debug"
	"sync"
	"time"

	"github.com/google/uuid"
)

// item is one unit of work: a cluster to look at. refresh asks the worker
// to read the cluster again first: the event that named it may be old (a
// retry minutes after a failure, a Pod's change).
type item struct {
	cluster *EtcdCluster
	refresh bool
}

type queue struct {
	mu      sync.Mutex
	wake    *sync.Cond
	order   []string        // keys waiting for a worker, oldest first
	waiting map[string]item // the newest item of each key in order, or of a busy key
	busy    map[string]bool // keys a worker holds
	stopped bool

	failures map[string]int
	// handled is the generation (metadata.generation counts spec changes)
	// last handled, by object uid. The watch delivers the operator's own
	// status writes back as events, often when the work is already done;
	// acting on such an event would redo the work. Events of a handled
	// generation are dropped; a failure is retried by its own timer. Keys
	// and values hold no pointers, so 2,000 clusters cost a few dozen KiB.
	handled map[uuid.UUID]int64
	// since counts the items done since memory was last handed back.
	since int
	// waiters are closed once no cluster waits or is being worked on.
	waiters []chan struct{}
}

// burstSize is how many items make a burst worth handing memory back after.
const burstSize = 100

func newQueue() *queue {
	q := &queue{waiting: map[string]item{}, busy: map[string]bool{}, failures: map[string]int{}, handled: map[uuid.UUID]int64{}}
	q.wake = sync.NewCond(&q.mu)
	return q
}

// add queues a cluster. An item of a generation already handled is
// dropped, unless it asks for a fresh read. A cluster already waiting or
// being worked on is queued once: a newer generation or a fresh read
// replaces the item that waits, and keeps its ask for a fresh read;
// another event of the same generation changes nothing (once that
// generation is handled it would be dropped).
func (q *queue) add(it item) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := it.cluster.key()
	if q.stopped || !it.refresh && q.alreadyHandled(it.cluster) {
		return
	}
	old, queued := q.waiting[k]
	if queued && !it.refresh && it.cluster.Metadata.Generation == old.cluster.Metadata.Generation {
		return
	}
	if !queued && !q.busy[k] {
		q.order = append(q.order, k)
		q.wake.Signal()
	}
	it.refresh = it.refresh || queued && old.refresh
	q.waiting[k] = it
}

// addAfter queues a cluster after d: to look again at something no event
// will announce (a learner catching up with the leader).
func (q *queue) addAfter(it item, d time.Duration) {
	time.AfterFunc(d, func() { q.add(it) })
}

// retryDelay is how long a cluster waits after failures in a row: 1 s,
// 2 s, 4 s, ... up to 5 minutes, as client-go's per-item backoff.
func retryDelay(failures int) time.Duration {
	return min(time.Second<<min(failures-1, 9), 5*time.Minute)
}

// get blocks until a cluster is waiting and no worker holds it, and hands
// it to the caller, who must call done. It returns false once the queue
// is shut down and drained.
func (q *queue) get() (item, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.stopped {
		q.wake.Wait()
	}
	if len(q.order) == 0 {
		return item{}, false
	}
	k := q.order[0]
	q.order = q.order[1:]
	it := q.waiting[k]
	delete(q.waiting, k)
	q.busy[k] = true
	return it, true
}

// done ends the work on it. ec is the object the work acted on (nil if
// the cluster is gone) and err how it ended. It returns the cluster's
// failures in a row, and whether it was queued again meanwhile: then the
// worker schedules no retry or second look of its own, since the newer
// item comes first.
func (q *queue) done(it item, ec *EtcdCluster, err error) (failures int, requeued bool) {
	q.mu.Lock()
	k := it.cluster.key()
	delete(q.busy, k)
	if ec != nil {
		q.handled[uidOf(ec)] = ec.Metadata.Generation
	} else {
		delete(q.handled, uidOf(it.cluster))
	}
	if err != nil {
		q.failures[k]++
	} else {
		delete(q.failures, k)
	}
	failures = q.failures[k]
	next, queued := q.waiting[k]
	if queued && !next.refresh && q.alreadyHandled(next.cluster) {
		delete(q.waiting, k)
		queued = false
	}
	if queued {
		q.order = append(q.order, k)
		q.wake.Signal()
	}
	q.since++
	idle := len(q.busy) == 0 && len(q.order) == 0
	if idle {
		q.wakeWaiters()
	}
	release := idle && q.since >= burstSize
	if release {
		q.since = 0
	}
	q.mu.Unlock()
	if release {
		// A burst (the list after a start, many clusters applied at once)
		// is over and nothing of it is kept: hand the memory back now, not
		// minutes later at an idle process's next forced collection.
		debug.FreeOSMemory()
	}
	return failures, queued
}

// forget drops what the queue knows of a deleted cluster.
func (q *queue) forget(ec *EtcdCluster) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := ec.key()
	if _, queued := q.waiting[k]; queued && !q.busy[k] {
		for i, o := range q.order {
			if o == k {
				q.order = append(q.order[:i], q.order[i+1:]...)
				break
			}
		}
	}
	delete(q.waiting, k)
	delete(q.failures, k)
	delete(q.handled, uidOf(ec))
}

// shutdown takes no more items; the workers finish those queued (with the
// operator stopping, their requests end at once), then get returns false.
func (q *queue) shutdown() {
	q.mu.Lock()
	q.stopped = true
	q.wake.Broadcast()
	q.wakeWaiters()
	q.mu.Unlock()
}

// idle returns a channel that is closed once no cluster waits for a
// worker or is being worked on: at once if none is.
func (q *queue) idle() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	ch := make(chan struct{})
	if q.stopped || len(q.busy) == 0 && len(q.order) == 0 {
		close(ch)
		return ch
	}
	q.waiters = append(q.waiters, ch)
	return ch
}

// wakeWaiters closes the channels idle handed out. Callers hold q.mu.
func (q *queue) wakeWaiters() {
	for _, ch := range q.waiters {
		close(ch)
	}
	q.waiters = nil
}

// alreadyHandled reports whether ec's generation was handled. Callers hold q.mu.
func (q *queue) alreadyHandled(ec *EtcdCluster) bool {
	gen, ok := q.handled[uidOf(ec)]
	return ok && gen == ec.Metadata.Generation
}

// uidOf is the object's uid as 16 bytes (any string maps to some UUID).
func uidOf(ec *EtcdCluster) uuid.UUID {
	if u, err := uuid.Parse(ec.Metadata.UID); err == nil {
		return u
	}
	return uuid.NewSHA1(uuid.Nil, []byte(ec.Metadata.UID))
}
