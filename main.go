// Command etcd-operator runs etcd clusters described by EtcdCluster objects.
//
// It is the heir of the first Kubernetes operator, the 2016 etcd-operator
// demo: the same idea in the same few files, with the standard library only.
// An operator is a control loop. It watches the objects users write and
// the Pods it made (watch.go), and for each cluster a worker runs one pass:
// observe what exists (observe.go: Kubernetes and etcd itself), decide the
// one next step (decide.go, a pure function), act with ordinary API
// requests (this file; manifests.go says what it creates, client.go how it
// talks), and report (report.go). Data flows one way:
//
//	watch -> events channel -> control loop -> workers -> API server
//
// The loop is level-based, not edge-based: every event, including the replay
// of all existing objects after a restart, means "make sure this cluster is
// as its spec says", never "create a cluster". Deterministic names, 409
// AlreadyExists and the cluster's own status (written through the status
// subresource) make that safe and cheap; the 2016 demo made a new cluster for
// every event.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
)

type config struct {
	master, namespace, image, logLevel string
	workers, burst, pageSize           int
	qps                                float64
	requestTimeout, watchStall         time.Duration
	masterSet, namespaceSet            bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("etcd-operator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.master, "master", "http://127.0.0.1:8001", "API server URL (kubectl proxy's default address). Not set and inside a Pod: the in-cluster API server, with the Pod's ServiceAccount")
	fs.StringVar(&cfg.namespace, "namespace", "default", "namespace to watch; empty for all namespaces. Not set and inside a Pod: the Pod's namespace")
	fs.StringVar(&cfg.image, "image", "gcr.io/etcd-development/etcd", "etcd image repository; the tag is the EtcdCluster's spec.version")
	fs.IntVar(&cfg.workers, "workers", 16, "clusters handled at once")
	fs.Float64Var(&cfg.qps, "qps", 500, "average requests per second to the API server, at most (0: no limit)")
	fs.IntVar(&cfg.burst, "burst", 100, "requests allowed at once above -qps")
	fs.DurationVar(&cfg.requestTimeout, "request-timeout", 30*time.Second, "timeout of each API request (watches excepted)")
	fs.DurationVar(&cfg.watchStall, "watch-stall", 5*time.Minute, "a watch silent for this long is dropped and re-established")
	fs.IntVar(&cfg.pageSize, "page-size", 100, "EtcdClusters per page when listing")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "etcd-operator creates an etcd cluster for each EtcdCluster object.\n\nUsage: etcd-operator [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	fs.Visit(func(f *flag.Flag) {
		cfg.masterSet = cfg.masterSet || f.Name == "master"
		cfg.namespaceSet = cfg.namespaceSet || f.Name == "namespace"
	})
	switch {
	case cfg.workers < 1:
		return cfg, fmt.Errorf("-workers must be at least 1, not %d", cfg.workers)
	case cfg.pageSize < 1:
		return cfg, fmt.Errorf("-page-size must be at least 1, not %d", cfg.pageSize)
	case cfg.requestTimeout <= 0 || cfg.watchStall < 2*time.Second:
		return cfg, errors.New("-request-timeout must be positive and -watch-stall at least 2s")
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-operator:", err)
		os.Exit(2)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-operator: -log-level:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// The first SIGINT or SIGTERM cancels ctx and everything stops cleanly;
	// after that the default action is back, so a second Ctrl-C kills.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("etcd-operator failed", "err", err)
		os.Exit(1)
	}
}

// run wires the pieces together and returns when ctx ends.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	c, namespace, err := connect(cfg)
	if err != nil {
		return err
	}
	c.limit = newRateLimiter(cfg.qps, cfg.burst)
	c.timeout = cfg.requestTimeout
	c.log = log
	log.Info("etcd-operator starting", "apiServer", c.base, "namespace", printable(namespace), "workers", cfg.workers, "qps", cfg.qps)

	clusters, pods := make(chan event[*EtcdCluster]), make(chan event[podEvent])
	synced, podsSynced := make(chan struct{}), make(chan struct{})
	cw := &watcher[*EtcdCluster]{client: c, path: clustersPath(namespace), decode: clusterRV,
		stall: cfg.watchStall, pageSize: cfg.pageSize, log: log, listed: sync.OnceFunc(func() { close(synced) })}
	// Only the operator's own Pods: the API server filters by label.
	pw := &watcher[podEvent]{client: c, path: podsPath(namespace), selector: labelCluster, decode: decodePodEvent,
		stall: cfg.watchStall, pageSize: cfg.pageSize, log: log, listed: sync.OnceFunc(func() { close(podsSynced) })}
	rec := newRecorder(c, log)
	ctl := &controller{client: c, log: log, image: cfg.image, events: rec}

	var wg sync.WaitGroup
	wg.Go(func() { cw.run(ctx, clusters) })
	wg.Go(func() { pw.run(ctx, pods) })
	wg.Go(func() { rec.run(ctx) })
	ctl.run(ctx, clusters, pods, synced, podsSynced, cfg.workers)
	wg.Wait()
	log.Info("etcd-operator stopped")
	return nil
}

