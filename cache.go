// Cache: what the watches said of the objects the operator owns.
//
// A controller that watches what it owns need not list it again: the
// watch's events keep a copy current, and a pass reads that copy (client-go
// calls it an informer's store; this one keeps only the few fields decide
// reads, not whole objects). Two rules make a decision from that copy as
// safe as one from a LIST:
//
//   - Nothing is decided before the Pod, Service and PVC watches have
//     each listed once. After a restart the cache starts empty, and an empty
//     cache would look like a cluster without members.
//   - A pass never decides from a cache older than the operator's own last
//     write to that cluster. Each create, delete, image change or larger
//     claim records what the watch must show next (awaitWrite; client-go's
//     controllers call these expectations); a pass waits until the watch
//     has shown it, and lists instead when it has not within cacheLag.
//
// The cache is written by the control loop alone (loop.go), in the order
// the events came, and read by the workers.
package main

import (
	"context"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// cacheLag bounds how long a pass waits for the watches to show the
// operator's own writes before it lists instead.
const cacheLag = 10 * time.Second

// cachedPod is what the cache keeps of one member Pod.
type cachedPod struct {
	podView
	OwnerUID string
	// DeletionEnd is when the Pod's grace period ends, if it is deleting:
	// Overdue is computed from it when a pass looks.
	DeletionEnd time.Time
	// HasIP: the Pod has an address, so its etcd can be asked.
	HasIP bool
	epoch uint32
}

// cachedClaim is what the cache keeps of one member's PVC.
type cachedClaim struct {
	claimView
	OwnerUID string
	epoch    uint32
}

// cachedService is what the cache keeps of one Service.
type cachedService struct {
	OwnerUID string
	epoch    uint32
}

// owned are the objects of one EtcdCluster (by name: the uid tells a
// deleted cluster's leftovers from a new one of the same name).
type owned struct {
	pods   map[string]*cachedPod
	svcs   map[string]*cachedService
	claims map[string]*cachedClaim
	writes map[string]pendingWrite // awaited, by "RESOURCE/NAME"
}

// pendingWrite is what the watch must show of an object after the
// operator's own write: present, deleting or gone, running an image, or
// asking for a size.
type pendingWrite struct {
	gone  bool
	uid   string // the owner of the object created or changed
	image string // of a Pod
	size  string // of a PVC
}

// ownedEvent is what the Pod, Service and PVC watches pass on: Pod or
// Claim is set for those, neither for a Service. Two extra types mark a list: LISTING before its first object and
// LISTED after its last, so that objects deleted while no watch ran are
// dropped (as a reflector's Replace does).
type ownedEvent struct {
	Namespace, Name, Cluster, OwnerUID string
	Pod                                *cachedPod
	Claim                              *cachedClaim
}

type cache struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	// listed holds the resources ("pods", "services",
	// "persistentvolumeclaims") listed at least once: the cache is synced
	// when all are.
	listed   map[string]bool
	epoch    map[string]uint32 // by resource: the current list's number
	clusters map[string]*owned // by "NS/CLUSTER"
}

func newCache() *cache {
	return &cache{changed: make(chan struct{}), listed: map[string]bool{}, epoch: map[string]uint32{}, clusters: map[string]*owned{}}
}

// synced reports whether each watch has listed once.
func (c *cache) synced() bool {
	return c.listed["pods"] && c.listed["services"] && c.listed["persistentvolumeclaims"]
}

func (c *cache) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *cache) ownedBy(key string) *owned {
	o := c.clusters[key]
	if o == nil {
		o = &owned{pods: map[string]*cachedPod{}, svcs: map[string]*cachedService{}, claims: map[string]*cachedClaim{}}
		c.clusters[key] = o
	}
	return o
}

// apply records one event of resource ("pods", "services" or
// "persistentvolumeclaims"), and reports
// whether it showed a write of the operator's own that a pass awaited.
func (c *cache) apply(resource string, ev event[ownedEvent]) (awaited bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.notify()
	if ev.Type == "LISTING" || ev.Type == "LISTED" {
		c.mark(resource, ev.Type)
		return false
	}
	e := ev.Object
	if e.Cluster == "" {
		return false
	}
	key := e.Namespace + "/" + e.Cluster
	o := c.ownedBy(key)
	o.store(resource, ev.Type == "DELETED", e, c.epoch[resource])
	if x, ok := o.writes[resource+"/"+e.Name]; ok && c.shows(o, resource, e.Name, x) {
		delete(o.writes, resource+"/"+e.Name)
		awaited = true
	}
	c.forgetEmpty(key, o)
	return awaited
}

// mark begins (LISTING) or ends (LISTED) a list of resource.
func (c *cache) mark(resource, typ string) {
	if typ == "LISTING" {
		c.epoch[resource]++
		return
	}
	c.sweep(resource)
	first := !c.synced()
	c.listed[resource] = true
	if first && c.synced() {
		// The first lists are in, and their pages are garbage: hand the
		// memory back now (not under the lock). A restart over settled
		// clusters runs no burst of passes that would (queue.go).
		go debug.FreeOSMemory()
	}
}

// store keeps, or drops when deleted, one object of resource, seen by
// the list or watch of the given epoch.
func (o *owned) store(resource string, deleted bool, e ownedEvent, epoch uint32) {
	switch {
	case deleted && resource == "pods":
		delete(o.pods, e.Name)
	case deleted && resource == "persistentvolumeclaims":
		delete(o.claims, e.Name)
	case deleted:
		delete(o.svcs, e.Name)
	case resource == "persistentvolumeclaims":
		cl := e.Claim
		cl.epoch = epoch
		o.claims[e.Name] = cl
	case resource == "pods":
		p := e.Pod
		p.epoch = epoch
		// Pods of one cluster share most strings: keep one copy.
		for _, q := range o.pods {
			p.OwnerUID = same(p.OwnerUID, q.OwnerUID)
			p.Image = same(p.Image, q.Image)
			p.InitialCluster = same(p.InitialCluster, q.InitialCluster)
		}
		o.pods[e.Name] = p
	default:
		uid := e.OwnerUID
		for _, s := range o.svcs {
			uid = same(uid, s.OwnerUID)
		}
		o.svcs[e.Name] = &cachedService{OwnerUID: uid, epoch: epoch}
	}
}

