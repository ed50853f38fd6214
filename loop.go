// Loop: events in, work out.
//
// The control loop reads the four watches (EtcdClusters, and the member
// Pods, Services and PVCs the operator made), keeps the cache of the last
// three (cache.go) and turns events into work for the queue; it never
// talks to the API server itself. It is level-based, not edge-based: an event means "look at this
// cluster", never "create a cluster", so the replay of every object after a
// restart or a relist is harmless. Two things keep it cheap:
//
//   - A cluster whose status already describes its spec, with nothing under
//     way, needs no pass when it is replayed (settled).
//   - A Pod event leads to a pass only when it tells something the
//     cluster's status does not say (podNews): a member called ready whose
//     Pod is not, or the other way round. The loop keeps one short string
//     per cluster for that, beside the cache.
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

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

type controller struct {
	client *kube.Client
	log    *slog.Logger
	image  string
	// operatorImage is this operator's image: restored members run it.
	operatorImage string
	// secretSync bounds the kubelet's delay in updating a Secret's files
	// (carotation.go); 0 for defaultSecretSync.
	secretSync time.Duration
	events     *recorder
	// readiness is, by cluster key, what its status says of its member Pods
	// (" +ready -unready").
	readiness map[string]string
	// cache holds what the Pod, Service and PVC watches said (cache.go); nil
	// in a controller built by a test alone, which then lists.
	cache *cache
	// backups runs the backup schedule of each cluster with spec.backup
	// (backupschedule.go), beside the passes.
	backups *backups
	// deleted holds the uids of clusters deleted lately: a pass under way
	// when its cluster was deleted must not write what it decided, since a
	// new cluster of the same name takes the same paths.
	deleted sync.Map // uuid.UUID -> time.Time
	// logins says how to reach each member Pod's etcd (auth.go).
	logins etcdLogins
}

// gone reports a cluster deleted while a pass was under way.
func (c *controller) gone(ec *EtcdCluster) bool {
	_, ok := c.deleted.Load(uidOf(ec))
	return ok
}

// forgetDeleted records a deleted cluster's uid, and drops those deleted
// long ago: no pass runs that long.
func (c *controller) forgetDeleted(ec *EtcdCluster) {
	now := time.Now()
	c.deleted.Range(func(k, v any) bool {
		if now.Sub(v.(time.Time)) > 10*time.Minute {
			c.deleted.Delete(k)
		}
		return true
	})
	c.deleted.Store(uidOf(ec), now)
}

// run is the control loop. Pod, Service and PVC events are read only once
// the first list of clusters is in (synced), so that each Pod is compared
// with its cluster's status instead of sending every Pod's cluster to
// work. q is the work queue: main.go shares it with the Event recorder,
// whose Events wait for it to be idle. It returns when the watchers have
// closed their channels and the workers have finished.
func (c *controller) run(ctx context.Context, q *queue, clusters <-chan event[*EtcdCluster], pods, services, claims <-chan event[ownedEvent], synced <-chan struct{}, workers int) {
	c.readiness = map[string]string{}
	c.backups = newBackups(ctx, c)
	defer c.backups.stop()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { c.work(ctx, q) })
	}
	c.dispatch(q, clusters, pods, services, claims, synced)
	q.shutdown()
	wg.Wait()
}

// dispatch hands each event to the cache and its handler until the
// watchers have closed their channels.
func (c *controller) dispatch(q *queue, clusters <-chan event[*EtcdCluster], pods, services, claims <-chan event[ownedEvent], synced <-chan struct{}) {
	var podsIn, servicesIn, claimsIn <-chan event[ownedEvent]
	podsListed := false
	for clusters != nil || podsIn != nil || servicesIn != nil || claimsIn != nil {
		select {
		case <-synced:
			podsIn, servicesIn, claimsIn, synced = pods, services, claims, nil
		case ev, ok := <-clusters:
			if !ok {
				clusters = nil
				continue
			}
			c.clusterEvent(q, ev, podsListed)
		case ev, ok := <-podsIn:
			if !ok {
				podsIn = nil
				continue
			}
			podsListed = c.podsEvent(q, ev, podsListed)
		case ev, ok := <-servicesIn:
			if !ok {
				servicesIn = nil
				continue
			}
			if !c.cache.apply("services", ev) {
				c.serviceEvent(q, ev)
			}
		case ev, ok := <-claimsIn:
			if !ok {
				claimsIn = nil
				continue
			}
			if !c.cache.apply("persistentvolumeclaims", ev) {
				c.claimEvent(q, ev)
			}
		}
	}
}