// connect picks how to reach the API server: -master if given, else the
// in-cluster API server when running in a Pod, else kubectl proxy's address.
func connect(cfg config) (*client, string, error) {
	inPod := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	if cfg.masterSet || !inPod {
		u, err := url.Parse(cfg.master)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, "", fmt.Errorf("-master %q: want a URL such as http://127.0.0.1:8001", cfg.master)
		}
		return newClient(cfg.master, nil), cfg.namespace, nil
	}
	c, err := inClusterClient(serviceAccountDir)
	if err != nil {
		return nil, "", fmt.Errorf("in-cluster config (or pass -master): %w", err)
	}
	namespace := cfg.namespace
	if !cfg.namespaceSet {
		b, err := os.ReadFile(serviceAccountDir + "/namespace")
		if err != nil {
			return nil, "", fmt.Errorf("in-cluster namespace (or pass -namespace): %w", err)
		}
		namespace = strings.TrimSpace(string(b))
	}
	return c, namespace, nil
}

func printable(namespace string) string {
	if namespace == "" {
		return "(all)"
	}
	return namespace
}

type controller struct {
	client *client
	log    *slog.Logger
	image  string
	events *recorder
	// expect is, by cluster key, the member Pods its status lists and
	// whether it calls them ready (" +name -name"); ready is, by Pod key,
	// whether each member Pod is Ready. When the two disagree, the
	// cluster is looked at (one read of it); when they agree, nothing is
	// sent. A bit per Pod and a short string per cluster, not a cache of
	// Pods or clusters; Pods are keyed by a hash of their key (podKey), so
	// thousands of them cost no strings on the heap.
	expect map[string]string
	ready  map[uint64]bool
	seed   maphash.Seed
}

// podKey is the key of a Pod in c.ready.
func (c *controller) podKey(ns, name string) uint64 {
	return maphash.String(c.seed, ns+"/"+name)
}