// sweep drops the objects of resource that the list just finished did not
// name: they were deleted while no watch ran.
func (c *cache) sweep(resource string) {
	epoch := c.epoch[resource]
	for key, o := range c.clusters {
		for name, p := range o.pods {
			if resource == "pods" && p.epoch < epoch {
				delete(o.pods, name)
			}
		}
		for name, s := range o.svcs {
			if resource == "services" && s.epoch < epoch {
				delete(o.svcs, name)
			}
		}
		for name, cl := range o.claims {
			if resource == "persistentvolumeclaims" && cl.epoch < epoch {
				delete(o.claims, name)
			}
		}
		for k, x := range o.writes {
			res, name := splitKey(k)
			if res == resource && c.shows(o, res, name, x) {
				delete(o.writes, k)
			}
		}
		c.forgetEmpty(key, o)
	}
}

func (c *cache) forgetEmpty(key string, o *owned) {
	if len(o.pods) == 0 && len(o.svcs) == 0 && len(o.claims) == 0 && len(o.writes) == 0 {
		delete(c.clusters, key)
	}
}

// shows reports whether the cache shows what an awaited write must.
func (c *cache) shows(o *owned, resource, name string, x pendingWrite) bool {
	switch resource {
	case "services":
		s := o.svcs[name]
		if x.gone {
			return s == nil
		}
		return s != nil && s.OwnerUID == x.uid
	case "persistentvolumeclaims":
		cl := o.claims[name]
		if x.gone {
			return cl == nil || cl.Deleting
		}
		return cl != nil && cl.OwnerUID == x.uid && (x.size == "" || sameSize(cl.Size, x.size))
	}
	p := o.pods[name]
	if x.gone {
		return p == nil || p.Deleting
	}
	return p != nil && p.OwnerUID == x.uid && (x.image == "" || p.Image == x.image)
}

// sameSize reports two quantities of the same size: the API server
// answers with its canonical form (10240Mi comes back as 10Gi).
func sameSize(a, b string) bool {
	m, okA := bytesOf(a)
	n, okB := bytesOf(b)
	return a == b || okA && okB && m == n
}

// awaitWrite records the operator's own write: the watch must show it before
// the cluster's next pass decides.
func (c *cache) awaitWrite(ns, cluster, resource, name string, x pendingWrite) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.ownedBy(ns + "/" + cluster)
	if c.shows(o, resource, name, x) {
		delete(o.writes, resource+"/"+name)
		c.forgetEmpty(ns+"/"+cluster, o)
		return
	}
	if o.writes == nil {
		o.writes = map[string]pendingWrite{}
	}
	o.writes[resource+"/"+name] = x
}

// objects returns the cluster's Pods and Services as the watches showed
// them, once the cache is synced and shows the operator's own writes. It
// waits for that at most cacheLag (calling waiting once, if it must wait);
// ok is false if the wait was in vain, and the caller lists instead.
func (c *cache) objects(ctx context.Context, ns, cluster, uid string, waiting func()) (pods []cachedPod, svcs []string, claims []claimView, ok bool) {
	deadline := time.NewTimer(cacheLag)
	defer deadline.Stop()
	key := ns + "/" + cluster
	for {
		c.mu.Lock()
		o := c.clusters[key]
		if c.synced() && (o == nil || len(o.writes) == 0) {
			if o != nil {
				for _, p := range o.pods {
					if p.OwnerUID == uid {
						pods = append(pods, *p)
					}
				}
				for name, s := range o.svcs {
					if s.OwnerUID == uid {
						svcs = append(svcs, name)
					}
				}
				for _, cl := range o.claims {
					if cl.OwnerUID == uid {
						claims = append(claims, cl.claimView)
					}
				}
			}
			c.mu.Unlock()
			return pods, svcs, claims, true
		}
		changed := c.changed
		c.mu.Unlock()
		if waiting != nil {
			waiting()
			waiting = nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, nil, nil, false
		case <-deadline.C:
			return nil, nil, nil, false
		}
	}
}

// forgetWrites drops the awaited writes of a cluster that a LIST has just
// answered: the list is newer than every write the pass made before it.
func (c *cache) forgetWrites(ns, cluster string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o := c.clusters[ns+"/"+cluster]; o != nil {
		o.writes = nil
		c.forgetEmpty(ns+"/"+cluster, o)
	}
}

// ready reports whether Pod name of a cluster is Ready (and not being
// deleted), and whether the cache holds it at all. A Pod the operator has
// just created counts as held, not ready, before the watch shows it: the
// status that lists it can come back before the Pod's own event.
func (c *cache) ready(ns, cluster, name string) (ready, seen bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.clusters[ns+"/"+cluster]
	if o == nil {
		return false, false
	}
	if x, ok := o.writes["pods/"+name]; ok && !x.gone {
		return false, true
	}
	p, ok := o.pods[name]
	return ok && p.Ready && !p.Deleting, ok
}

// same returns b if it equals a, so that equal strings share one copy.
func same(a, b string) string {
	if a == b {
		return b
	}
	return a
}

func splitKey(k string) (resource, name string) {
	resource, name, _ = strings.Cut(k, "/")
	return resource, name
}
