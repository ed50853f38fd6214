// Command etcd-operator runs etcd clusters described by EtcdCluster objects.
//
// It is the heir of the first Kubernetes operator, the 2016 etcd-operator
// demo: the same idea in a few files, with the standard library only. An
// operator is a control loop, and data flows one way through it:
//
//	watch.go -> events channel -> loop.go -> queue.go -> reconcile.go -> API server
//
// Four watches (the EtcdClusters users write, the member Pods, Services and
// PVCs the operator made) feed the control loop, which keeps what the last
// three say in a cache (cache.go) and turns events into work; a worker takes a
// cluster from the queue and runs a pass: observe what exists
// (observe.go), decide the one next step (decide.go, a pure function), act
// (act.go, with the objects of manifests.go) and report (report.go). The
// shapes they share are in types.go; backups run beside the passes
// (backupschedule.go). Libraries that know nothing of the operator live
// under internal/: kube is how it talks to the API server. This file reads
// the flags and wires the pieces together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

type config struct {
	master, namespace, image, logLevel string
	operatorImage                      string
	secretSync                         time.Duration
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
	fs.StringVar(&cfg.operatorImage, "operator-image", "etcd-operator:dev", "this operator's image (the Dockerfile's): a cluster restored from a backup runs it in init containers that fetch the backup")
	fs.DurationVar(&cfg.secretSync, "secret-sync", defaultSecretSync, "how long the kubelet may take to write a changed Secret into the Pods that mount it (its syncFrequency and cache delay): a CA rotation trusts the previous CA this long after the switch")
	fs.IntVar(&cfg.workers, "workers", 16, "clusters handled at once")
	fs.Float64Var(&cfg.qps, "qps", 500, "average requests per second to the API server, at most (0: no limit)")
	fs.IntVar(&cfg.burst, "burst", 100, "requests allowed at once above -qps")
	fs.DurationVar(&cfg.requestTimeout, "request-timeout", 30*time.Second, "timeout of each API request (watches excepted)")
	fs.DurationVar(&cfg.watchStall, "watch-stall", 5*time.Minute, "a watch silent for this long is dropped and re-established")
	fs.IntVar(&cfg.pageSize, "page-size", 100, "objects per page when a watch lists (EtcdClusters, member Pods, Services, PVCs)")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "etcd-operator creates an etcd cluster for each EtcdCluster object.\n\nUsage: etcd-operator [flags]\n       etcd-operator restore fetch|place [flags]  (a restored member's init containers)\n\nFlags:\n")
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
	case cfg.secretSync < 0:
		return cfg, fmt.Errorf("-secret-sync must not be negative, not %s", cfg.secretSync)
	case cfg.requestTimeout <= 0 || cfg.watchStall < 2*time.Second:
		return cfg, errors.New("-request-timeout must be positive and -watch-stall at least 2s")
	}
	return cfg, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "restore" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := restoreMain(ctx, os.Args[2:], os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "etcd-operator restore:", err)
			os.Exit(1)
		}
		return
	}
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
	c.Limit = kube.NewRateLimiter(cfg.qps, cfg.burst)
	c.Timeout = cfg.requestTimeout
	c.Log = log
	log.Info("etcd-operator starting", "apiServer", c.Base(), "namespace", printable(namespace), "workers", cfg.workers, "qps", cfg.qps)

	clusters, synced := make(chan event[*EtcdCluster]), make(chan struct{})
	pods, services, claims := make(chan event[ownedEvent]), make(chan event[ownedEvent]), make(chan event[ownedEvent])
	cw := &watcher[*EtcdCluster]{client: c, path: clustersPath(namespace), decode: clusterRV,
		stall: cfg.watchStall, pageSize: cfg.pageSize, log: log, listed: sync.OnceFunc(func() { close(synced) })}
	// Only the operator's own Pods, Services and PVCs: the API server
	// filters by label.
	pw := &watcher[ownedEvent]{client: c, path: corePath(namespace, "pods"), selector: labelCluster, decode: decodePodEvent,
		stall: cfg.watchStall, pageSize: cfg.pageSize, log: log, marks: true}
	sw := &watcher[ownedEvent]{client: c, path: corePath(namespace, "services"), selector: labelCluster, decode: decodeServiceEvent,
		stall: cfg.watchStall, pageSize: cfg.pageSize, log: log, marks: true}
	vw := &watcher[ownedEvent]{client: c, path: corePath(namespace, "persistentvolumeclaims"), selector: labelCluster, decode: decodeClaimEvent,
		stall: cfg.watchStall, pageSize: cfg.pageSize, log: log, marks: true}
	rec := newRecorder(c, log)
	ctl := &controller{client: c, log: log, image: cfg.image, operatorImage: cfg.operatorImage, secretSync: cfg.secretSync, events: rec, cache: newCache()}
	q := newQueue()

	var wg sync.WaitGroup
	wg.Go(func() { cw.run(ctx, clusters) })
	wg.Go(func() { pw.run(ctx, pods) })
	wg.Go(func() { sw.run(ctx, services) })
	wg.Go(func() { vw.run(ctx, claims) })
	wg.Go(func() { rec.run(ctx, q.idle) })
	ctl.run(ctx, q, clusters, pods, services, claims, synced, cfg.workers)
	wg.Wait()
	log.Info("etcd-operator stopped")
	return nil
}

// connect picks how to reach the API server: -master if given, else the
// in-cluster API server when running in a Pod, else kubectl proxy's address.
func connect(cfg config) (*kube.Client, string, error) {
	inPod := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	if cfg.masterSet || !inPod {
		u, err := url.Parse(cfg.master)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, "", fmt.Errorf("-master %q: want a URL such as http://127.0.0.1:8001", cfg.master)
		}
		return kube.New(cfg.master, nil), cfg.namespace, nil
	}
	c, err := kube.InCluster(kube.ServiceAccountDir)
	if err != nil {
		return nil, "", fmt.Errorf("in-cluster config (or pass -master): %w", err)
	}
	namespace := cfg.namespace
	if !cfg.namespaceSet {
		b, err := os.ReadFile(kube.ServiceAccountDir + "/namespace")
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