// run is the control loop: it hands each event to the queue until the
// watchers close their channels at shutdown, then waits for the workers.
// Pod events are read only once the first list of clusters is in (synced),
// so that each Pod is compared with its cluster's status, as after a
// restart, instead of sending every Pod's cluster to work.
func (c *controller) run(ctx context.Context, clusters <-chan event[*EtcdCluster], pods <-chan event[podEvent], synced, podsSynced <-chan struct{}, workers int) {
	q := newQueue(workers, c.handle, c.log)
	c.expect, c.ready, c.seed = map[string]string{}, map[uint64]bool{}, maphash.MakeSeed()
	var podsIn <-chan event[podEvent]
	podsListed := false
	for clusters != nil || podsIn != nil {
		select {
		case <-synced:
			podsIn, synced = pods, nil
		case <-podsSynced:
			// Every member Pod that exists is known now: a cluster whose
			// status calls a Pod ready that is not (or gone) is looked at.
			podsListed, podsSynced = true, nil
			for key, exp := range c.expect {
				ns, name, _ := strings.Cut(key, "/")
				for _, m := range strings.Fields(exp) {
					if c.ready[c.podKey(ns, m[1:])] != (m[0] == '+') {
						q.add(ctx, item{cluster: &EtcdCluster{Metadata: objectMeta{Namespace: ns, Name: name}}, refresh: true})
						break
					}
				}
			}
			// Both first lists are in and nothing of them is kept: hand
			// their memory back now rather than at an idle process's next
			// forced collection, minutes later.
			debug.FreeOSMemory()
		case ev, ok := <-clusters:
			if !ok {
				clusters = nil
				continue
			}
			ec := ev.Object
			switch ev.Type {
			case "ADDED", "MODIFIED":
				st := ec.status()
				c.expect[ec.key()] = expectation(st)
				// A status that needs no pass but disagrees with the Pods
				// (a Pod changed while the status write was on its way)
				// gets one.
				refresh := false
				for _, m := range st.Members {
					ready, known := c.ready[c.podKey(ec.Metadata.Namespace, m.Name)]
					refresh = refresh || (podsListed || known) && ready != m.Ready
				}
				q.add(ctx, item{cluster: ec, refresh: refresh && settled(ec)})
			case "DELETED":
				// Nothing to do: every object carries an ownerReference to
				// the EtcdCluster, and the garbage collector deletes them.
				delete(c.expect, ec.key())
				q.forget(ec)
				c.log.Info("cluster deleted; the garbage collector removes its objects", "cluster", ec.key())
			}
		case ev, ok := <-podsIn:
			if !ok {
				podsIn = nil
				continue
			}
			p := ev.Object
			if p.Cluster == "" {
				continue
			}
			podKey := p.Namespace + "/" + p.Name
			mark := "-"
			if ev.Type == "DELETED" {
				delete(c.ready, c.podKey(p.Namespace, p.Name))
			} else {
				c.ready[c.podKey(p.Namespace, p.Name)] = p.Ready
				if p.Ready {
					mark = "+"
				}
			}
			// A Pod the status does not list counts as "not ready" there: a
			// new Pod that is not ready yet tells nothing new (the pass
			// that created it writes the status), and a burst of new
			// clusters costs no pass per Pod.
			exp := c.expect[p.Namespace+"/"+p.Cluster] + " "
			listed := strings.Contains(exp, " +"+p.Name+" ") || strings.Contains(exp, " -"+p.Name+" ")
			switch {
			case ev.Type == "DELETED" && !listed:
				continue
			case ev.Type != "DELETED" && (strings.Contains(exp, " "+mark+p.Name+" ") || !listed && !p.Ready):
				continue // as the status says
			}
			c.log.Debug("member Pod changed; looking at its cluster", "pod", podKey, "event", ev.Type, "ready", p.Ready)
			stub := &EtcdCluster{Metadata: objectMeta{Namespace: p.Namespace, Name: p.Cluster}}
			q.add(ctx, item{cluster: stub, refresh: true})
		case it := <-q.retries:
			q.add(ctx, it)
		}
	}
	q.wait()
}

// expectation is what a status says of the member Pods: " +ready -unready".
func expectation(st clusterStatus) string {
	var b strings.Builder
	for _, m := range st.Members {
		b.WriteByte(' ')
		if m.Ready {
			b.WriteString("+")
		} else {
			b.WriteString("-")
		}
		b.WriteString(m.Name)
	}
	return b.String()
}

// settled reports a status that needs no pass when its cluster is replayed
// (after a restart, a relist, or the operator's own status write): it
// describes the current spec and no step is under way, or the only thing
// awaited is its Pods starting. A change of its Pods is noticed through the
// Pod watch.
func settled(ec *EtcdCluster) bool {
	st := ec.status()
	p, ok := st.condition(condProgressing)
	return st.ObservedGeneration == ec.Metadata.Generation && ok && (p.Status == "False" || p.Reason == "WaitingForMembers")
}

// handle reconciles one queued cluster, first reading it again if asked.
// It returns the object it acted on (nil if the cluster is gone) and when
// to look again without an event (0: not unless something changes).
func (c *controller) handle(ctx context.Context, it item) (*EtcdCluster, time.Duration, error) {
	ec := it.cluster
	if it.refresh {
		b, err := c.client.do(ctx, http.MethodGet, clustersPath(ec.Metadata.Namespace)+"/"+url.PathEscape(ec.Metadata.Name), nil, "")
		if isStatus(err, http.StatusNotFound) {
			c.log.Debug("cluster is gone; nothing to do", "cluster", ec.key())
			return nil, 0, nil
		}
		if err != nil {
			return ec, 0, fmt.Errorf("read %s again: %w", ec.key(), err)
		}
		if ec, err = decodeCluster(b); err != nil {
			return nil, 0, fmt.Errorf("read %s again: %w", it.cluster.key(), err)
		}
	} else if settled(ec) {
		return ec, 0, nil
	}
	again, err := c.reconcile(ctx, ec)
	return ec, again, err
}

