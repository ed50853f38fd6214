package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Agent is a small node agent: it plays kubelet, cluster DNS and kube-proxy
// for the Pods of one namespace, on this machine, with no container runtime.
//
//   - It registers a Node, binds each Pod to it (the binding subresource; no
//     scheduler runs) and runs the Pod's container command, with the etcd
//     built from the module proxy standing in for the image's
//     /usr/local/bin/etcd: same arguments, nothing rewritten.
//   - Each Pod gets its own network namespace, with a veth pair onto a
//     bridge and an address in a test-only /24, so every member listens on
//     0.0.0.0:2379/2380 as in a Pod. emptyDir volumes are directories
//     mounted at their mountPath in the Pod's own mount namespace.
//   - Name resolution comes from a hosts file per Pod (ip netns exec mounts
//     /etc/netns/NAME/hosts over /etc/hosts): each Service name resolves to
//     the address of a Pod it selects - what cluster DNS plus kube-proxy give
//     a Service with one backend. A real node resolves the Service's
//     ClusterIP and load-balances; there is no ClusterIP here.
//   - It reports Pod status (phase, podIP, container state) through the status
//     subresource, and when a Pod is deleted it stops the process and
//     confirms the deletion, as a kubelet does.
type Agent struct {
	cp        *ControlPlane
	namespace string
	node      string
	etcd      string // stands in for /usr/local/bin/etcd
	dir       string
	prefix    string // of network namespace, link and /etc/netns names
	subnet    string // first three octets, e.g. "10.213.7"
	bridge    string

	mu    sync.Mutex
	pods  map[string]*agentPod // by Pod name
	used  map[int]bool         // last octets in use
	stop  chan struct{}
	done  chan struct{}
	errs  []string
	close sync.Once
}

type agentPod struct {
	name, uid, netns, veth, ip, dir string
	labels                          map[string]string
	cmd                             *exec.Cmd
	exited                          chan struct{}
	deleting                        bool
}

// StartAgent starts an agent for the Pods of namespace. Everything it
// creates (network namespaces, links, files, the Node) is named with prefix
// and removed by Stop, which the caller must call, also when a test fails.
func StartAgent(cp *ControlPlane, namespace, prefix, subnet string) (*Agent, error) {
	a := &Agent{
		cp: cp, namespace: namespace, node: prefix + "-node", etcd: cp.Bin.Etcd,
		dir: filepath.Join(cp.Dir, prefix), prefix: prefix, subnet: subnet, bridge: prefix + "-br",
		pods: map[string]*agentPod{}, used: map[int]bool{1: true}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	a.cleanupNetwork() // what a killed earlier run may have left
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"link", "add", a.bridge, "type", "bridge"},
		{"addr", "add", subnet + ".1/24", "dev", a.bridge},
		{"link", "set", a.bridge, "up"},
	} {
		if err := ip(args...); err != nil {
			a.cleanupNetwork()
			return nil, err
		}
	}
	node := fmt.Sprintf(`{"apiVersion":"v1","kind":"Node","metadata":{"name":%q,"labels":{"kubernetes.io/hostname":%q}}}`, a.node, a.node)
	if code, b, err := cp.Do("POST", "/api/v1/nodes", []byte(node), "application/json"); err != nil || (code != 201 && code != 409) {
		a.cleanupNetwork()
		return nil, fmt.Errorf("register node: %d %s %v", code, b, err)
	}
	go a.run()
	return a, nil
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// run lists and watches the namespace's Pods until Stop.
func (a *Agent) run() {
	defer close(a.done)
	rv := ""
	for {
		select {
		case <-a.stop:
			return
		default:
		}
		if rv == "" {
			var l struct {
				Metadata struct{ ResourceVersion string }
				Items    []json.RawMessage
			}
			if err := a.cp.Get("/api/v1/namespaces/"+a.namespace+"/pods", &l); err != nil {
				a.fail("list pods: %v", err)
				time.Sleep(time.Second)
				continue
			}
			for _, p := range l.Items {
				a.handle("ADDED", p)
			}
			rv = l.Metadata.ResourceVersion
		}
		rv = a.watch(rv)
	}
}

