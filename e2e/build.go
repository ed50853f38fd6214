// Package e2e runs the operator against a real control plane (etcd,
// kube-apiserver, kube-controller-manager and kubectl proxy, on loopback)
// and, as root, a real node (containerd, kubelet, kube-proxy,
// kube-scheduler, CoreDNS, on a test bridge): the Kubernetes components and
// CoreDNS built from the Go module proxy, containerd, runc and the CNI
// plugins from Debian's packages. No Docker, no registry, no download site.
package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Versions of the components, as pinned in components/*/go.mod.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.6.16" // the CRD's default spec.version
	Etcd37Version     = "v3.7.3"  // for the upgrade tests
	CoreDNSVersion    = "v1.15.0"
	// The node's volume provisioner (see volumes.go).
	LocalPathProvisionerVersion = "v0.0.30"
)

// Binaries are the paths of the built components.
type Binaries struct {
	Etcd, APIServer, ControllerManager, Kubectl string
	// The node: kubelet, kube-proxy, kube-scheduler and cluster DNS; the
	// programs of the images the node runs (etcd per version, pause).
	Kubelet, KubeProxy, Scheduler, CoreDNS, Pause string
	// The node's dynamic volume provisioner.
	LocalPathProvisioner string
	EtcdImages           map[string]string // version -> static etcd
	// Etcdutl is etcdutl of EtcdVersion, which that version's image holds
	// beside etcd (a restored member's init container runs it); Etcdctl
	// its client, for the backup benchmark.
	Etcdutl, Etcdctl string
}

// RepoRoot finds the repository root from the working directory (the e2e
// tests run in e2e/; commands may run from the root or from e2e/).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "e2e", "components")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no e2e/components above %s: run from the repository", dir)
		}
	}
}

// CacheDir is where built components are kept between runs:
// $ETCD_OPERATOR_E2E_CACHE, or etcd-operator-e2e in the user's cache dir.
func CacheDir() (string, error) {
	if d := os.Getenv("ETCD_OPERATOR_E2E_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "etcd-operator-e2e"), nil
}

// BuildComponents builds etcd and the Kubernetes components once and reuses
// them afterwards. The cache key is the version plus a hash of the component
// modules' files, so editing them rebuilds and nothing else does. A first
// build takes about 17 minutes on 2 cores; progress goes to out.
func BuildComponents(out io.Writer) (Binaries, error) {
	root, err := RepoRoot()
	if err != nil {
		return Binaries{}, err
	}
	cache, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Binaries{}, err
	}
	// One build at a time, also across processes (tests, the local
	// command and the benchmark may start together).
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Binaries{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Binaries{}, err
	}

	// etcd, CoreDNS and pause are static (CGO_ENABLED=0): they also live
	// alone in images with nothing else in them.
	static := []string{"CGO_ENABLED=0"}
	etcdDir, err := buildModule(out, root, cache, "etcd", EtcdVersion, static, "", []string{"."}, []string{"etcd"}, "about 2 minutes")
	if err != nil {
		return Binaries{}, err
	}
	etcd37Dir, err := buildModule(out, root, cache, "etcd-v3.7", Etcd37Version, static, "", []string{"."}, []string{"etcd"}, "about 2 minutes")
	if err != nil {
		return Binaries{}, err
	}
	toolsDir, err := buildModule(out, root, cache, "etcd-tools", EtcdVersion, static, "",
		[]string{"go.etcd.io/etcd/etcdutl/v3", "go.etcd.io/etcd/etcdctl/v3"}, []string{"etcdutl", "etcdctl"}, "about a minute each")
	if err != nil {
		return Binaries{}, err
	}
	pauseDir, err := buildModule(out, root, cache, "pause", "v1", static, "", []string{"."}, []string{"pause"}, "seconds")
	if err != nil {
		return Binaries{}, err
	}
	dnsDir, err := buildModule(out, root, cache, "coredns", CoreDNSVersion, static, "", []string{"."}, []string{"coredns"}, "about 3 minutes")
	if err != nil {
		return Binaries{}, err
	}
	// Without these the components report v0.0.0-master.
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var ldflags string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ldflags += fmt.Sprintf(" -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean", pkg, KubernetesVersion, pkg, major, pkg, minor, pkg)
	}
	kubeBins := []string{"kube-apiserver", "kube-controller-manager", "kubectl", "kube-scheduler", "kube-proxy", "kubelet"}
	var kubePkgs []string
	for _, b := range kubeBins {
		kubePkgs = append(kubePkgs, "./"+b)
	}
	kubeDir, err := buildModule(out, root, cache, "kube", KubernetesVersion, nil, ldflags, kubePkgs, kubeBins, "about 15 minutes and 3 GiB")
	if err != nil {
		return Binaries{}, err
	}
	// Its main package is its module's root: built by import path, as a
	// tool of the wrapper module (see components/local-path-provisioner).
	lppDir, err := buildModule(out, root, cache, "local-path-provisioner", LocalPathProvisionerVersion, static,
		" -X main.VERSION="+LocalPathProvisionerVersion, []string{"github.com/rancher/local-path-provisioner"}, []string{"local-path-provisioner"}, "about 2 minutes")
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{
		Etcd:                 filepath.Join(etcdDir, "etcd"),
		APIServer:            filepath.Join(kubeDir, "kube-apiserver"),
		ControllerManager:    filepath.Join(kubeDir, "kube-controller-manager"),
		Kubectl:              filepath.Join(kubeDir, "kubectl"),
		Kubelet:              filepath.Join(kubeDir, "kubelet"),
		KubeProxy:            filepath.Join(kubeDir, "kube-proxy"),
		Scheduler:            filepath.Join(kubeDir, "kube-scheduler"),
		CoreDNS:              filepath.Join(dnsDir, "coredns"),
		Pause:                filepath.Join(pauseDir, "pause"),
		LocalPathProvisioner: filepath.Join(lppDir, "local-path-provisioner"),
		Etcdutl:              filepath.Join(toolsDir, "etcdutl"),
		Etcdctl:              filepath.Join(toolsDir, "etcdctl"),
		EtcdImages: map[string]string{
			EtcdVersion:   filepath.Join(etcdDir, "etcd"),
			Etcd37Version: filepath.Join(etcd37Dir, "etcd"),
		},
	}, nil
}

func buildModule(out io.Writer, root, cache, module, version string, env []string, ldflags string, pkgs, bins []string, cost string) (string, error) {
	src := filepath.Join(root, "e2e", "components", module)
	sum, err := hashDir(src)
	if err != nil {
		return "", err
	}
	// The flags are part of what is built: changing them rebuilds.
	sum = fmt.Sprintf("%x", sha256.Sum256([]byte(sum+strings.Join(env, " ")+ldflags)))
	dir := filepath.Join(cache, module+"-"+version+"-"+sum[:12])
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(cache, module+"-building-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for i, pkg := range pkgs {
		fmt.Fprintf(out, "e2e: building %s %s from the Go module proxy into %s (first run only; %s from a cold cache)\n", bins[i], version, dir, cost)
		start := time.Now()
		done := make(chan struct{})
		go func() {
			t := time.NewTicker(30 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					fmt.Fprintf(out, "e2e: still building %s (%s)\n", bins[i], time.Since(start).Round(time.Second))
				}
			}
		}()
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w"+ldflags, "-o", filepath.Join(tmp, bins[i]), pkg)
		cmd.Dir = src
		cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
		b, err := cmd.CombinedOutput()
		close(done)
		if err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", bins[i], err, b)
		}
		fmt.Fprintf(out, "e2e: built %s in %s\n", bins[i], time.Since(start).Round(time.Second))
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// hashDir hashes the names and contents of the files below dir.
func hashDir(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", strings.TrimPrefix(path, dir), len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}
