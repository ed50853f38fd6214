package e2e

// A real Kubernetes node on this machine, for the tests that need Pods to
// run: containerd with runc, the CNI bridge plugin, kubelet, kube-proxy,
// kube-scheduler and CoreDNS, all on a test bridge, and a volume
// provisioner (volumes.go). The idea: the operator's manifests are only
// right if the kubelet, cluster DNS and Services make a working etcd
// cluster of them. A run takes a lock, sweeps
// what a killed run left, and leaves the machine as it found it.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The node's fixed names. One node runs on a machine at a time (NodeLock
// serialises runs), so fixed names let a run find and sweep what a killed
// run left behind.
const (
	NodeName    = "etcd-operator-e2e-node"
	NodeBridge  = "eope2e0"
	NodeSubnet  = "10.213.0.0/24" // Pods; the bridge holds .1, the node's address
	NodeIP      = "10.213.0.1"
	ServiceCIDR = "10.96.0.0/16" // a /16: the benchmark makes more than 254 Services
	// KubernetesServiceIP is the first address of ServiceCIDR: the
	// ClusterIP of the kubernetes Service, which in-cluster clients use.
	KubernetesServiceIP = "10.96.0.1"
	// PauseImage is the sandbox image named in containerd's CRI config.
	PauseImage = "registry.k8s.io/pause:3.6"
	// RunOnNodeAnnotation on a namespace lets its Pods onto the node. The
	// PodNodeSelector admission plugin gives every other namespace's Pods
	// a node selector no node has: the tests that make hundreds of member
	// Pods (only their objects matter) leave them Pending, as before.
	RunOnNodeAnnotation = "scheduler.alpha.kubernetes.io/node-selector"
	noNodeSelector      = "etcd-operator-e2e/pods=nowhere"
)

// NodeDir is where the node keeps everything: containerd's root and state,
// the kubelet's root dir, CNI configuration. Fixed, for the sweep.
func NodeDir() string { return filepath.Join(os.TempDir(), "etcd-operator-e2e-node") }

// sysctls the kubelet (and the CNI bridge plugin) change: recorded before
// the node starts, restored after.
var nodeSysctls = []string{"vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops", "net.ipv4.ip_forward", "net.ipv4.conf.all.route_localnet"}

// Host directories the kubelet, containerd or CNI create whatever their
// flags say; removed after a run if they did not exist before it.
var nodeHostDirs = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/opt/containerd", "/run/containerd", "/var/lib/containerd", "/etc/cni", "/opt/cni", "/run/netns"}

// nodeState is what the machine looked like before the first node run
// that has not been cleaned up; kept on disk so a later run can restore it
// after a killed one.
type nodeState struct {
	Sysctls     map[string]string
	CreatedDirs []string
}

// Node is a real Kubernetes node on this machine: containerd with runc and
// the CNI bridge plugin, the kubelet, kube-proxy (iptables), kube-scheduler,
// CoreDNS and local-path-provisioner, all started by the harness, with the
// images the Pods use imported into containerd. Stop (or ControlPlane.Stop) undoes all of it.
type Node struct {
	cp        *ControlPlane
	Dir       string
	socket    string
	lock      *os.File
	stateFile string
	forwarder net.Listener
	fwdWG     sync.WaitGroup
	stopOnce  sync.Once
}

// NeedNodePackages installs containerd, runc, the CNI plugins, iptables and
// conntrack from Debian's packages when any is missing.
func NeedNodePackages(out io.Writer) error {
	missing := false
	for _, bin := range []string{"containerd", "runc", "ctr", "iptables", "conntrack", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = true
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		missing = true
	}
	if !missing {
		return nil
	}
	return aptInstall(out, "containerd", "runc", "containernetworking-plugins", "iptables", "conntrack", "iproute2")
}

// aptInstall installs Debian packages, saying so on out.
func aptInstall(out io.Writer, pkgs ...string) error {
	fmt.Fprintf(out, "e2e: installing %s (apt-get)\n", strings.Join(pkgs, " "))
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq"}, pkgs...)} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, b)
		}
	}
	return nil
}