func (a *Agent) watch(rv string) string {
	req, _ := http.NewRequest("GET", a.cp.APIServerURL+"/api/v1/namespaces/"+a.namespace+"/pods?watch=1&resourceVersion="+rv, nil)
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-a.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := (&http.Client{Transport: a.cp.http.Transport}).Do(req.WithContext(ctx))
	if err != nil {
		return rv
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for {
		var ev struct {
			Type   string
			Object json.RawMessage
		}
		if err := dec.Decode(&ev); err != nil {
			return rv
		}
		if ev.Type == "ERROR" {
			return ""
		}
		var m struct {
			Metadata struct{ ResourceVersion string }
		}
		_ = json.Unmarshal(ev.Object, &m)
		rv = m.Metadata.ResourceVersion
		a.handle(ev.Type, ev.Object)
	}
}

type pod struct {
	Metadata struct {
		Name, Namespace, UID string
		DeletionTimestamp    *string
		Labels               map[string]string
	}
	Spec struct {
		NodeName      string
		RestartPolicy string
		Containers    []struct {
			Name, Image  string
			Command      []string
			Args         []string
			VolumeMounts []struct{ Name, MountPath string }
		}
		Volumes []struct {
			Name     string
			EmptyDir *struct{} `json:"emptyDir"`
		}
	}
}

func (a *Agent) handle(typ string, raw json.RawMessage) {
	var p pod
	if err := json.Unmarshal(raw, &p); err != nil {
		a.fail("decode pod: %v", err)
		return
	}
	name := p.Metadata.Name
	switch {
	case typ == "DELETED" || p.Metadata.DeletionTimestamp != nil:
		a.remove(name, typ != "DELETED")
	case p.Spec.NodeName == "":
		binding := fmt.Sprintf(`{"apiVersion":"v1","kind":"Binding","metadata":{"name":%q},"target":{"apiVersion":"v1","kind":"Node","name":%q}}`, name, a.node)
		code, b, err := a.cp.Do("POST", "/api/v1/namespaces/"+a.namespace+"/pods/"+name+"/binding", []byte(binding), "application/json")
		if err != nil || code != 201 {
			a.fail("bind pod %s: %d %s %v", name, code, b, err)
		}
	case p.Spec.NodeName == a.node:
		a.mu.Lock()
		_, running := a.pods[name]
		a.mu.Unlock()
		if !running {
			if err := a.startPod(p); err != nil {
				a.fail("start pod %s: %v", name, err)
				a.patchStatus(name, map[string]any{"phase": "Failed", "message": err.Error()})
			}
		}
	}
}

// startPod gives the Pod a network namespace and runs its one container.
func (a *Agent) startPod(p pod) error {
	if len(p.Spec.Containers) != 1 {
		return fmt.Errorf("the agent runs Pods of one container, not %d", len(p.Spec.Containers))
	}
	c := p.Spec.Containers[0]
	argv := append(slices.Clone(c.Command), c.Args...)
	if len(argv) == 0 || argv[0] != "/usr/local/bin/etcd" {
		return fmt.Errorf("the agent only has /usr/local/bin/etcd, not %q", argv)
	}
	a.mu.Lock()
	octet := 2
	for a.used[octet] {
		octet++
	}
	if octet > 254 {
		a.mu.Unlock()
		return fmt.Errorf("no address left in %s.0/24", a.subnet)
	}
	a.used[octet] = true
	id := fmt.Sprintf("%s%d", a.prefix, octet)
	ap := &agentPod{
		name: p.Metadata.Name, uid: p.Metadata.UID, netns: id, veth: id + "h", ip: fmt.Sprintf("%s.%d", a.subnet, octet),
		dir: filepath.Join(a.dir, p.Metadata.Name), labels: p.Metadata.Labels, exited: make(chan struct{}),
	}
	a.pods[ap.name] = ap
	a.mu.Unlock()

	for _, args := range [][]string{
		{"netns", "add", ap.netns},
		{"link", "add", ap.veth, "type", "veth", "peer", "name", id + "p"},
		{"link", "set", id + "p", "netns", ap.netns},
		{"-n", ap.netns, "link", "set", id + "p", "name", "eth0"},
		{"-n", ap.netns, "addr", "add", ap.ip + "/24", "dev", "eth0"},
		{"-n", ap.netns, "link", "set", "eth0", "up"},
		{"-n", ap.netns, "link", "set", "lo", "up"},
		{"link", "set", ap.veth, "master", a.bridge, "up"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	// emptyDir volumes: a directory each, mounted where the container
	// wants it (over a tmpfs on the parent, in the Pod's mount namespace).
	emptyDirs := map[string]bool{}
	for _, v := range p.Spec.Volumes {
		emptyDirs[v.Name] = v.EmptyDir != nil
	}
	var mounts []string
	for _, m := range c.VolumeMounts {
		if !emptyDirs[m.Name] {
			return fmt.Errorf("volume %s at %s: the agent supports emptyDir volumes only", m.Name, m.MountPath)
		}
		vol := filepath.Join(ap.dir, "volumes", m.Name)
		if err := os.MkdirAll(vol, 0o700); err != nil {
			return err
		}
		parent := filepath.Dir(m.MountPath)
		mounts = append(mounts, fmt.Sprintf("mount -t tmpfs tmpfs %q && mkdir -p %q && mount --bind %q %q", parent, m.MountPath, vol, m.MountPath))
	}
	if err := a.refreshHosts(); err != nil {
		return err
	}
	argv[0] = a.etcd
	script := strings.Join(append(mounts, `exec "$@"`), " && ")
	log, err := os.Create(filepath.Join(ap.dir, "container.log"))
	if err != nil {
		return err
	}
	ap.cmd = exec.Command("ip", append([]string{"netns", "exec", ap.netns, "sh", "-c", script, "sh"}, argv...)...)
	ap.cmd.Stdout, ap.cmd.Stderr = log, log
	ap.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := ap.cmd.Start(); err != nil {
		log.Close()
		return err
	}
	started := time.Now().UTC().Format(time.RFC3339)
	go func() {
		err := ap.cmd.Wait()
		log.Close()
		close(ap.exited)
		a.mu.Lock()
		deleting := ap.deleting
		a.mu.Unlock()
		if !deleting {
			// The operator's Pods restart Always; this agent reports the
			// exit and leaves the Pod failed, so a test sees it.
			tail, _ := os.ReadFile(log.Name())
			a.fail("pod %s: etcd exited: %v; last output:\n%s", ap.name, err, tail[max(0, len(tail)-800):])
			a.patchStatus(ap.name, map[string]any{"phase": "Failed", "containerStatuses": []any{map[string]any{
				"name": c.Name, "image": c.Image, "imageID": "", "ready": false, "restartCount": 0,
				"state": map[string]any{"terminated": map[string]any{"exitCode": ap.cmd.ProcessState.ExitCode(), "reason": "Error"}},
			}}})
		}
	}()
	a.patchStatus(ap.name, map[string]any{
		"phase": "Running", "hostIP": a.subnet + ".1", "podIP": ap.ip, "podIPs": []any{map[string]any{"ip": ap.ip}}, "startTime": started,
		"conditions": []any{map[string]any{"type": "Ready", "status": "True"}, map[string]any{"type": "ContainersReady", "status": "True"}},
		"containerStatuses": []any{map[string]any{
			"name": c.Name, "image": c.Image, "imageID": "", "ready": true, "started": true, "restartCount": 0,
			"state": map[string]any{"running": map[string]any{"startedAt": started}},
		}},
	})
	return nil
}

// refreshHosts rewrites every Pod's hosts file: its own name, and each
// Service that selects a running Pod. Files are rewritten in place, so the
// bind mount in a running Pod sees the change.
func (a *Agent) refreshHosts() error {
	var services struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct{ Selector map[string]string }
		}
	}
	if err := a.cp.Get("/api/v1/namespaces/"+a.namespace+"/services", &services); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var pods []*agentPod
	for _, p := range a.pods {
		pods = append(pods, p)
	}
	slices.SortFunc(pods, func(x, y *agentPod) int { return strings.Compare(x.name, y.name) })
	var svcLines []string
	for _, s := range services.Items {
		if len(s.Spec.Selector) == 0 {
			continue
		}
		for _, p := range pods {
			if selects(s.Spec.Selector, p.labels) && !p.deleting {
				n, ns := s.Metadata.Name, a.namespace
				svcLines = append(svcLines, fmt.Sprintf("%s\t%s %s.%s %s.%s.svc %s.%s.svc.cluster.local", p.ip, n, n, ns, n, ns, n, ns))
				break
			}
		}
	}
	for _, p := range pods {
		hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n%s\t%s\n%s\n", p.ip, p.name, strings.Join(svcLines, "\n"))
		dir := filepath.Join("/etc/netns", p.netns)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(dir, "hosts"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		_, err = io.WriteString(f, hosts)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// remove stops a Pod's process and removes its namespace and files; confirm
// finishes a graceful deletion, as the kubelet does once containers stopped.
func (a *Agent) remove(name string, confirm bool) {
	a.mu.Lock()
	ap := a.pods[name]
	if ap != nil {
		ap.deleting = true
	}
	a.mu.Unlock()
	if ap != nil {
		a.stopPod(ap)
		a.mu.Lock()
		delete(a.pods, name)
		delete(a.used, octetOf(ap.ip))
		a.mu.Unlock()
		_ = a.refreshHosts()
	}
	if confirm {
		body := `{"apiVersion":"v1","kind":"DeleteOptions","gracePeriodSeconds":0}`
		code, b, err := a.cp.Do("DELETE", "/api/v1/namespaces/"+a.namespace+"/pods/"+name, []byte(body), "application/json")
		if err != nil || (code != 200 && code != 404) {
			a.fail("confirm deletion of pod %s: %d %s %v", name, code, b, err)
		}
	}
}

func octetOf(ip string) int {
	var o int
	fmt.Sscanf(ip[strings.LastIndex(ip, ".")+1:], "%d", &o)
	return o
}

func (a *Agent) stopPod(ap *agentPod) {
	if ap.cmd != nil && ap.cmd.Process != nil {
		_ = ap.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-ap.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-ap.cmd.Process.Pid, syscall.SIGKILL)
			<-ap.exited
		}
	}
	// Deleting one end deletes the pair; the namespace goes when its last
	// process has, which the kernel does in its own time.
	_ = ip("link", "delete", ap.veth)
	_ = ip("netns", "delete", ap.netns)
	_ = os.RemoveAll(filepath.Join("/etc/netns", ap.netns))
	_ = os.RemoveAll(ap.dir)
}

func (a *Agent) patchStatus(name string, status map[string]any) {
	body, _ := json.Marshal(map[string]any{"status": status})
	code, b, err := a.cp.Do("PATCH", "/api/v1/namespaces/"+a.namespace+"/pods/"+name+"/status", body, "application/merge-patch+json")
	if err != nil || code != 200 {
		a.fail("patch status of pod %s: %d %s %v", name, code, b, err)
	}
}

func (a *Agent) fail(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, fmt.Sprintf(format, args...))
}

// Errors returns what went wrong so far, for a test to report.
func (a *Agent) Errors() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.errs)
}

