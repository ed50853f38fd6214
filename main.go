// Command etcd-operator runs etcd clusters described by EtcdCluster objects.
//
// It is the heir of the first Kubernetes operator, the 2016 etcd-operator
// demo: the same idea in the same few files, with the standard library only.
// An operator is a control loop. It watches the objects users write
// (watch.go), compares what they ask for with what exists, and makes the
// difference with ordinary API requests (manifests.go says what it creates,
// client.go how it talks). Data flows one way:
//
//	watch -> events channel -> control loop -> workers -> API server
//
// The loop is level-based, not edge-based: every event, including the replay
// of all existing objects after a restart, means "make sure this cluster
// exists", never "create a cluster". Deterministic names, 409 AlreadyExists
// and the cluster's own status (written through the status subresource) make
// that safe and cheap; the 2016 demo made a new cluster for every event.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
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

	events := make(chan event)
	w := &watcher{client: c, path: clustersPath(namespace), stall: cfg.watchStall, pageSize: cfg.pageSize, log: log}
	rec := newRecorder(c, log)
	ctl := &controller{client: c, log: log, image: cfg.image, events: rec}

	var wg sync.WaitGroup
	wg.Go(func() { w.run(ctx, events) })
	wg.Go(func() { rec.run(ctx) })
	ctl.run(ctx, events, cfg.workers)
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
}

// run is the control loop: it hands each event to the queue until the
// watcher closes the channel at shutdown, then waits for the workers.
func (c *controller) run(ctx context.Context, events <-chan event, workers int) {
	q := newQueue(workers, c.handle, c.log)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				q.wait()
				return
			}
			switch ev.Type {
			case "ADDED", "MODIFIED":
				q.add(ctx, item{cluster: ev.Cluster})
			case "DELETED":
				// Nothing to do: every object carries an ownerReference to
				// the EtcdCluster, and the garbage collector deletes them.
				q.forget(ev.Cluster)
				c.log.Info("cluster deleted; the garbage collector removes its objects", "cluster", ev.Cluster.key())
			}
		case it := <-q.retries:
			q.add(ctx, it)
		}
	}
}

// handle reconciles one queued cluster, first reading it again if asked.
// It returns the object it acted on, nil if the cluster is gone.
func (c *controller) handle(ctx context.Context, it item) (*EtcdCluster, error) {
	ec := it.cluster
	if it.refresh {
		b, err := c.client.do(ctx, http.MethodGet, clustersPath(ec.Metadata.Namespace)+"/"+url.PathEscape(ec.Metadata.Name), nil, "")
		if isStatus(err, http.StatusNotFound) {
			c.log.Info("cluster is gone; nothing to retry", "cluster", ec.key())
			return nil, nil
		}
		if err != nil {
			return ec, fmt.Errorf("read %s again: %w", ec.key(), err)
		}
		if ec, err = decodeCluster(b); err != nil {
			return nil, fmt.Errorf("read %s again: %w", it.cluster.key(), err)
		}
	}
	return ec, c.reconcile(ctx, ec)
}

// reconcile makes sure one EtcdCluster's objects exist. It is called for
// every ADDED and MODIFIED event, so it must be cheap and harmless when
// there is nothing to do.
func (c *controller) reconcile(ctx context.Context, ec *EtcdCluster) error {
	log := c.log.With("cluster", ec.key())
	st, gen := ec.status(), ec.Metadata.Generation

	spec, err := parseSpec(ec.Spec)
	if err != nil {
		msg := err.Error()
		if st.Phase == phaseFailed && st.Message == msg && st.ObservedGeneration == gen {
			return nil // already reported
		}
		log.Error("invalid spec; nothing created", "err", msg)
		c.events.record(ec, eventWarning, reasonInvalidSpec, msg)
		return c.setStatus(ctx, ec, clusterStatus{Phase: phaseFailed, Message: msg, ObservedGeneration: gen})
	}

	if st.Phase == phaseCreated {
		if st.ObservedGeneration == gen {
			return nil // a replay after a restart, or our own status write
		}
		reason, msg := reasonSpecChangeIgnored, "spec changed after creation; updating running members (spec.version included) is not supported yet"
		if n := len(st.Members); n != spec.Size {
			reason = reasonSizeChangeIgnored
			msg = fmt.Sprintf("spec.size changed from %d to %d; resizing is not supported yet, the cluster keeps its %d members", n, spec.Size, n)
		}
		log.Warn("spec change ignored", "reason", reason, "message", msg)
		c.events.record(ec, eventWarning, reason, msg)
		return c.setStatus(ctx, ec, clusterStatus{Phase: phaseCreated, Message: msg, Members: st.Members, ObservedGeneration: gen})
	}

	// No "Creating" status first: on the happy path the objects exist a few
	// milliseconds later, and the write would cost every cluster a request.
	plan := newClusterPlan(ec, spec, c.image)
	if err := c.createAll(ctx, log, ec, plan); err != nil {
		if ctx.Err() == nil {
			// Creating: a passing failure, retried. Failed: someone has to
			// act (RBAC, a name taken), though it is retried all the same.
			phase := phaseFailed
			if transient(err) {
				phase = phaseCreating
			}
			log.Error("creating cluster failed; will retry", "phase", phase, "err", err)
			c.events.record(ec, eventWarning, reasonCreateFailed, err.Error())
			_ = c.setStatus(ctx, ec, clusterStatus{Phase: phase, Message: err.Error() + " (will retry)", ObservedGeneration: gen})
		}
		return err
	}
	msg := fmt.Sprintf("%d members created: %s; clients use Service %s", spec.Size, strings.Join(plan.Members, ", "), plan.ClientService)
	if plan.Base != ec.Metadata.Name {
		msg += fmt.Sprintf(" (object names shortened to %s-*, because the name is not a short DNS-1035 label)", plan.Base)
	}
	if err := c.setStatus(ctx, ec, clusterStatus{Phase: phaseCreated, Message: msg, Members: plan.Members, ObservedGeneration: gen}); err != nil {
		return err
	}
	log.Info("cluster created", "members", len(plan.Members), "version", spec.Version)
	c.events.record(ec, eventNormal, reasonClusterCreated, msg)
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
	handle  func(context.Context, item) (*EtcdCluster, error)
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

func newQueue(workers int, handle func(context.Context, item) (*EtcdCluster, error), log *slog.Logger) *queue {
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
		ec, err := q.handle(ctx, it)
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
			if err != nil && ctx.Err() == nil {
				q.retryLater(ctx, item{cluster: it.cluster, refresh: true}, failures)
			}
			return
		}
		it = next
	}
}

func (q *queue) retryLater(ctx context.Context, it item, failures int) {
	d := min(time.Second<<min(failures-1, 9), 5*time.Minute)
	q.log.Info("retrying later", "cluster", it.cluster.key(), "in", d, "failures", failures)
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