// maxSteps bounds the steps of one pass; a pass that reaches it is
// followed by another soon.
const maxSteps = 8

// reconcile is observe -> decide -> act, repeated while each step leads
// straight to the next (a member removed, then its Pod, then its Service).
// It writes the status only when it changed: a healthy cluster costs
// nothing but the observation.
func (c *controller) reconcile(ctx context.Context, ec *EtcdCluster) (time.Duration, error) {
	log := c.log.With("cluster", ec.key())
	spec, err := parseSpec(ec.Spec)
	in := input{Name: ec.Metadata.Name, Spec: spec, Prev: ec.status(), Gen: ec.Metadata.Generation,
		Repo: c.image, Base: baseName(ec.Metadata.Name)}
	if err != nil {
		in.Invalid = err.Error()
		st, _ := decide(in, observed{})
		if st.Message != in.Prev.Message || in.Prev.Phase != phaseFailed || in.Prev.ObservedGeneration != in.Gen {
			log.Error("invalid spec; nothing changed", "err", in.Invalid)
			c.events.record(ec, eventWarning, reasonInvalidSpec, in.Invalid)
		}
		return 0, c.writeStatus(ctx, ec, in.Prev, st)
	}
	for range maxSteps {
		obs, err := c.observe(ctx, ec, in.Base)
		if err != nil {
			st := in.Prev
			st.Message = "cannot look at the cluster"
			return 0, c.failed(ctx, ec, in.Prev, st, "Observe", err)
		}
		st, s := decide(in, obs)
		if s.Action != actNone {
			log.Info("step", "action", s.Action, "member", s.Member, "why", st.Message)
			again, err := c.act(ctx, ec, in, obs, s)
			if err != nil {
				return 0, c.failed(ctx, ec, in.Prev, st, s.Action, err)
			}
			if s.EventReason != "" {
				c.events.record(ec, s.EventType, s.EventReason, s.EventMessage)
			}
			if err := c.writeStatus(ctx, ec, in.Prev, st); err != nil {
				return 0, err
			}
			in.Prev = st
			if again > 0 || s.Last {
				return again, nil
			}
			continue
		}
		if st.Phase != in.Prev.Phase {
			log.Info("cluster is "+st.Phase, "ready", st.Ready, "message", st.Message)
		}
		// What the operator refuses or cannot help with is news for the
		// user: once, when it starts.
		p, _ := st.condition(condProgressing)
		if old, _ := in.Prev.condition(condProgressing); warns(p.Reason) && (old.Reason != p.Reason || in.Prev.ObservedGeneration != in.Gen) {
			log.Warn("cannot proceed", "reason", p.Reason, "message", st.Message)
			c.events.record(ec, eventWarning, p.Reason, st.Message)
		}
		if err := c.writeStatus(ctx, ec, in.Prev, st); err != nil {
			return 0, err
		}
		return s.Again, nil
	}
	return pollAgain, nil
}

// failed reports a failed observation or step in the status, the log and
// an Event, and returns err for the queue to retry with its backoff.
// Failed: someone has to act (a 403, a name taken); otherwise the phase
// stays and the message says what is retried.
func (c *controller) failed(ctx context.Context, ec *EtcdCluster, prev, st clusterStatus, what string, err error) error {
	if ctx.Err() != nil {
		return err
	}
	st.Message = fmt.Sprintf("%s: %v (will retry)", st.Message, err)
	if errors.Is(err, errNameTaken) || !transient(err) {
		st.Phase = phaseFailed
	}
	for i, cond := range st.Conditions {
		if cond.Type == condProgressing {
			if cond.Status != "True" {
				st.Conditions[i].LastTransitionTime = ""
			}
			st.Conditions[i].Status, st.Conditions[i].Reason, st.Conditions[i].Message = "True", reasonStepFailed, st.Message
		}
	}
	c.log.Error(what+" failed; will retry", "cluster", ec.key(), "err", err)
	c.events.record(ec, eventWarning, reasonStepFailed, st.Message)
	_ = c.writeStatus(ctx, ec, prev, st)
	return err
}

// warns reports the Progressing reasons that get a Warning Event.
func warns(reason string) bool {
	switch reason {
	case "VersionRefused", "UpgradeStalled", "UpgradeNeedsMembers", "QuorumLost", "DataLost":
		return true
	}
	return false
}

