package e2e

// A Kubernetes control plane made of the real programs, on loopback: etcd,
// kube-apiserver, kube-controller-manager and kubectl proxy, with the CRD
// of examples/crd.yaml applied. Each runs as a child process with its log
// in Dir and dies with the test process. The idea it shows: an operator is
// only a client of the API server, so the honest test gives it the real
// one; schema validation, garbage collection, watch bookmarks and 410s are
// then Kubernetes' own, not a fake's.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// AdminToken authenticates the tests (and kubectl, and the controller
// manager) as a member of system:masters.
const AdminToken = "e2e-admin-token"

// ControlPlane is a running local control plane: every process listens on
// 127.0.0.1 only, on free ports, and keeps its log in Dir.
type ControlPlane struct {
	Dir          string
	Bin          Binaries
	EtcdURL      string
	APIServerURL string // https, the admin token authenticates
	ProxyURL     string // kubectl proxy: what the operator talks to
	Kubeconfig   string
	CAFile       string // signs the API server's serving certificate

	out       io.Writer
	apiPort   int
	proxyPort int
	http      *http.Client
	mu        sync.Mutex
	procs     map[string]*Process
	node      *Node
	probes    int
	// The operator's binary, built once by BuildOperator.
	buildOperator sync.Once
	operator      string
	operatorErr   error
}

// Process is one child process with its log file.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// Up is what the tests, cmd/local and cmd/bench start from: it builds the
// components (once) and starts a control plane, with the CRD applied, in a
// new temporary directory named after prefix.
func Up(out io.Writer, prefix string, proxyPort int) (*ControlPlane, error) {
	bin, err := BuildComponents(out)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	cp, err := Start(out, bin, dir, proxyPort)
	if err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, dir)
	}
	return cp, nil
}

// ApplyCRD applies examples/crd.yaml and waits until it is served.
func (cp *ControlPlane) ApplyCRD() error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if _, err := cp.Kubectl("", "apply", "-f", filepath.Join(root, "examples", "crd.yaml")); err != nil {
		return err
	}
	_, err = cp.Kubectl("", "wait", "--for=condition=Established", "--timeout=60s", "crd/etcdclusters.coreos.com")
	return err
}

// Start starts etcd, kube-apiserver, applies examples/crd.yaml and the
// default StorageClass (volumes.go), starts kube-controller-manager (the
// garbage collector, the ServiceAccount controller, which creates the
// default ServiceAccount that Pods need, and the volume controllers) and
// kubectl proxy, on proxyPort if it is not 0 and free, and waits until the
// default namespace can take Pods. On error it stops what it started.
func Start(out io.Writer, bin Binaries, dir string, proxyPort int) (_ *ControlPlane, err error) {
	cp := &ControlPlane{Dir: dir, Bin: bin, out: out, procs: map[string]*Process{}}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	if err := cp.writeCredentials(); err != nil {
		return nil, err
	}
	if err := cp.startEtcd(); err != nil {
		return nil, err
	}
	if cp.apiPort, err = freePort(); err != nil {
		return nil, err
	}
	cp.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", cp.apiPort)
	if err := cp.writeKubeconfig(); err != nil {
		return nil, err
	}
	if err := cp.StartAPIServer(); err != nil {
		return nil, err
	}
	// The CRD before the controllers: the garbage collector discovers
	// resources when it starts and then only every 30 seconds.
	if err := cp.ApplyCRD(); err != nil {
		return nil, err
	}
	if err := cp.applyStorageClass(); err != nil {
		return nil, err
	}
	kcmPort, err := freePort()
	if err != nil {
		return nil, err
	}
	if _, err := cp.start("kube-controller-manager", bin.ControllerManager,
		"--kubeconfig="+cp.Kubeconfig,
		// What Services, Deployments, ServiceAccount tokens, namespace
		// deletion, a new node's not-ready taint and volumes need, nothing
		// more. Volumes: the PersistentVolume binder (it hands a claim to
		// its class's provisioner and binds the volume made for it) and
		// the two protection controllers, which take the finalizers off a
		// claim no Pod uses and a volume no claim is bound to, so that
		// they can be deleted.
		"--controllers=garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,"+
			"root-ca-certificate-publisher-controller,endpointslice-controller,endpoints-controller,"+
			"replicaset-controller,deployment-controller,node-lifecycle-controller,namespace-controller,pod-garbage-collector-controller,"+
			"persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller",
		"--root-ca-file="+cp.CAFile,
		"--service-account-private-key-file="+filepath.Join(dir, "sa.key"),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", kcmPort),
	); err != nil {
		return nil, err
	}
	if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", proxyPort)); err == nil && proxyPort != 0 {
		l.Close()
		cp.proxyPort = proxyPort
	} else if cp.proxyPort, err = freePort(); err != nil {
		return nil, err
	}
	cp.ProxyURL = fmt.Sprintf("http://127.0.0.1:%d", cp.proxyPort)
	if err := cp.StartProxy(); err != nil {
		return nil, err
	}
	return cp, cp.CreateNamespace("default")
}