// StartNode starts the node on the control plane, importing the images of
// NodeImages, the operator's (see BuildOperator) included. It needs root. It waits until the Node
// is Ready and untainted, cluster DNS answers and the kubernetes Service
// leads to the API server. On error it undoes what it did.
func (cp *ControlPlane) StartNode() (_ *Node, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the node needs root (network, mounts, containers)")
	}
	operatorBin, err := cp.BuildOperator()
	if err != nil {
		return nil, err
	}
	if err := NeedNodePackages(cp.out); err != nil {
		return nil, err
	}
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	n := &Node{cp: cp, Dir: NodeDir(), stateFile: filepath.Join(cache, "node-state.json")}
	n.socket = filepath.Join(n.Dir, "containerd", "containerd.sock")
	if n.lock, err = os.OpenFile(filepath.Join(cache, "node.lock"), os.O_CREATE|os.O_RDWR, 0o644); err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(n.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintln(cp.out, "e2e: another run has the node; waiting for it to finish")
		if err := syscall.Flock(int(n.lock.Fd()), syscall.LOCK_EX); err != nil {
			n.lock.Close()
			return nil, err
		}
	}
	// Only now, holding the lock: whatever has the node's names is from
	// a run that was killed.
	if err := n.sweep(); err != nil {
		n.lock.Close()
		return nil, fmt.Errorf("sweeping what an earlier run left: %w", err)
	}
	cp.node = n
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	start := time.Now()
	if err := n.recordState(); err != nil {
		return nil, err
	}
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "kubelet", "kubelet-pki", "pod-logs", "volume-plugins", "images"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	// The bridge first: the kubelet refuses a loopback node IP, and the
	// CNI bridge plugin takes the bridge that exists. The Service range
	// is routed onto it, so that nothing meant for a ClusterIP can leave
	// the machine, whatever kube-proxy is doing.
	for _, args := range [][]string{
		{"link", "add", NodeBridge, "type", "bridge"},
		{"addr", "add", NodeIP + "/24", "dev", NodeBridge},
		{"link", "set", NodeBridge, "up"},
		{"route", "add", ServiceCIDR, "dev", NodeBridge, "src", NodeIP},
	} {
		if err := run("ip", args...); err != nil {
			return nil, err
		}
	}
	if err := n.startContainerd(); err != nil {
		return nil, err
	}
	helper, err := BusyboxImage(cp.out)
	if err != nil {
		return nil, err
	}
	if err := n.ImportImages(append(NodeImages(cp.Bin, operatorBin), helper)...); err != nil {
		return nil, err
	}
	if err := n.startAPIForwarder(); err != nil {
		return nil, err
	}
	if err := n.startCoreDNS(); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if _, err := cp.start("kube-scheduler", cp.Bin.Scheduler, "--kubeconfig="+cp.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port)); err != nil {
		return nil, err
	}
	if err := n.startKubeProxy(); err != nil {
		return nil, err
	}
	if err := n.startKubelet(); err != nil {
		return nil, err
	}
	err = Eventually(2*time.Minute, "node "+NodeName+" Ready and untainted", func() (bool, error) {
		if cp.exited("kubelet") {
			return false, fmt.Errorf("the kubelet exited; see %s", cp.LogPath("kubelet"))
		}
		var node struct {
			Spec   struct{ Taints []any }
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		if cp.Get("/api/v1/nodes/"+NodeName, &node) != nil {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status == "True" && len(node.Spec.Taints) == 0, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	// Volumes, once the node can run the provisioner's helper Pods.
	if err := n.startProvisioner(); err != nil {
		return nil, err
	}
	fmt.Fprintf(cp.out, "e2e: node %s ready in %s (containerd, kubelet, kube-proxy, kube-scheduler, CoreDNS on %s; local-path-provisioner, volumes in %s)\n", NodeName, time.Since(start).Round(time.Millisecond), NodeIP, VolumesDir())
	return n, nil
}

func run(name string, args ...string) error {
	if b, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, b)
	}
	return nil
}

func (n *Node) recordState() error {
	// The sweep before this restored (and removed) a killed run's
	// record, so the machine is as it was: record it now, before the
	// kubelet and the CNI plugin change anything.
	st := nodeState{Sysctls: map[string]string{}}
	for _, s := range nodeSysctls {
		if b, err := os.ReadFile(sysctlPath(s)); err == nil {
			st.Sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	for _, d := range nodeHostDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			st.CreatedDirs = append(st.CreatedDirs, d)
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(n.stateFile, b, 0o644)
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

func (n *Node) startContainerd() error {
	d := filepath.Join(n.Dir, "containerd")
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %[5]q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[6]q
    # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails
    # ("can't get final child's PID from pipe: EOF").
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %[7]q
`, filepath.Join(d, "root"), filepath.Join(d, "state"), n.socket, n.socket+".ttrpc", filepath.Join(d, "opt"), PauseImage, filepath.Join(n.Dir, "cni", "net.d"))
	cni := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "eope2e", "plugins": [{
  "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q, "rangeStart": "10.213.0.10", "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
}]}`, NodeBridge, filepath.Join(n.Dir, "cni", "ipam"), NodeSubnet, NodeIP)
	if err := os.WriteFile(filepath.Join(d, "config.toml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "cni", "net.d", "10-eope2e.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	// Every image the tests use is imported; a pull of anything else (a
	// test's tag that does not exist) must fail here, not reach a registry:
	// containerd's pulls go through a proxy that nothing serves.
	noPull := []string{"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=", "https_proxy=", "http_proxy=", "no_proxy="}
	if _, err := n.cp.StartProcess("containerd", noPull, "containerd", "--config="+filepath.Join(d, "config.toml")); err != nil {
		return err
	}
	return Eventually(60*time.Second, "containerd", func() (bool, error) {
		if n.cp.exited("containerd") {
			return false, fmt.Errorf("containerd exited; see %s", n.cp.LogPath("containerd"))
		}
		return n.ctr("version") == nil, nil
	})
}

func (n *Node) ctr(args ...string) error {
	return run("ctr", append([]string{"--address=" + n.socket, "--namespace=k8s.io"}, args...)...)
}

// ImportImages writes each image as a tarball and imports it into the
// node's containerd, where Pods find it by name without a pull.
func (n *Node) ImportImages(imgs ...Image) error {
	for i, img := range imgs {
		path := filepath.Join(n.Dir, "images", fmt.Sprintf("%d.tar", i))
		if err := WriteImage(img, path); err != nil {
			return err
		}
		if err := n.ctr("images", "import", "--no-unpack=false", path); err != nil {
			return fmt.Errorf("import %s: %w", img.Ref, err)
		}
		os.Remove(path)
	}
	return nil
}

// startAPIForwarder makes the kubernetes Service lead to the API server,
// which listens on 127.0.0.1 only: a forwarder on the node's address and an
// EndpointSlice naming it, which kube-proxy turns into the ClusterIP's rules.
func (n *Node) startAPIForwarder() error {
	port := n.cp.apiPort
	l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", NodeIP, port))
	if err != nil {
		return fmt.Errorf("forwarder for the API server: %w", err)
	}
	n.forwarder = l
	n.fwdWG.Add(1)
	go func() {
		defer n.fwdWG.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, up)
			}()
		}
	}()
	slice := fmt.Sprintf(`{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
  "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "etcd-operator-e2e"}},
  "addressType": "IPv4", "endpoints": [{"addresses": [%q], "conditions": {"ready": true}}],
  "ports": [{"name": "https", "port": %d, "protocol": "TCP"}]}`, NodeIP, port)
	code, b, err := n.cp.Do("POST", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", []byte(slice), "application/json")
	if err != nil || (code != 201 && code != 409) {
		return fmt.Errorf("EndpointSlice for the kubernetes Service: %d %s %v", code, b, err)
	}
	return nil
}

func (n *Node) startCoreDNS() error {
	ready, err := freePort()
	if err != nil {
		return err
	}
	// No forward plugin: the tests resolve cluster names only, and no
	// query may leave the machine.
	corefile := fmt.Sprintf(`.:53 {
    bind %s
    errors
    ready 127.0.0.1:%d
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s e2e
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
`, NodeIP, ready, n.cp.Kubeconfig)
	path := filepath.Join(n.Dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return err
	}
	if _, err := n.cp.start("coredns", n.cp.Bin.CoreDNS, "-conf", path); err != nil {
		return err
	}
	return Eventually(60*time.Second, "CoreDNS ready", func() (bool, error) {
		if n.cp.exited("coredns") {
			return false, fmt.Errorf("CoreDNS exited; see %s", n.cp.LogPath("coredns"))
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", ready))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
}

func (n *Node) startKubeProxy() error {
	healthz, err := freePort()
	if err != nil {
		return err
	}
	metrics, err := freePort()
	if err != nil {
		return err
	}
	// masqueradeAll makes Pod -> ClusterIP -> Pod work on one bridge
	// without br_netfilter; conntrack settings of 0 and no localhost
	// NodePorts keep it from changing sysctls.
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
clusterCIDR: %s
nodePortAddresses: [%s/32]
iptables:
  masqueradeAll: true
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, n.cp.Kubeconfig, NodeName, NodeIP, healthz, metrics, NodeSubnet, NodeIP)
	path := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	_, err = n.cp.start("kube-proxy", n.cp.Bin.KubeProxy, "--config="+path)
	return err
}

func (n *Node) startKubelet() error {
	resolv := filepath.Join(n.Dir, "resolv.conf")
	// Pods get cluster DNS from clusterDNS; nothing upstream.
	if err := os.WriteFile(resolv, []byte("# no resolver outside the test cluster\n"), 0o644); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%[2]s
clusterDNS: [%[1]s]
clusterDomain: cluster.local
resolvConf: %[3]s
podLogsDir: %[4]s
volumePluginDir: %[5]s
# Nothing can be pulled again: an image the kubelet deletes is gone.
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
serializeImagePulls: false
# A renewed certificate reaches a Pod's mounted Secret at the kubelet's next
# sync of the Pod, a minute by default: TestCertRotation's certificates live
# 2 minutes and are renewed after 80 s.
syncFrequency: 10s
`, NodeIP, n.socket, resolv, filepath.Join(n.Dir, "pod-logs"), filepath.Join(n.Dir, "volume-plugins"))
	path := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	_, err := n.cp.start("kubelet", n.cp.Bin.Kubelet, "--config="+path, "--kubeconfig="+n.cp.Kubeconfig,
		"--root-dir="+filepath.Join(n.Dir, "kubelet"), "--cert-dir="+filepath.Join(n.Dir, "kubelet-pki"),
		"--node-ip="+NodeIP, "--hostname-override="+NodeName)
	return err
}

// Stop stops the node's processes and undoes what it did to the machine.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		// The provisioner first, so that it starts no helper Pod; then
		// the kubelet, so that it restarts nothing; then the containers,
		// which containerd's shims would otherwise keep. The volumes'
		// directories go with NodeDir in the sweep.
		n.cp.StopProcess(localPathProcess, 5*time.Second)
		n.cp.StopProcess("kubelet", 10*time.Second)
		killCgroupProcs()
		n.cp.StopProcess("containerd", 10*time.Second)
		for _, p := range []string{"kube-proxy", "kube-scheduler", "coredns"} {
			n.cp.StopProcess(p, 5*time.Second)
		}
		if n.forwarder != nil {
			n.forwarder.Close()
			n.fwdWG.Wait()
		}
		if err := n.sweep(); err != nil {
			fmt.Fprintln(n.cp.out, "e2e: cleaning up the node:", err)
		}
		n.lock.Close()
	})
}

// sweep removes everything a node run leaves on the machine, whether that
// run stopped or was killed: processes (found by the node's directory on
// their command line, and in the kubelet's cgroups), mounts below the node's
// directory, the bridge and its veths, the iptables chains kube-proxy and
// the kubelet made, the cgroups, the host directories that did not exist
// before, and the sysctls. Every step runs; the errors are joined.
func (n *Node) sweep() error {
	var errs []error
	killCgroupProcs()
	killByCmdline(n.Dir)
	errs = append(errs, unmountBelow(n.Dir))
	// Veths of Pods whose network namespaces are gone went with them; any
	// left is on the bridge.
	if links, err := exec.Command("ip", "-o", "link", "show", "master", NodeBridge).Output(); err == nil {
		for _, line := range strings.Split(string(links), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
				_ = run("ip", "link", "del", name)
			}
		}
	}
	if exec.Command("ip", "link", "show", NodeBridge).Run() == nil {
		errs = append(errs, run("ip", "link", "del", NodeBridge))
	}
	errs = append(errs, removeChains())
	removeCgroups()
	if b, err := os.ReadFile(n.stateFile); err == nil {
		var st nodeState
		if err := json.Unmarshal(b, &st); err != nil {
			errs = append(errs, err)
		}
		for k, v := range st.Sysctls {
			if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restore %s: %w", k, err))
			}
		}
		for _, d := range st.CreatedDirs {
			errs = append(errs, unmountBelow(d))
			errs = append(errs, os.RemoveAll(d))
		}
		errs = append(errs, os.Remove(n.stateFile))
	}
	errs = append(errs, os.RemoveAll(n.Dir))
	return errors.Join(errs...)
}

// killByCmdline SIGKILLs every process with s in its command line (the
// node's containerd, its shims, kubelet, kube-proxy, CoreDNS), by PID.
func killByCmdline(s string) {
	self := os.Getpid()
	for _, pid := range pids() {
		if pid == self {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(b), s) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitGone(pid)
		}
	}
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func waitGone(pid int) {
	_ = Eventually(10*time.Second, fmt.Sprintf("process %d to end", pid), func() (bool, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// A zombie (state Z) is gone for our purposes: its parent reaps it.
		return err != nil || strings.Contains(string(b), ") Z "), nil
	})
}

// kubeCgroups are the cgroup directories the kubelet made (its Pods live
// in kubepods), in every hierarchy, deepest first.
func kubeCgroups() []string {
	var dirs []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if _, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	for _, r := range roots {
		_ = filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// killCgroupProcs SIGKILLs every process in the kubelet's Pod cgroups: the
// containers and the sandboxes.
func killCgroupProcs() {
	for _, d := range kubeCgroups() {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				waitGone(pid)
			}
		}
	}
}

func removeCgroups() {
	for _, d := range kubeCgroups() {
		_ = syscall.Rmdir(d)
	}
}

// unmountBelow unmounts every mount point at or below dir, deepest first
// (the kubelet makes its root dir an rshared bind mount; containerd mounts
// rootfs overlays, Pod network namespaces, volumes).
func unmountBelow(dir string) error {
	var errs []error
	for range 3 { // a lazy unmount can reveal mounts under mounts
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		var points []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 4 {
				p := unescapeMount(fields[4])
				if p == dir || strings.HasPrefix(p, dir+"/") {
					points = append(points, p)
				}
			}
		}
		f.Close()
		if len(points) == 0 {
			return nil
		}
		slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
		for _, p := range points {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// removeChains deletes the KUBE-* chains (kube-proxy's and the kubelet's)
// and the rules of the built-in chains that jump to them, in every table,
// for IPv4 and IPv6. No such chain is on this machine otherwise.
func removeChains() error {
	var errs []error
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(cmd); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, err := exec.Command(cmd, "-w", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			var chains []string
			builtin := map[string][]int{}
			count := map[string]int{}
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Fields(line)
				if len(f) < 2 {
					continue
				}
				switch f[0] {
				case "-N":
					if strings.HasPrefix(f[1], "KUBE-") {
						chains = append(chains, f[1])
					}
				case "-A":
					count[f[1]]++
					if !strings.HasPrefix(f[1], "KUBE-") && strings.Contains(line, "KUBE-") {
						builtin[f[1]] = append(builtin[f[1]], count[f[1]])
					}
				}
			}
			for chain, nums := range builtin {
				slices.Reverse(nums) // delete by number, last first
				for _, num := range nums {
					errs = append(errs, run(cmd, "-w", "-t", table, "-D", chain, strconv.Itoa(num)))
				}
			}
			for _, c := range chains {
				errs = append(errs, run(cmd, "-w", "-t", table, "-F", c))
			}
			for _, c := range chains {
				errs = append(errs, run(cmd, "-w", "-t", table, "-X", c))
			}
		}
	}
	return errors.Join(errs...)
}

// PodProcesses returns the PIDs of the processes of a Pod's containers
// on this machine (not its sandbox's pause), found by the Pod's UID in
// their cgroup paths (the kubelet's cgroupfs driver names a Pod's cgroup
// pod<UID>). Keep the UID to look after the Pod is gone.
func PodProcesses(podUID string) []int {
	if podUID == "" {
		return nil
	}
	var out []int
	for _, pid := range pids() {
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || !strings.Contains(string(cg), "/pod"+podUID+"/") {
			continue
		}
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && string(cmd) != "/pause\x00" {
			out = append(out, pid)
		}
	}
	return out
}

// PodUID is a Pod's UID, or "" when there is no such Pod.
func (cp *ControlPlane) PodUID(ns, pod string) string {
	var p struct{ Metadata struct{ UID string } }
	if cp.Get("/api/v1/namespaces/"+ns+"/pods/"+pod, &p) != nil {
		return ""
	}
	return p.Metadata.UID
}

// KillMember SIGKILLs the processes of a member Pod's container from the
// host, as a crash would end etcd: the member images hold nothing but etcd
// (no shell for kubectl exec, no kill). It returns the PIDs it killed;
// none is an error.
func (cp *ControlPlane) KillMember(ns, pod string) ([]int, error) {
	uid := cp.PodUID(ns, pod)
	if uid == "" {
		return nil, fmt.Errorf("no Pod %s/%s", ns, pod)
	}
	killed := PodProcesses(uid)
	if len(killed) == 0 {
		return nil, fmt.Errorf("no process of Pod %s/%s runs", ns, pod)
	}
	for _, pid := range killed {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("kill %d of %s/%s: %w", pid, ns, pod, err)
		}
	}
	return killed, nil
}

// PodLogs returns a container's log through the API server (the kubelet
// serves it), as kubectl logs does; container may be empty for a Pod of
// one container.
func (cp *ControlPlane) PodLogs(ns, pod, container string) (string, error) {
	path := "/api/v1/namespaces/" + ns + "/pods/" + pod + "/log"
	if container != "" {
		path += "?container=" + container
	}
	code, b, err := cp.Do("GET", path, nil, "")
	if err != nil {
		return "", fmt.Errorf("logs of %s/%s: %w", ns, pod, err)
	}
	if code != 200 {
		return "", fmt.Errorf("logs of %s/%s: %d: %s", ns, pod, code, b)
	}
	return string(b), nil
}

// Exec runs a command in a Pod's (first) container with kubectl exec.
func (cp *ControlPlane) Exec(ns, pod string, command ...string) (string, error) {
	return cp.Kubectl("", append([]string{"exec", "-n", ns, pod, "--"}, command...)...)
}

// PodIP is the Pod's IP once the kubelet has reported it, else "". The
// host reaches Pod IPs (it is on the bridge), and ClusterIPs through
// kube-proxy's OUTPUT rules.
func (cp *ControlPlane) PodIP(ns, pod string) string {
	var p struct {
		Status struct {
			PodIP string `json:"podIP"`
		}
	}
	if cp.Get("/api/v1/namespaces/"+ns+"/pods/"+pod, &p) != nil {
		return ""
	}
	return p.Status.PodIP
}

// ClusterDNS resolves a name through the node's CoreDNS, as a Pod's
// resolver does (but without its search domains: give the full name).
func ClusterDNS(ctx context.Context, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, NodeIP+":53")
	}}
	return r.LookupHost(ctx, name)
}
