// Cache: what the watches delivered, kept for the passes to read.
//
// A controller that watches what it owns need not list it again. That is
// how client-go's informers work: a watch keeps a cache current, and a
// pass reads the cache, not the API server. This cache keeps, by owning
// EtcdCluster (its uid), only what decide reads: one podView per member Pod
// and the names of the Services. The control loop fills it from the watch
// events (loop.go); workers read it (observe.go).
//
// A cache lags behind the API server, and above all behind the operator's
// own writes: a Pod just created is in it once its ADDED event has come.
// A pass that decided before then would repeat its step, or take a member
// whose Pod is not in the cache yet for lost. So the cache keeps what
// client-go's controllers call expectations: before a step is sent, what it
// will change (an object to appear, to go, a Pod to run a new image) is
// recorded for its cluster, each watch event that shows it crosses it off,
// and a pass reads the cache only when its cluster expects nothing more and
// both watches have listed since their last (re)list began. A lost event
// must not hang a cluster: after cacheWait the pass lists the cluster's
// objects itself, as it does at once after a step that failed halfway
// (what that step changed is not known).
package main

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// cacheWait bounds how long a pass waits for the watches to show its
// cluster's objects as the operator left them; then it lists them.
const cacheWait = 5 * time.Second

// cachedPod is what the cache keeps of a member Pod.
type cachedPod struct {
	view podView
	// deleteBy is metadata.deletionTimestamp in Unix seconds (0: none):
	// whether a deletion is overdue depends on when a pass looks.
	deleteBy int64
	hasIP    bool // status.podIP is set: etcd can be asked through the proxy
}

// at is the Pod as a pass at now sees it.
func (p cachedPod) at(now time.Time) podView {
	v := p.view
	v.Overdue = p.deleteBy != 0 && now.Sub(time.Unix(p.deleteBy, 0)) > overdue
	return v
}

// runs reports whether etcd in the Pod can be asked.
func (p cachedPod) runs() bool { return p.view.Phase == "Running" && p.hasIP && !p.view.Deleting }

// expectation is a change the operator has sent and the watch has not
// shown yet.
type expectation struct {
	resource, name string // "pods" or "services"
	gone           bool   // deleted: gone, or (a Pod) being deleted
	image          string // a Pod patched to run this image
}

// owned is what the cache holds for one EtcdCluster.
type owned struct {
	pods     []cachedPod
	services []string
	pending  []expectation
	// distrust: a step failed after it may have changed something; the
	// next pass lists instead of reading the cache.
	distrust bool
}

type cache struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	owners  map[uuid.UUID]*owned
	// synced says, for "pods" and "services", that a list is complete and
	// no new one has begun.
	synced map[string]bool
	// deleted holds the uids of clusters deleted lately, with when: a
	// pass under way when its cluster was deleted must not write what it
	// decided, since a new cluster of the same name takes the same paths.
	deleted map[uuid.UUID]time.Time
}

func newCache() *cache {
	return &cache{changed: make(chan struct{}), owners: map[uuid.UUID]*owned{}, synced: map[string]bool{}, deleted: map[uuid.UUID]time.Time{}}
}

// gone reports a cluster deleted while a pass was under way.
func (c *cache) gone(uid uuid.UUID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.deleted[uid]
	return ok
}

// Why a pass cannot read the cache.
var (
	errNotListed = errors.New("the Pod and Service watches have not listed yet")
	errDistrust  = errors.New("a step failed; what it changed is not known")
	errLagging   = errors.New("the watches have not shown the operator's last changes")
)

// listing begins a (re)list of resource: what the cache knew of it goes,
// and until listed the cache is not read.
func (c *cache) listing(resource string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced[resource] = false
	for uid, o := range c.owners {
		if resource == "pods" {
			o.pods = nil
		} else {
			o.services = nil
		}
		c.prune(uid, o)
	}
	c.notify()
}

// listed ends a list: now an object the cache does not hold is gone.
func (c *cache) listed(resource string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced[resource] = true
	for uid, o := range c.owners {
		c.settle(o)
		c.prune(uid, o)
	}
	c.notify()
}

// setPod applies a Pod event for the cluster of uid.
func (c *cache) setPod(typ string, uid uuid.UUID, p cachedPod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.owner(uid)
	i := slices.IndexFunc(o.pods, func(q cachedPod) bool { return q.view.Name == p.view.Name })
	switch {
	case typ == "DELETED" && i >= 0:
		o.pods = slices.Delete(o.pods, i, i+1)
	case typ == "DELETED":
	case i >= 0:
		o.pods[i] = p
	default:
		o.pods = append(o.pods, p)
	}
	c.settle(o)
	c.prune(uid, o)
	c.notify()
}

// setService applies a Service event for the cluster of uid.
func (c *cache) setService(typ string, uid uuid.UUID, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.owner(uid)
	i := slices.Index(o.services, name)
	switch {
	case typ == "DELETED" && i >= 0:
		o.services = slices.Delete(o.services, i, i+1)
	case typ != "DELETED" && i < 0:
		o.services = append(o.services, name)
	}
	c.settle(o)
	c.prune(uid, o)
	c.notify()
}