// CreateNamespace makes sure a namespace exists and can take Pods: those are
// refused until the ServiceAccount controller has made its default
// ServiceAccount.
func (cp *ControlPlane) CreateNamespace(ns string) error {
	if err := cp.waitTerminated(ns); err != nil {
		return err
	}
	if _, err := cp.Kubectl("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ns+"\n", "apply", "-f", "-"); err != nil {
		return err
	}
	return cp.waitDefaultServiceAccount(ns)
}

// waitTerminated waits until no namespace ns is being deleted: one still
// terminating (a test run again with -count) would take the new objects
// with it once its finalizers are done.
func (cp *ControlPlane) waitTerminated(ns string) error {
	return Eventually(3*time.Minute, "namespace "+ns+" to be deleted", func() (bool, error) {
		code, b, err := cp.Do("GET", "/api/v1/namespaces/"+ns, nil, "")
		if err != nil {
			return false, err
		}
		var o struct{ Status struct{ Phase string } }
		if code == 200 && json.Unmarshal(b, &o) == nil && o.Status.Phase == "Terminating" {
			return false, nil
		}
		return code == 200 || code == 404, nil
	})
}

func (cp *ControlPlane) waitDefaultServiceAccount(ns string) error {
	return Eventually(2*time.Minute, "the default ServiceAccount in "+ns, func() (bool, error) {
		code, _, _ := cp.Do("GET", "/api/v1/namespaces/"+ns+"/serviceaccounts/default", nil, "")
		return code == 200, nil
	})
}

// CreateNodeNamespace is CreateNamespace for a namespace whose Pods the
// node runs (every other namespace's Pods stay Pending).
func (cp *ControlPlane) CreateNodeNamespace(ns string) error {
	if err := cp.waitTerminated(ns); err != nil {
		return err
	}
	yaml := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  annotations:\n    %s: \"\"\n", ns, RunOnNodeAnnotation)
	if _, err := cp.Kubectl(yaml, "apply", "-f", "-"); err != nil {
		return err
	}
	return cp.waitDefaultServiceAccount(ns)
}

