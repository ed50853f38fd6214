// Loop: events in, work out.
//
// The control loop reads the three watches (EtcdClusters, member Pods,
// Services) and turns events into work for the queue; it never talks to
// the API server itself. It is also the one writer of the cache of Pods
// and Services the passes read (cache.go), as an informer's event handler
// is. It is level-based, not edge-based: an event means "look at this
// cluster", never "create a cluster", so the replay of every object after a
// restart or a relist is harmless. Two things keep it cheap:
//
//   - A cluster whose status already describes its spec, with nothing under
//     way, needs no pass when it is replayed (settled).
//   - A Pod event leads to a pass only when it tells something the
//     cluster's status does not say (podNews): a member called ready whose
//     Pod is not, or the other way round. The loop keeps one short string
//     per cluster for that, and reads the Pods from the cache.
//
// The operator's own status writes come back as MODIFIED events; the queue
// drops those of a generation it has handled (queue.go).
package main

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

type controller struct {
	client *client
	log    *slog.Logger
	image  string
	events *recorder
	// cache holds the member Pods and Services the watches delivered
	// (cache.go); a pass waits at most cacheWait for it to be current.
	cache     *cache
	cacheWait time.Duration
	// says is, by cluster key, the cluster's uid and what its status says
	// of its member Pods (" +ready -unready"). podsListed: the Pods' list
	// is complete, so a Pod the cache does not hold is gone. Both belong
	// to the loop's goroutine.
	says       map[string]statusSays
	podsListed bool
	// backups runs the backup schedule of each cluster with spec.backup
	// (backupschedule.go), beside the passes.
	backups *backups
}

type statusSays struct {
	uid     uuid.UUID
	members string
}

// run is the control loop. Pod events are read only once the first list
// of clusters is in, so that each Pod is compared with its cluster's
// status instead of sending every Pod's cluster to work. It returns when
// the watchers have closed their channels and the workers have finished.
func (c *controller) run(ctx context.Context, clusters <-chan event[*EtcdCluster], pods <-chan event[podEvent], services <-chan event[svcEvent], workers int) {
	q := newQueue()
	c.says = map[string]statusSays{}
	c.backups = newBackups(ctx, c)
	defer c.backups.stop()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { c.work(ctx, q) })
	}
	var podsIn <-chan event[podEvent]
	for clusters != nil || podsIn != nil || services != nil {
		select {
		case ev, ok := <-clusters:
			switch {
			case !ok:
				clusters = nil
			case ev.Type == evListed:
				podsIn = pods // the first list of clusters is in
			case ev.Type != evListing:
				c.clusterEvent(q, ev)
			}
		case ev, ok := <-podsIn:
			if !ok {
				podsIn, pods = nil, nil
				continue
			}
			c.podEvent(q, ev)
		case ev, ok := <-services:
			if !ok {
				services = nil
				continue
			}
			c.serviceEvent(q, ev)
		}
	}
	q.shutdown()
	wg.Wait()
}

// clusterEvent queues a cluster that was added or changed, and forgets a
// deleted one: its objects carry ownerReferences to it, and Kubernetes'
// garbage collector deletes them.
func (c *controller) clusterEvent(q *queue, ev event[*EtcdCluster]) {
	ec := ev.Object
	if ev.Type == "DELETED" {
		c.backups.remove(ec)
		delete(c.says, ec.key())
		c.cache.forget(uidOf(ec))
		q.forget(ec)
		c.log.Info("cluster deleted; the garbage collector removes its objects", "cluster", ec.key())
		return
	}
	c.backups.update(ec)
	says := statusSays{uid: uidOf(ec), members: statusMembers(ec.status())}
	c.says[ec.key()] = says
	// A settled status that disagrees with the Pods (a Pod changed while
	// the status write was on its way) gets a pass with a fresh read.
	refresh := settled(ec) && disagrees(says.members, c.readyOf(says.uid), c.podsListed)
	q.add(item{cluster: ec, refresh: refresh})
}