// podsEvent records a Pod event in the cache and queues what it is news
// for; the first time every Pod has been listed, so are the clusters whose
// status disagrees with their Pods. It returns whether they all were.
func (c *controller) podsEvent(q *queue, ev event[ownedEvent], listed bool) bool {
	c.cache.apply("pods", ev)
	if ev.Type == "LISTED" && !listed {
		listed = true
		c.allPodsListed(q)
	}
	c.podEvent(q, ev)
	return listed
}

// clusterEvent queues a cluster that was added or changed, and forgets a
// deleted one: its objects carry ownerReferences to it, and Kubernetes'
// garbage collector deletes them.
func (c *controller) clusterEvent(q *queue, ev event[*EtcdCluster], podsListed bool) {
	ec := ev.Object
	if ev.Type == "DELETED" {
		c.forgetDeleted(ec)
		c.backups.remove(ec)
		delete(c.readiness, ec.key())
		c.cache.forgetWrites(ec.Metadata.Namespace, ec.Metadata.Name)
		q.forget(ec)
		c.log.Info("cluster deleted; the garbage collector removes its objects", "cluster", ec.key())
		return
	}
	c.backups.update(ec)
	st := ec.status()
	c.readiness[ec.key()] = readinessOf(st)
	// A settled status that disagrees with the Pods (a Pod changed while
	// the status write was on its way) gets a pass with a fresh read.
	refresh := quiet(ec) && disagrees(c.readiness[ec.key()], c.readyIn(ec.Metadata.Namespace, ec.Metadata.Name), podsListed)
	q.add(item{cluster: ec, refresh: refresh})
}

// podEvent queues a member Pod's cluster when the event is news to the
// cluster's status.
func (c *controller) podEvent(q *queue, ev event[ownedEvent]) {
	p := ev.Object
	if p.Cluster == "" || p.Pod == nil {
		return
	}
	ready := p.Pod.Ready && !p.Pod.Deleting
	exp, known := c.readiness[p.Namespace+"/"+p.Cluster]
	if !podNews(exp, ev.Type, p.Name, ready) && !(known && ev.Type != "DELETED" && inTrouble(p.Pod)) {
		return
	}
	c.log.Debug("member Pod changed; looking at its cluster", "pod", p.Namespace+"/"+p.Name, "event", ev.Type, "ready", ready)
	q.add(item{cluster: &EtcdCluster{Metadata: objectMeta{Namespace: p.Namespace, Name: p.Cluster}}, refresh: true})
}

// serviceEvent queues the cluster of a Service that someone else deleted
// (the operator's own deletions were awaited): the pass makes it again.
func (c *controller) serviceEvent(q *queue, ev event[ownedEvent]) {
	s := ev.Object
	if ev.Type != "DELETED" || s.Cluster == "" {
		return
	}
	if _, ok := c.readiness[s.Namespace+"/"+s.Cluster]; !ok {
		return
	}
	c.log.Debug("Service deleted; looking at its cluster", "service", s.Namespace+"/"+s.Name)
	q.add(item{cluster: &EtcdCluster{Metadata: objectMeta{Namespace: s.Namespace, Name: s.Cluster}}, refresh: true})
}