// writeStatus writes st if it says something prev did not.
func (c *controller) writeStatus(ctx context.Context, ec *EtcdCluster, prev, st clusterStatus) error {
	st.stampTransitions(time.Now())
	if jsonEqual(prev, st) {
		return nil
	}
	return c.setStatus(ctx, ec, st)
}

func jsonEqual(a, b any) bool { return string(mustJSON(a)) == string(mustJSON(b)) }

// act takes one step. It returns how soon to look again when the step
// waits on etcd (a learner not caught up yet), 0 to go on at once.
func (c *controller) act(ctx context.Context, ec *EtcdCluster, in input, obs observed, s step) (time.Duration, error) {
	log := c.log.With("cluster", ec.key())
	plan := newClusterPlan(ec, in.Spec, c.image)
	plan.Image = firstOf(s.Image, plan.Image)
	ns := ec.Metadata.Namespace
	member := func(path string, body any) error {
		return c.etcd(ctx, ns, obs.Etcd.LeaderPod, path, body, nil)
	}
	switch s.Action {
	case actBootstrap:
		plan.Members = s.Members
		return 0, c.createAll(ctx, log, ec, plan)
	case actCreateClient:
		_, err := c.create(ctx, log, plan, "services", plan.ClientService, plan.clientService())
		return 0, err
	case actAddMember:
		err := member("/v3/cluster/member/add", map[string]any{"peerURLs": []string{fmt.Sprintf("http://%s:%d", s.Member, peerPort)}, "isLearner": true})
		if etcdRefused(err, "already exists") {
			return 0, nil // an earlier add went through: the next pass sees it
		}
		if err != nil {
			return 0, fmt.Errorf("add member %s to etcd: %w", s.Member, err)
		}
		log.Info("member added to etcd as a learner", "member", s.Member)
		return 0, nil
	case actStartMember:
		if _, err := c.create(ctx, log, plan, "services", s.Member, plan.memberService(s.Member)); err != nil {
			return 0, err
		}
		created, err := c.create(ctx, log, plan, "pods", s.Member, plan.joiningPod(s.Member, s.InitialCluster))
		if created {
			c.events.record(ec, eventNormal, reasonMemberCreated, fmt.Sprintf("created member %s (Pod and Service %s), joining as a learner", s.Member, s.Member))
		}
		return 0, err
	case actPromote:
		err := member("/v3/cluster/member/promote", map[string]string{"ID": s.ID})
		switch {
		case etcdRefused(err, "in sync with leader"):
			log.Info("learner not caught up yet; trying again", "member", s.Member)
			return s.Again, nil
		case etcdRefused(err, "can only promote a learner member"):
			return 0, nil // promoted by an earlier pass
		}
		if err != nil {
			return 0, fmt.Errorf("promote member %s: %w", s.Member, err)
		}
		log.Info("learner promoted to a voting member", "member", s.Member)
		c.events.record(ec, eventNormal, reasonMemberPromoted, fmt.Sprintf("member %s promoted to a voting member", s.Member))
		return 0, nil
	case actRemoveMember:
		err := member("/v3/cluster/member/remove", map[string]string{"ID": s.ID})
		if etcdRefused(err, "member not found") {
			return 0, nil // removed by an earlier pass
		}
		if err != nil {
			return 0, fmt.Errorf("remove member %s from etcd: %w", s.Member, err)
		}
		log.Info("member removed from etcd", "member", s.Member)
		return 0, nil
	case actMoveLeader:
		if err := member("/v3/maintenance/transfer-leadership", map[string]string{"targetID": s.ID}); err != nil {
			return 0, fmt.Errorf("hand leadership to %s: %w", s.Member, err)
		}
		log.Info("leadership handed over", "to", s.Member)
		return 0, nil
	case actDeletePod, actDeleteSvc:
		resource := map[string]string{actDeletePod: "pods", actDeleteSvc: "services"}[s.Action]
		return 0, c.delete(ctx, log, ns, resource, s.Member)
	case actUpgrade:
		patch := mustJSON(map[string]any{"spec": map[string]any{"containers": []map[string]any{{"name": "etcd", "image": s.Image}}}})
		path := "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(s.Member)
		if _, err := c.client.do(ctx, http.MethodPatch, path, patch, "application/strategic-merge-patch+json"); err != nil {
			return 0, fmt.Errorf("change image of pod %s: %w", s.Member, err)
		}
		log.Info("member image changed; the kubelet restarts it", "member", s.Member, "image", s.Image)
		return 0, nil
	}
	return 0, fmt.Errorf("unknown step %q", s.Action)
}