// podEvent puts a member Pod in the cache and queues its cluster when the
// Pod's readiness is news to the cluster's status. A list of Pods replaces
// what the cache knew; once it is complete, clusters whose status calls a
// Pod ready that is not (or gone) are looked at.
func (c *controller) podEvent(q *queue, ev event[podEvent]) {
	p := ev.Object
	switch {
	case ev.Type == evListing:
		c.podsListed = false
		c.cache.listing("pods")
		return
	case ev.Type == evListed:
		c.podsListed = true
		c.cache.listed("pods")
		c.allPodsListed(q)
		q.listed()
		return
	case p.Cluster == "":
		return
	}
	c.cache.setPod(ev.Type, p.Owner, p.Pod)
	if !podNews(c.says[p.Namespace+"/"+p.Cluster].members, ev.Type, p.name(), p.ready()) {
		return
	}
	c.log.Debug("member Pod changed; looking at its cluster", "pod", p.Namespace+"/"+p.name(), "event", ev.Type, "ready", p.ready())
	q.add(item{cluster: &EtcdCluster{Metadata: objectMeta{Namespace: p.Namespace, Name: p.Cluster}}, refresh: true})
}

// serviceEvent puts a member or client Service in the cache. A Service
// tells nothing a status says: it starts no pass.
func (c *controller) serviceEvent(q *queue, ev event[svcEvent]) {
	switch s := ev.Object; {
	case ev.Type == evListing:
		c.cache.listing("services")
	case ev.Type == evListed:
		c.cache.listed("services")
		q.listed()
	case s.Cluster != "":
		c.cache.setService(ev.Type, s.Owner, s.Name)
	}
}

// allPodsListed runs once every member Pod that exists is known: a cluster
// whose status calls a Pod ready that is not, or lists one that is gone,
// is looked at.
func (c *controller) allPodsListed(q *queue) {
	for key, says := range c.says {
		ns, name, _ := strings.Cut(key, "/")
		if disagrees(says.members, c.readyOf(says.uid), true) {
			q.add(item{cluster: &EtcdCluster{Metadata: objectMeta{Namespace: ns, Name: name}}, refresh: true})
		}
	}
}

// readyOf looks up the member Pods of the cluster of uid in the cache.
func (c *controller) readyOf(uid uuid.UUID) func(name string) (ready, seen bool) {
	return func(name string) (bool, bool) { return c.cache.ready(uid, name) }
}

// statusMembers is what a status says of the member Pods: " +ready -unready".
func statusMembers(st clusterStatus) string {
	var b strings.Builder
	for _, m := range st.Members {
		b.WriteString(map[bool]string{true: " +", false: " -"}[m.Ready])
		b.WriteString(m.Name)
	}
	return b.String()
}

// podNews reports whether an event of member Pod name tells something the
// status (its statusMembers, expect) does not say. A Pod the status does not list counts
// as "not ready" there: a new Pod that is not ready yet tells nothing new
// (the pass that created it wrote the status), so a burst of new clusters
// costs no pass per Pod.
func podNews(expect, typ, name string, ready bool) bool {
	exp := expect + " "
	listed := strings.Contains(exp, " +"+name+" ") || strings.Contains(exp, " -"+name+" ")
	if typ == "DELETED" {
		return listed
	}
	mark := map[bool]string{true: "+", false: "-"}[ready]
	return !strings.Contains(exp, " "+mark+name+" ") && (listed || ready)
}

// disagrees reports whether any member in a status's statusMembers is
// called ready while its Pod is not, or the other way round, or has no Pod
// at all: a Pod deleted while the operator was down sent it no event, and
// a status written from a cache that had not seen the deletion yet still
// lists it. Until every Pod has been listed (allSeen), only Pods seen so
// far count.
func disagrees(expect string, ready func(name string) (ready, seen bool), allSeen bool) bool {
	for _, m := range strings.Fields(expect) {
		r, seen := ready(m[1:])
		if seen && r != (m[0] == '+') || !seen && allSeen {
			return true
		}
	}
	return false
}

// settled reports a status that needs no pass when its cluster is replayed
// (after a restart, a relist, or the operator's own status write): it
// describes the current spec and no step is under way, or the only thing
// awaited is its Pods starting, which the Pod watch reports.
func settled(ec *EtcdCluster) bool {
	st := ec.status()
	p, ok := st.condition(condProgressing)
	return st.ObservedGeneration == ec.Metadata.Generation && ok && (p.Status == "False" || p.Reason == reasonWaitingForMembers)
}