// PodIP returns the address of a running Pod, or "".
func (a *Agent) PodIP(name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.pods[name]; p != nil {
		return p.ip
	}
	return ""
}

// Running returns the names of the Pods whose process runs.
func (a *Agent) Running() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var names []string
	for n, p := range a.pods {
		select {
		case <-p.exited:
		default:
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Stop stops every process and removes every namespace, link, file and
// the Node that the agent made.
func (a *Agent) Stop() {
	a.close.Do(func() {
		close(a.stop)
		<-a.done
		a.mu.Lock()
		pods := a.pods
		a.pods = map[string]*agentPod{}
		a.mu.Unlock()
		for _, ap := range pods {
			a.mu.Lock()
			ap.deleting = true
			a.mu.Unlock()
			a.stopPod(ap)
		}
		_, _, _ = a.cp.Do("DELETE", "/api/v1/nodes/"+a.node, nil, "")
		a.cleanupNetwork()
		_ = os.RemoveAll(a.dir)
	})
}

// cleanupNetwork removes the bridge and any namespace with the prefix.
func (a *Agent) cleanupNetwork() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], a.prefix) {
			_ = ip("netns", "delete", f[0])
			_ = os.RemoveAll(filepath.Join("/etc/netns", f[0]))
		}
	}
	out, _ = exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], a.prefix) {
			_ = ip("link", "delete", strings.TrimSuffix(strings.Split(f[1], "@")[0], ":"))
		}
	}
}