// delete deletes one object; one already gone counts as deleted.
func (c *controller) delete(ctx context.Context, log *slog.Logger, ns, resource, name string) error {
	object := strings.TrimSuffix(resource, "s") + "/" + name
	_, err := c.client.do(ctx, http.MethodDelete, "/api/v1/namespaces/"+url.PathEscape(ns)+"/"+resource+"/"+url.PathEscape(name), nil, "")
	if err != nil && !isStatus(err, http.StatusNotFound) {
		return fmt.Errorf("delete %s: %w", object, err)
	}
	log.Info("deleted", "object", object)
	return nil
}

// createAll creates every Service, then every Pod: a member's peers must
// have names that resolve when its etcd starts.
func (c *controller) createAll(ctx context.Context, log *slog.Logger, ec *EtcdCluster, plan clusterPlan) error {
	for _, m := range plan.Members {
		if _, err := c.create(ctx, log, plan, "services", m, plan.memberService(m)); err != nil {
			return err
		}
	}
	if _, err := c.create(ctx, log, plan, "services", plan.ClientService, plan.clientService()); err != nil {
		return err
	}
	for _, m := range plan.Members {
		created, err := c.create(ctx, log, plan, "pods", m, plan.memberPod(m))
		if err != nil {
			return err
		}
		if created {
			c.events.record(ec, eventNormal, reasonMemberCreated, fmt.Sprintf("created member %s (Pod and Service %s)", m, m))
		}
	}
	return nil
}