// forget drops a deleted cluster: the garbage collector removes its objects.
func (c *cache) forget(uid uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.owners, uid)
	now := time.Now()
	for u, at := range c.deleted {
		if now.Sub(at) > 10*time.Minute { // no pass runs that long
			delete(c.deleted, u)
		}
	}
	c.deleted[uid] = now
}

// ready reports whether the cache holds member Pod name of the cluster of
// uid (seen), and whether it is Ready and not being deleted.
func (c *cache) ready(uid uuid.UUID, name string) (ready, seen bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o := c.owners[uid]; o != nil {
		for _, p := range o.pods {
			if p.view.Name == name {
				return p.view.Ready && !p.view.Deleting, true
			}
		}
	}
	return false, false
}

// expect records, before a step is sent, what it changes that the cache
// does not show already.
func (c *cache) expect(uid uuid.UUID, s step) {
	var want []expectation
	for _, o := range s.Create {
		want = append(want, expectation{resource: o.Resource, name: o.Name})
	}
	if s.Delete != "" {
		want = append(want, expectation{resource: s.Delete, name: s.Member, gone: true})
	}
	if s.Action == actUpgrade {
		want = append(want, expectation{resource: "pods", name: s.Member, image: s.Image})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.owner(uid)
	for _, e := range want {
		if !o.shows(e, c.synced[e.resource]) && !slices.Contains(o.pending, e) {
			o.pending = append(o.pending, e)
		}
	}
	c.prune(uid, o)
}

// distrust makes the next pass of the cluster of uid list its objects.
func (c *cache) distrust(uid uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.owner(uid).distrust = true
}

// read returns the Pods and Services of the cluster of uid once the cache
// can be trusted for it, waiting at most wait for the watches; waiting is
// called when it starts to wait. Else it returns why not.
func (c *cache) read(ctx context.Context, uid uuid.UUID, wait time.Duration, waiting func(why error)) ([]cachedPod, []string, error) {
	var timeout <-chan time.Time
	for {
		c.mu.Lock()
		o := cmp.Or(c.owners[uid], &owned{})
		why := c.untrusted(o)
		if why == nil {
			pods, svcs := slices.Clone(o.pods), slices.Clone(o.services)
			c.mu.Unlock()
			slices.SortFunc(pods, func(a, b cachedPod) int { return cmp.Compare(a.view.Name, b.view.Name) })
			slices.Sort(svcs)
			return pods, svcs, nil
		}
		changed := c.changed
		c.mu.Unlock()
		if why == errDistrust {
			return nil, nil, why
		}
		if timeout == nil {
			waiting(why)
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			return nil, nil, why
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// untrusted says why a cluster's part of the cache cannot be read now.
// Callers hold c.mu.
func (c *cache) untrusted(o *owned) error {
	switch {
	case o.distrust:
		return errDistrust
	case !c.synced["pods"] || !c.synced["services"]:
		return errNotListed
	case len(o.pending) > 0:
		return errLagging
	}
	return nil
}

// checked settles the expectations of the cluster of uid against a list of
// its objects that a pass made itself: a change the list shows stays
// expected until the watches show it too; one it does not show (a step
// that failed) is no longer expected.
func (c *cache) checked(uid uuid.UUID, pods []cachedPod, services []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.owners[uid]
	if o == nil {
		return
	}
	list := &owned{pods: pods, services: services}
	o.pending = slices.DeleteFunc(o.pending, func(e expectation) bool {
		return !list.shows(e, true) || o.shows(e, c.synced[e.resource])
	})
	o.distrust = false
	c.prune(uid, o)
}

// settle crosses off what the cache now shows. Callers hold c.mu.
func (c *cache) settle(o *owned) {
	o.pending = slices.DeleteFunc(o.pending, func(e expectation) bool { return o.shows(e, c.synced[e.resource]) })
}

// shows reports whether o shows e done. An object o does not hold is
// gone only if o is complete: its resource was listed.
func (o *owned) shows(e expectation, complete bool) bool {
	if e.resource == "services" {
		has := slices.Contains(o.services, e.name)
		return has && !e.gone || !has && e.gone && complete
	}
	i := slices.IndexFunc(o.pods, func(p cachedPod) bool { return p.view.Name == e.name })
	switch {
	case i < 0:
		// A Pod gone shows a deletion, and ends a wait for its new image.
		return complete && (e.gone || e.image != "")
	case e.gone:
		return o.pods[i].view.Deleting
	case e.image != "":
		return o.pods[i].view.Image == e.image
	}
	return true
}

// owner returns the entry of the cluster of uid, made if missing. Callers
// hold c.mu.
func (c *cache) owner(uid uuid.UUID) *owned {
	o := c.owners[uid]
	if o == nil {
		o = &owned{}
		c.owners[uid] = o
	}
	return o
}

// prune drops an entry that holds nothing. Callers hold c.mu.
func (c *cache) prune(uid uuid.UUID, o *owned) {
	if len(o.pods) == 0 && len(o.services) == 0 && len(o.pending) == 0 && !o.distrust {
		delete(c.owners, uid)
	}
}

// notify wakes the passes waiting in read. Callers hold c.mu.
func (c *cache) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}