// claimEvent queues the cluster of a PVC that someone else deleted or
// began to delete (the operator's own deletions were awaited): its
// member's data goes with it, and the pass replaces the member.
func (c *controller) claimEvent(q *queue, ev event[ownedEvent]) {
	cl := ev.Object
	if cl.Cluster == "" || ev.Type != "DELETED" && (cl.Claim == nil || !cl.Claim.Deleting) {
		return
	}
	if _, ok := c.readiness[cl.Namespace+"/"+cl.Cluster]; !ok {
		return
	}
	c.log.Debug("volume claim deleted; looking at its cluster", "claim", cl.Namespace+"/"+cl.Name, "event", ev.Type)
	q.add(item{cluster: &EtcdCluster{Metadata: objectMeta{Namespace: cl.Namespace, Name: cl.Cluster}}, refresh: true})
}

// allPodsListed runs once every member Pod that exists is known: a cluster
// whose status calls a Pod ready that is not (or gone) is looked at.
func (c *controller) allPodsListed(q *queue) {
	for key, exp := range c.readiness {
		ns, name, _ := strings.Cut(key, "/")
		if disagrees(exp, c.readyIn(ns, name), true) {
			q.add(item{cluster: &EtcdCluster{Metadata: objectMeta{Namespace: ns, Name: name}}, refresh: true})
		}
	}
}

// readyIn looks up the Pods of one cluster in the cache.
func (c *controller) readyIn(ns, cluster string) func(name string) (ready, seen bool) {
	return func(name string) (bool, bool) { return c.cache.ready(ns, cluster, name) }
}

// readinessOf is what a status says of the member Pods: " +ready -unready".
func readinessOf(st clusterStatus) string {
	var b strings.Builder
	for _, m := range st.Members {
		b.WriteString(map[bool]string{true: " +", false: " -"}[m.Ready])
		b.WriteString(m.Name)
	}
	return b.String()
}

// inTrouble reports a Pod whose state a pass acts on though its readiness
// may not have changed: a container that cannot start (a crash loop, an
// image that does not pull), a Pod that ended. A Pod starting up is not:
// a burst of new clusters costs no pass per Pod. A Pod in trouble costs
// a pass per status update the kubelet makes, one per back-off at most.
func inTrouble(p *cachedPod) bool {
	switch p.Waiting {
	case "", "ContainerCreating", "PodInitializing":
	default:
		return true
	}
	return p.Phase == "Failed" || p.Phase == "Succeeded" || p.Init != ""
}

// podNews reports whether an event of member Pod name tells something the
// status's readiness does not say. A Pod the status does not list counts
// as "not ready" there: a new Pod that is not ready yet tells nothing new
// (the pass that created it wrote the status), so a burst of new clusters
// costs no pass per Pod.
func podNews(readiness, typ, name string, ready bool) bool {
	exp := readiness + " "
	listed := strings.Contains(exp, " +"+name+" ") || strings.Contains(exp, " -"+name+" ")
	if typ == "DELETED" {
		return listed
	}
	mark := map[bool]string{true: "+", false: "-"}[ready]
	return !strings.Contains(exp, " "+mark+name+" ") && (listed || ready)
}

// disagrees reports whether any member in a status's readiness is
// called ready while its Pod is not, or the other way round, or has no Pod
// at all (deleted while the operator was down). Until every Pod has been
// listed (allSeen), only Pods seen so far count.
func disagrees(readiness string, ready func(name string) (ready, seen bool), allSeen bool) bool {
	for _, m := range strings.Fields(readiness) {
		r, seen := ready(m[1:])
		if seen && r != (m[0] == '+') || !seen && allSeen {
			return true
		}
	}
	return false
}

// quiet reports a status that describes the current spec with no step
// under way, or with only its Pods' start awaited, which the Pod watch
// reports.
func quiet(ec *EtcdCluster) bool {
	st := ec.status()
	p, ok := st.condition(condProgressing)
	return st.ObservedGeneration == ec.Metadata.Generation && ok && (p.Status == "False" || p.Reason == reasonWaitingForMembers)
}

// settled reports a status that needs no pass when its cluster is replayed
// (after a restart, a relist, or the operator's own status write): a quiet
// one, unless the cluster runs TLS, whose certificates' renewal dates are
// timers that only a pass sets (tls.go).
func settled(ec *EtcdCluster) bool { return quiet(ec) && ec.status().TLS == nil }