// create POSTs one object. 409 AlreadyExists counts as done, but only once a
// GET shows that this EtcdCluster is the object's controller: a name taken
// by something else (or by a deleted cluster's objects that the garbage
// collector has not removed yet) is an error, retried later.
func (c *controller) create(ctx context.Context, log *slog.Logger, plan clusterPlan, resource, name string, body []byte) (bool, error) {
	collection := "/api/v1/namespaces/" + url.PathEscape(plan.namespace) + "/" + resource
	object := strings.TrimSuffix(resource, "s") + "/" + name
	_, err := c.client.do(ctx, http.MethodPost, collection, body, "application/json")
	if err == nil {
		log.Info("created", "object", object)
		return true, nil
	}
	if !isStatus(err, http.StatusConflict) {
		return false, fmt.Errorf("create %s: %w", object, err)
	}
	existing, err := c.client.do(ctx, http.MethodGet, collection+"/"+url.PathEscape(name), nil, "")
	if err != nil {
		return false, fmt.Errorf("create %s: it exists, and reading it failed: %w", object, err)
	}
	var meta struct {
		Metadata struct {
			OwnerReferences []ownerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(existing, &meta)
	for _, o := range meta.Metadata.OwnerReferences {
		if o.Controller && o.UID == plan.owner.UID {
			log.Info("already exists", "object", object)
			return false, nil
		}
	}
	return false, fmt.Errorf("create %s: %w", object, errNameTaken)
}

var errNameTaken = errors.New("the name is taken by an object this EtcdCluster does not own")

// transient reports whether an error may pass by itself: the API server
// busy or unreachable, rather than refusing.
func transient(err error) bool {
	var apiErr *apiError
	if errors.As(err, &apiErr) {
		return apiErr.Code >= 500 || apiErr.Code == http.StatusTooManyRequests
	}
	return !errors.Is(err, errNameTaken)
}

// item is one unit of work for the queue. refresh asks the worker to read
// the cluster again first: a retry must not act on the object as it was
// when it failed, minutes ago.
type item struct {
	cluster *EtcdCluster
	refresh bool
}

// queue runs reconciles on a bounded number of workers, so that one slow
// cluster cannot hold up the others and a burst cannot flood the API
// server. A cluster is never handled by two workers at once: events that
// arrive meanwhile are folded into the newest one. Failures are retried
// after a per-cluster exponential delay, as client-go's workqueue does.
type queue struct {
	handle  func(context.Context, item) (*EtcdCluster, time.Duration, error)
	log     *slog.Logger
	slots   chan struct{}
	retries chan item
	wg      sync.WaitGroup

	mu       sync.Mutex
	busy     map[string]bool
	pending  map[string]item
	failures map[string]int
	// handled is the generation (metadata.generation counts spec changes)
	// last handled, by object uid. The watch can deliver the operator's own
	// status writes late, when the work is done; acting on such a stale
	// event would redo the work, and a failure's status write would make
	// its retry skip the backoff. Events of the generation already handled
	// are dropped; a failure is retried by its timer. Keys and values hold
	// no pointers, so 2,000 clusters cost a few dozen KiB in one place.
	handled map[uuid.UUID]int64
	// since counts the items handled since memory was last handed back.
	since int
}

// burst is how many items make a burst worth handing memory back after.
const burst = 100

// uidOf is the object's uid as 16 bytes (any string maps to some UUID).
func uidOf(ec *EtcdCluster) uuid.UUID {
	if u, err := uuid.Parse(ec.Metadata.UID); err == nil {
		return u
	}
	return uuid.NewSHA1(uuid.Nil, []byte(ec.Metadata.UID))
}

// alreadyHandled reports whether ec's generation was handled. Callers hold q.mu.
func (q *queue) alreadyHandled(ec *EtcdCluster) bool {
	gen, ok := q.handled[uidOf(ec)]
	return ok && gen == ec.Metadata.Generation
}

func newQueue(workers int, handle func(context.Context, item) (*EtcdCluster, time.Duration, error), log *slog.Logger) *queue {
	return &queue{
		handle: handle, log: log,
		slots:   make(chan struct{}, workers),
		retries: make(chan item),
		busy:    map[string]bool{}, pending: map[string]item{}, failures: map[string]int{},
		handled: map[uuid.UUID]int64{},
	}
}

func (q *queue) add(ctx context.Context, it item) {
	k := it.cluster.key()
	q.mu.Lock()
	if !it.refresh && q.alreadyHandled(it.cluster) {
		q.mu.Unlock()
		return
	}
	if q.busy[k] {
		q.pending[k] = it
		q.mu.Unlock()
		return
	}
	q.busy[k] = true
	q.mu.Unlock()
	select {
	case q.slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	q.wg.Go(func() {
		defer func() { <-q.slots }()
		q.work(ctx, it)
	})
}

func (q *queue) work(ctx context.Context, it item) {
	k := it.cluster.key()
	for {
		ec, again, err := q.handle(ctx, it)
		q.mu.Lock()
		if ec != nil {
			q.handled[uidOf(ec)] = ec.Metadata.Generation
		} else {
			delete(q.handled, uidOf(it.cluster))
		}
		next, ok := q.pending[k]
		delete(q.pending, k)
		if err != nil {
			q.failures[k]++
		} else {
			delete(q.failures, k)
		}
		failures := q.failures[k]
		if ok && !next.refresh && q.alreadyHandled(next.cluster) {
			ok = false
		}
		q.since++
		release := false
		if !ok {
			delete(q.busy, k)
			release = len(q.busy) == 0 && q.since >= burst
			if release {
				q.since = 0
			}
		}
		q.mu.Unlock()
		if release {
			// A burst (the list after a start, many clusters applied
			// at once) is over and nothing of it is kept: hand the memory
			// back now, not minutes later when an idle process's next
			// garbage collection runs.
			debug.FreeOSMemory()
		}
		if !ok {
			switch {
			case ctx.Err() != nil:
			case err != nil:
				q.retryLater(ctx, item{cluster: it.cluster, refresh: true}, failures)
			case again > 0:
				q.lookAgain(ctx, item{cluster: it.cluster, refresh: true}, again)
			}
			return
		}
		it = next
	}
}

func (q *queue) retryLater(ctx context.Context, it item, failures int) {
	d := min(time.Second<<min(failures-1, 9), 5*time.Minute)
	q.log.Info("retrying later", "cluster", it.cluster.key(), "in", d, "failures", failures)
	q.lookAgain(ctx, it, d)
}

// lookAgain queues it again after d.
func (q *queue) lookAgain(ctx context.Context, it item, d time.Duration) {
	time.AfterFunc(d, func() {
		select {
		case q.retries <- it:
		case <-ctx.Done():
		}
	})
}

func (q *queue) forget(ec *EtcdCluster) {
	q.mu.Lock()
	delete(q.pending, ec.key())
	delete(q.failures, ec.key())
	delete(q.handled, uidOf(ec))
	q.mu.Unlock()
}

func (q *queue) wait() { q.wg.Wait() }