// WaitPhase waits until the EtcdCluster ns/name reports phase in its
// status, and returns the object. Every wait on a cluster's progress (the
// tests, cmd/local) goes through here, so what "done" means is said once.
func (cp *ControlPlane) WaitPhase(ns, name, phase string, timeout time.Duration) (map[string]any, error) {
	var o map[string]any
	err := Eventually(timeout, ns+"/"+name+" in phase "+phase, func() (bool, error) {
		o = nil
		if err := cp.Get("/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/"+name, &o); err != nil {
			return false, nil
		}
		st, _ := o["status"].(map[string]any)
		return st["phase"] == phase, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w; last status: %v", err, o["status"])
	}
	return o, nil
}

// WaitCreated waits until an EtcdCluster's objects all exist: its status
// for the current generation says its members run (Running) or that it
// waits for them to start, as in a namespace whose Pods no node runs.
func (cp *ControlPlane) WaitCreated(ns, name string, timeout time.Duration) (map[string]any, error) {
	var o map[string]any
	err := Eventually(timeout, ns+"/"+name+" created", func() (bool, error) {
		o = nil
		if err := cp.Get("/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/"+name, &o); err != nil {
			return false, nil
		}
		meta, _ := o["metadata"].(map[string]any)
		st, _ := o["status"].(map[string]any)
		if gen, _ := meta["generation"].(float64); st["observedGeneration"] != gen {
			return false, nil
		}
		conds, _ := st["conditions"].([]any)
		for _, c := range conds {
			if c, _ := c.(map[string]any); c["type"] == "Progressing" && c["reason"] == "WaitingForMembers" {
				return true, nil
			}
		}
		return st["phase"] == "Running", nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w; last status: %v", err, o["status"])
	}
	return o, nil
}

// WaitControllers waits until kube-controller-manager acts on new objects
// again (after an API server restart): a new namespace gets its default
// ServiceAccount. The namespace is deleted afterwards.
func (cp *ControlPlane) WaitControllers() error {
	cp.mu.Lock()
	cp.probes++
	ns := fmt.Sprintf("e2e-probe-%d", cp.probes)
	cp.mu.Unlock()
	start := time.Now()
	if _, err := cp.Kubectl("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ns+"\n", "create", "-f", "-"); err != nil {
		return err
	}
	err := Eventually(3*time.Minute, "the controllers to work again (a default ServiceAccount in "+ns+")", func() (bool, error) {
		code, _, _ := cp.Do("GET", "/api/v1/namespaces/"+ns+"/serviceaccounts/default", nil, "")
		return code == 200, nil
	})
	fmt.Fprintf(cp.out, "e2e: the controllers worked again %s after the probe\n", time.Since(start).Round(time.Millisecond))
	if _, derr := cp.Kubectl("", "delete", "namespace", ns, "--wait=false"); err == nil {
		err = derr
	}
	return err
}

// Node is the running node, or nil.
func (cp *ControlPlane) Node() *Node { return cp.node }

func (cp *ControlPlane) writeCredentials() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd-operator-e2e-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		// In-cluster clients reach it at the kubernetes Service's ClusterIP,
		// through a forwarder on the node's address.
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP), net.ParseIP(NodeIP)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	// The ServiceAccount token signing key: one RSA key serves as both
	// the signing key and the verification key.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	cp.CAFile = filepath.Join(cp.Dir, "ca.crt")
	files := map[string][]byte{
		"ca.crt":        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"apiserver.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"apiserver.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		"sa.key":        pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"tokens.csv":    []byte(AdminToken + ",admin,admin,system:masters\n"),
		"admission.yaml": []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodNodeSelector
  path: podnodeselector.yaml
`),
		"podnodeselector.yaml": []byte("podNodeSelectorPluginConfig:\n  clusterDefaultNodeSelector: " + noNodeSelector + "\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(cp.Dir, name), b, 0o600); err != nil {
			return err
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cp.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return nil
}

func (cp *ControlPlane) startEtcd() error {
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	cp.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if _, err := cp.start("etcd", cp.Bin.Etcd,
		"--name=e2e", "--data-dir="+filepath.Join(cp.Dir, "etcd-data"),
		"--listen-client-urls="+cp.EtcdURL, "--advertise-client-urls="+cp.EtcdURL,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=e2e="+peer,
		// Lets the API server's watch cache send BOOKMARKs on idle watches.
		"--watch-progress-notify-interval=5s",
		"--unsafe-no-fsync", // a test store; speed over durability
		"--log-level=warn",
	); err != nil {
		return err
	}
	return Eventually(30*time.Second, "etcd /health", func() (bool, error) {
		resp, err := http.Get(cp.EtcdURL + "/health")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"health":"true"`), nil
	})
}

// StartAPIServer starts kube-apiserver on its port (the same one after a
// restart) with any extra flags, and waits until it is ready.
func (cp *ControlPlane) StartAPIServer(extra ...string) error {
	args := append([]string{
		"--etcd-servers=" + cp.EtcdURL,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", cp.apiPort),
		// 1.37 refuses a loopback advertise address unless the endpoint
		// reconciler, which would publish it in the kubernetes Service, is off.
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--tls-cert-file=" + filepath.Join(cp.Dir, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(cp.Dir, "apiserver.key"),
		"--token-auth-file=" + filepath.Join(cp.Dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		// As in many production clusters: setting blockOwnerDeletion needs
		// update on the owner's finalizers, which examples/deploy.yaml grants.
		// PodNodeSelector: only the namespaces that ask for it (see
		// CreateNodeNamespace) get their Pods run by the node.
		"--enable-admission-plugins=OwnerReferencesPermissionEnforcement,PodNodeSelector",
		"--admission-control-config-file=" + filepath.Join(cp.Dir, "admission.yaml"),
		// The node's hostname does not resolve: kubectl logs and exec go
		// to its InternalIP.
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(cp.Dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(cp.Dir, "sa.key"),
		// A /16: 200 clusters of 3 members need 800 Services, a /24 has 254.
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--profiling=false",
	}, extra...)
	if _, err := cp.start("kube-apiserver", cp.Bin.APIServer, args...); err != nil {
		return err
	}
	return Eventually(90*time.Second, "kube-apiserver /readyz", func() (bool, error) {
		code, _, err := cp.Do("GET", "/readyz", nil, "")
		if err != nil && cp.exited("kube-apiserver") {
			return false, fmt.Errorf("kube-apiserver exited; see %s", cp.LogPath("kube-apiserver"))
		}
		return code == 200, nil
	})
}

// StartProxy runs kubectl proxy, the README's way to reach the API server.
func (cp *ControlPlane) StartProxy() error {
	if _, err := cp.start("kubectl-proxy", cp.Bin.Kubectl, "--kubeconfig="+cp.Kubeconfig,
		"proxy", "--address=127.0.0.1", fmt.Sprintf("--port=%d", cp.proxyPort)); err != nil {
		return err
	}
	return Eventually(30*time.Second, "kubectl proxy", func() (bool, error) {
		resp, err := http.Get(cp.ProxyURL + "/api")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
}

func (cp *ControlPlane) writeKubeconfig() error {
	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: admin
    namespace: default
current-context: e2e
`, cp.APIServerURL, cp.CAFile, AdminToken)
	return os.WriteFile(cp.Kubeconfig, []byte(kc), 0o600)
}

// start runs a binary with its output in Dir/NAME.log. The child gets
// SIGKILL if the test process dies, so nothing outlives a crashed test.
func (cp *ControlPlane) start(name, bin string, args ...string) (*Process, error) {
	return cp.StartProcess(name, nil, bin, args...)
}

// StartProcess is start with extra environment variables.
func (cp *ControlPlane) StartProcess(name string, env []string, bin string, args ...string) (*Process, error) {
	return cp.startTee(name, env, nil, bin, args...)
}

// startTee is StartProcess that also copies the output to tee, when set.
func (cp *ControlPlane) startTee(name string, env []string, tee io.Writer, bin string, args ...string) (*Process, error) {
	p := &Process{Name: name, LogPath: cp.LogPath(name), done: make(chan struct{})}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "==== %s: %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	var w io.Writer = logFile
	if tee != nil {
		w = io.MultiWriter(logFile, tee)
	}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	cp.mu.Lock()
	cp.procs[name] = p
	cp.mu.Unlock()
	return p, nil
}

// LogPath is where a process's output goes.
func (cp *ControlPlane) LogPath(name string) string { return filepath.Join(cp.Dir, name+".log") }

func (cp *ControlPlane) exited(name string) bool {
	cp.mu.Lock()
	p := cp.procs[name]
	cp.mu.Unlock()
	if p == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// StopProcess sends SIGTERM, then SIGKILL after grace, and waits for the
// process to exit. (A SIGTERMed kube-apiserver keeps its watches open for up
// to a minute; the tests do not wait for that.)
func (cp *ControlPlane) StopProcess(name string, grace time.Duration) {
	cp.mu.Lock()
	p := cp.procs[name]
	delete(cp.procs, name)
	cp.mu.Unlock()
	if p != nil {
		p.Stop(grace)
	}
}

// KillProcess kills a process at once (SIGKILL to its process group), as
// a lost node or the OOM killer would: it gets no chance to clean up.
func (cp *ControlPlane) KillProcess(name string) {
	cp.mu.Lock()
	p := cp.procs[name]
	delete(cp.procs, name)
	cp.mu.Unlock()
	if p != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Stop stops a process: SIGTERM, then SIGKILL to its process group.
func (p *Process) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop stops every process, newest first, and the node if it runs.
func (cp *ControlPlane) Stop() {
	if cp.node != nil {
		cp.node.Stop()
	}
	for _, name := range []string{"etcd-operator", "etcd-operator-incluster", "etcd-operator-members", "etcd-operator-bench", "kubectl-proxy", "kube-controller-manager", "kube-apiserver", "etcd"} {
		cp.StopProcess(name, 5*time.Second)
	}
	cp.mu.Lock()
	rest := cp.procs
	cp.procs = map[string]*Process{}
	cp.mu.Unlock()
	for _, p := range rest {
		p.Stop(5 * time.Second)
	}
}

// Do sends a request to the API server as admin.
func (cp *ControlPlane) Do(method, path string, body []byte, contentType string) (int, []byte, error) {
	return cp.DoAs(AdminToken, method, path, body, contentType)
}

// DoAs sends a request to the API server with a bearer token.
func (cp *ControlPlane) DoAs(token, method, path string, body []byte, contentType string) (int, []byte, error) {
	req, err := http.NewRequest(method, cp.APIServerURL+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := cp.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Get decodes a GET of path into v; it fails on any status but 200.
func (cp *ControlPlane) Get(path string, v any) error {
	code, b, err := cp.Do("GET", path, nil, "")
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("GET %s: %d: %s", path, code, b)
	}
	return json.Unmarshal(b, v)
}

// Kubectl runs the kubectl built with the API server, as admin.
func (cp *ControlPlane) Kubectl(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cp.Bin.Kubectl, append([]string{"--kubeconfig=" + cp.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// DumpLogs writes the last lines of every log in Dir.
func (cp *ControlPlane) DumpLogs(w io.Writer, lines int) {
	logs, _ := filepath.Glob(filepath.Join(cp.Dir, "*.log"))
	for _, path := range logs {
		b, _ := os.ReadFile(path)
		all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		fmt.Fprintf(w, "---- last %d lines of %s\n%s\n", lines, path, strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
}

// Eventually polls cond until it is true, it returns an error, or timeout
// passes. It is for waiting on other processes, which cannot signal us.
func Eventually(timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
