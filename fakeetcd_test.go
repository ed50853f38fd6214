// A fake node and fake etcd for the unit tests: what a kubelet and etcd's v3
// JSON gateway answer, kept to the behaviour the operator depends on. A Pod
// the operator creates "runs" at once: its member starts if etcd's member
// list has it (or bootstraps with its --initial-cluster), and the Pod is
// Ready when its member is a started voter of a cluster with a leader, as
// etcd's /readyz says. Membership changes need a quorum of running voters,
// and etcd's refusals carry etcd's own words. The e2e tests check the same
// against real etcd members on a real node.
package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

type fakeMember struct {
	ID       uint64
	Name     string // empty until started
	PeerHost string
	Learner  bool
	Started  bool
}

// fakeEtcd is one etcd cluster, keyed in the fake by namespace/base name.
type fakeEtcd struct {
	ClusterID uint64
	Members   []*fakeMember
	nextID    uint64
	// Leader is the member leadership was handed to, if it still can lead.
	Leader uint64
	// TLS: the members were started with spec.tls's flags; they answer
	// https only, and their peer URLs are https.
	TLS  bool
	auth fakeAuth
}

// fakeAuth is etcd's authentication: users, and JWTs that any member
// checks. Every change to the users is a new revision of the auth store,
// and etcd refuses the tokens of an older one.
type fakeAuth struct {
	Enabled  bool
	users    map[string]*fakeUser
	revision int
	tokens   map[string]fakeToken
	issued   int
}

type fakeUser struct {
	Password string
	Root     bool // has the role root
}

type fakeToken struct {
	host     string // the member that gave it
	revision int
}

// changed is a change to the users: a new revision.
func (a *fakeAuth) changed() { a.revision++ }

// authRefusal is etcd's word on a request's token, "" if it may pass.
func (e *fakeEtcd) authRefusal(path, token, host string) string {
	switch {
	// etcd asks no credentials for the member list; a member's status
	// needs a token of any user.
	case !e.auth.Enabled || path == "/v3/auth/authenticate" || path == "/v3/cluster/member/list":
		return ""
	case token == "":
		return "etcdserver: user name is empty"
	case e.auth.tokens[token].host == "":
		// The members sign JWTs with one key: any member's token is
		// good on every member.
		return "etcdserver: invalid auth token"
	case e.auth.tokens[token].revision < e.auth.revision:
		return "etcdserver: revision of auth store is old"
	}
	return ""
}

func (e *fakeEtcd) member(host string) *fakeMember {
	for _, m := range e.Members {
		if m.PeerHost == host {
			return m
		}
	}
	return nil
}

// fakeProc is the etcd process of one Pod.
type fakeProc struct {
	Down    bool   // killed; the kubelet has not restarted it yet
	Version string // from the image tag
	Removed bool   // its member was removed: etcd exits
	// LastWords: etcd exits at every start saying this (its data was
	// wiped); the kubelet shows CrashLoopBackOff and keeps the words.
	LastWords string
	TLS       bool // serves https only
}

// disableNode leaves the Pods the operator creates Pending, as with no
// node to run them.
func (f *fakeAPI) disableNode() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node = false
}

func podKey(ns, name string) string { return ns + "/" + name }

// clusterVersionLocked is etcd's cluster version: major.minor.0 of the
// lowest version among the members' processes.
func (f *fakeAPI) clusterVersionLocked(ns string, e *fakeEtcd) string {
	low := ""
	for _, m := range e.Members {
		if p := f.procs[podKey(ns, m.PeerHost)]; p != nil && (low == "" || versionLess(p.Version, low)) {
			low = p.Version
		}
	}
	v, _ := parseVersion(low)
	return fmt.Sprintf("%d.%d.0", v[0], v[1])
}

// leaderLocked is the leader's member, nil without a quorum of running voters.
func (f *fakeAPI) leaderLocked(ns string, e *fakeEtcd) *fakeMember {
	voters, up := 0, []*fakeMember{}
	for _, m := range e.Members {
		if m.Learner {
			continue
		}
		voters++
		if f.runningLocked(ns, m) {
			up = append(up, m)
		}
	}
	if voters == 0 || len(up) < voters/2+1 {
		return nil
	}
	for _, m := range up {
		if m.ID == e.Leader {
			return m
		}
	}
	return up[0]
}

// runningLocked: the member's Pod exists and its etcd runs.
func (f *fakeAPI) runningLocked(ns string, m *fakeMember) bool {
	if !m.Started {
		return false
	}
	p := f.procs[podKey(ns, m.PeerHost)]
	return p != nil && !p.Down && !p.Removed && f.objects["pods/"+ns+"/"+m.PeerHost] != nil
}

// startPodLocked is the kubelet starting a Pod's etcd.
func (f *fakeAPI) startPodLocked(ns string, pod map[string]any) {
	meta := pod["metadata"].(map[string]any)
	name := meta["name"].(string)
	base := meta["labels"].(map[string]any)[labelCluster].(string)
	c := pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	image := c["image"].(string)
	args := map[string]string{}
	for _, a := range c["command"].([]any) {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a.(string), "--"), "="); ok {
			args[k] = v
		}
	}
	proc := &fakeProc{Version: strings.TrimPrefix(image[strings.LastIndex(image, ":")+1:], "v")}
	f.procs[podKey(ns, name)] = proc
	if unpullable(image) {
		proc.Down = true // the kubelet cannot pull it
	}
	if slices.Contains(c["command"].([]any), any("--peer-client-cert-auth")) {
		proc.TLS = true
		if f.objects["secrets/"+ns+"/"+memberSecret(name)] == nil {
			// The kubelet cannot mount the missing Secret: the
			// container never starts.
			proc.Down = true
		}
	}
	key := ns + "/" + base
	e := f.etcds[key]
	if e == nil && args["initial-cluster-state"] == "new" {
		f.uids++
		e = &fakeEtcd{ClusterID: uint64(1000 + f.uids), nextID: 1, TLS: args["peer-client-cert-auth"] == "" && slices.Contains(c["command"].([]any), any("--peer-client-cert-auth"))}
		for _, part := range strings.Split(args["initial-cluster"], ",") {
			n, _, _ := strings.Cut(part, "=")
			e.Members = append(e.Members, &fakeMember{ID: e.nextID * 11, Name: n, PeerHost: n})
			e.nextID++
		}
		f.etcds[key] = e
	}
	if e == nil {
		proc.Down = true // nothing to join: etcd exits
	} else if m := e.member(name); m == nil {
		proc.Removed = true
	} else if args["initial-cluster-state"] == "existing" && !listsMembersOf(args["initial-cluster"], e) {
		// etcd checks a joining member's --initial-cluster against the
		// cluster's members, and exits when they differ.
		proc.Down = true
	} else {
		m.Started, m.Name = true, name
	}
	f.syncPodsLocked(ns, base)
}

// syncPodsLocked sets every member Pod's status from the etcd model and
// tells the Pod watchers about the Pods that changed.
func (f *fakeAPI) syncPodsLocked(ns, base string) {
	e := f.etcds[ns+"/"+base]
	for key, pod := range f.objects {
		if !strings.HasPrefix(key, "pods/"+ns+"/") {
			continue
		}
		meta := pod["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		if labels[labelCluster] != base {
			continue
		}
		name := meta["name"].(string)
		proc := f.procs[podKey(ns, name)]
		if proc == nil && f.unboundClaimLocked(ns, pod) != "" {
			continue // Pending: never scheduled
		}
		ready := false
		var waiting map[string]any
		if e != nil && proc != nil {
			if m := e.member(name); m != nil && !m.Learner && f.runningLocked(ns, m) && f.leaderLocked(ns, e) != nil {
				ready = true
			}
		}
		img := pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"].(string)
		if unpullable(img) {
			waiting = map[string]any{"reason": "ImagePullBackOff", "message": "Back-off pulling image " + strconv.Quote(img)}
		}
		cs := map[string]any{"name": "etcd", "restartCount": 0, "ready": ready, "state": map[string]any{}}
		if proc != nil && proc.LastWords != "" {
			waiting = map[string]any{"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container=etcd pod=" + name}
			cs["lastState"] = map[string]any{"terminated": map[string]any{"exitCode": 1, "message": proc.LastWords}}
		}
		if waiting != nil {
			cs["state"] = map[string]any{"waiting": waiting}
		}
		status := map[string]any{
			"phase": "Running", "podIP": "10.0.0.1",
			"conditions":        []any{map[string]any{"type": "Ready", "status": map[bool]string{true: "True", false: "False"}[ready]}},
			"containerStatuses": []any{cs},
		}
		if jsonEqual(pod["status"], status) {
			continue
		}
		pod["status"] = status
		meta["resourceVersion"] = f.nextRV()
		f.emitPodLocked("MODIFIED", pod)
	}
}

// emitPodLocked records a Pod event and writes it to every Pod watch.
func (f *fakeAPI) emitPodLocked(typ string, pod map[string]any) {
	f.emitOwnedLocked(&f.podHistory, &f.podStreams, typ, pod)
}

// serveEtcdLocked answers a POST to /v3/... through a Pod's proxy.
func (f *fakeAPI) serveEtcdLocked(w http.ResponseWriter, ns, podName string, https bool, path, body, token string) {
	pod := f.objects["pods/"+ns+"/"+podName]
	proc := f.procs[podKey(ns, podName)]
	if pod == nil {
		writeStatus(w, 404, "NotFound", fmt.Sprintf("pods %q not found", podName))
		return
	}
	base := pod["metadata"].(map[string]any)["labels"].(map[string]any)[labelCluster].(string)
	e := f.etcds[ns+"/"+base]
	if proc == nil || proc.Down || proc.Removed || e == nil || e.member(podName) == nil || !e.member(podName).Started {
		writeStatus(w, 503, "ServiceUnavailable", fmt.Sprintf("error trying to reach service: dial tcp 10.0.0.1:%d: connect: connection refused", clientPort))
		return
	}
	if proc.TLS != https {
		// The API server's proxy relays what the TLS handshake, or
		// its absence, made of the request.
		writeStatus(w, 502, "BadGateway", "error trying to reach service: tls: first record does not look like a TLS handshake")
		return
	}
	self := e.member(podName)
	if path == "/version" {
		// etcd's HTTP /version (a GET): the member's own version and the
		// cluster's, the lowest minor among its members' images here.
		w.Write(mustJSON(map[string]string{"etcdserver": proc.Version, "etcdcluster": f.clusterVersionLocked(ns, e)}))
		return
	}
	leader := f.leaderLocked(ns, e)
	refuse := func(msg string) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write(mustJSON(map[string]any{"error": msg, "code": 9, "message": msg}))
	}
	var req struct {
		ID       string   `json:"ID"`
		PeerURLs []string `json:"peerURLs"`
		Learner  bool     `json:"isLearner"`
	}
	_ = json.Unmarshal([]byte(body), &req)
	if msg := e.authRefusal(path, token, podName); msg != "" {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write(mustJSON(map[string]any{"error": msg, "code": 16, "message": msg}))
		return
	}
	header := map[string]any{"cluster_id": fmt.Sprint(e.ClusterID), "member_id": fmt.Sprint(self.ID)}
	list := func() []any {
		var out []any
		for _, m := range e.Members {
			out = append(out, map[string]any{"ID": fmt.Sprint(m.ID), "name": m.Name, "peerURLs": []string{peerURL(m.PeerHost, e.TLS)}, "isLearner": m.Learner})
		}
		return out
	}
	// Without a leader a member still answers from its own store what a
	// serializable read asks (the member list with linearizable false).
	serializable := path == "/v3/cluster/member/list" && !strings.Contains(body, `"linearizable":true`)
	if path != "/v3/maintenance/status" && leader == nil && !serializable {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(mustJSON(map[string]any{"error": "etcdserver: request timed out", "code": 14, "message": "etcdserver: request timed out"}))
		return
	}
	if strings.HasPrefix(path, "/v3/auth/") {
		if msg := e.serveAuth(w, path, body, podName); msg != "" {
			refuse(msg)
		}
		return
	}
	switch path {
	case "/v3/maintenance/status":
		leaderID := "0"
		if leader != nil {
			leaderID = fmt.Sprint(leader.ID)
		}
		w.Write(mustJSON(map[string]any{"header": header, "version": proc.Version, "leader": leaderID, "isLearner": self.Learner}))
	case "/v3/cluster/member/list":
		w.Write(mustJSON(map[string]any{"header": header, "members": list()}))
	case "/v3/cluster/member/add":
		host := ""
		if len(req.PeerURLs) == 1 {
			if u, err := url.Parse(req.PeerURLs[0]); err == nil {
				host = u.Hostname()
			}
		}
		if e.member(host) != nil {
			refuse("etcdserver: Peer URLs already exists")
			return
		}
		m := &fakeMember{ID: e.nextID * 11, PeerHost: host, Learner: req.Learner}
		e.nextID++
		e.Members = append(e.Members, m)
		f.etcdLog = append(f.etcdLog, "add "+host)
		w.Write(mustJSON(map[string]any{"header": header, "member": map[string]any{"ID": fmt.Sprint(m.ID)}, "members": list()}))
	case "/v3/maintenance/transfer-leadership":
		var move struct {
			TargetID string `json:"targetID"`
		}
		_ = json.Unmarshal([]byte(body), &move)
		id, _ := strconv.ParseUint(move.TargetID, 10, 64)
		i := slices.IndexFunc(e.Members, func(m *fakeMember) bool { return m.ID == id && !m.Learner && f.runningLocked(ns, m) })
		switch {
		case self != leader:
			refuse("etcdserver: not leader")
			return
		case i < 0:
			refuse("etcdserver: bad leader transferee")
			return
		}
		e.Leader = id
		f.etcdLog = append(f.etcdLog, "lead "+e.Members[i].PeerHost)
		w.Write(mustJSON(map[string]any{"header": header}))
	case "/v3/cluster/member/promote", "/v3/cluster/member/remove":
		id, _ := strconv.ParseUint(req.ID, 10, 64)
		i := slices.IndexFunc(e.Members, func(m *fakeMember) bool { return m.ID == id })
		if i < 0 {
			refuse("etcdserver: member not found")
			return
		}
		m := e.Members[i]
		if path == "/v3/cluster/member/remove" {
			e.Members = slices.Delete(e.Members, i, i+1)
			if p := f.procs[podKey(ns, m.PeerHost)]; p != nil {
				p.Removed = true
			}
			f.etcdLog = append(f.etcdLog, "remove "+m.PeerHost)
		} else {
			switch {
			case !m.Learner:
				refuse("etcdserver: can only promote a learner member")
				return
			case !f.runningLocked(ns, m) || f.lagLearners:
				refuse("etcdserver: can only promote a learner member which is in sync with leader")
				return
			}
			m.Learner = false
			f.etcdLog = append(f.etcdLog, "promote "+m.PeerHost)
		}
		w.Write(mustJSON(map[string]any{"header": header, "members": list()}))
	default:
		writeStatus(w, 404, "NotFound", "404 page not found")
		return
	}
	f.syncPodsLocked(ns, base)
}

// killMember stops a member's etcd process, as a crash would; restart
// brings it back in the same Pod, as the kubelet does.
func (f *fakeAPI) killMember(ns, name string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs[podKey(ns, name)].Down = down
	pod := f.objects["pods/"+ns+"/"+name]
	f.syncPodsLocked(ns, pod["metadata"].(map[string]any)["labels"].(map[string]any)[labelCluster].(string))
}

// crashLoop is a stopped member's etcd failing at every restart, saying
// lastWords (its data was wiped): the Pod shows CrashLoopBackOff.
func (f *fakeAPI) crashLoop(ns, name, lastWords string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs[podKey(ns, name)].LastWords = lastWords
	pod := f.objects["pods/"+ns+"/"+name]
	f.syncPodsLocked(ns, pod["metadata"].(map[string]any)["labels"].(map[string]any)[labelCluster].(string))
}

// deletePod deletes a Pod as a user (or an eviction) would.
func (f *fakeAPI) deletePod(ns, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletePodLocked(ns, name)
}

func (f *fakeAPI) deletePodLocked(ns, name string) {
	pod := f.objects["pods/"+ns+"/"+name]
	delete(f.objects, "pods/"+ns+"/"+name)
	delete(f.procs, podKey(ns, name))
	pod["metadata"].(map[string]any)["resourceVersion"] = f.nextRV()
	f.emitPodLocked("DELETED", pod)
	base := pod["metadata"].(map[string]any)["labels"].(map[string]any)[labelCluster].(string)
	f.syncPodsLocked(ns, base)
	// A PVC the Pod used, deleted meanwhile, goes now (pvc-protection).
	for key, obj := range f.objects {
		if meta := obj["metadata"].(map[string]any); strings.HasPrefix(key, "persistentvolumeclaims/"+ns+"/") && meta["deletionTimestamp"] != nil && !f.claimUsedLocked(ns, meta["name"].(string)) {
			delete(f.objects, key)
			meta["resourceVersion"] = f.nextRV()
			f.emitOwnedLocked(&f.pvcHistory, &f.pvcStreams, "DELETED", obj)
		}
	}
	f.forgetDataLocked(ns, base)
}

// forgetDataLocked ends an etcd cluster whose data is gone: data on the
// Pods' emptyDirs goes with them, so with the last Pod and no PVC left.
func (f *fakeAPI) forgetDataLocked(ns, base string) {
	for key := range f.objects {
		labels, _ := f.objects[key]["metadata"].(map[string]any)["labels"].(map[string]any)
		if (strings.HasPrefix(key, "pods/"+ns+"/") || strings.HasPrefix(key, "persistentvolumeclaims/"+ns+"/")) && labels[labelCluster] == base {
			return
		}
	}
	delete(f.etcds, ns+"/"+base)
}

// etcdMembers describes a cluster's etcd members: "name" for a voter,
// "name(learner)" and "(unstarted host)".
func (f *fakeAPI) etcdMembers(ns, base string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	if e := f.etcds[ns+"/"+base]; e != nil {
		for _, m := range e.Members {
			s := m.Name
			if !m.Started {
				s = "(unstarted " + m.PeerHost + ")"
			}
			if m.Learner {
				s += "(learner)"
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// unpullable images: a tag no registry has.
func unpullable(image string) bool { return strings.HasSuffix(image, ":v3.7.99") }

// matches applies a label selector of the forms the operator sends:
// "key" and "key=value".
func matches(obj map[string]any, selector string) bool {
	if selector == "" {
		return true
	}
	labels, _ := obj["metadata"].(map[string]any)["labels"].(map[string]any)
	for _, term := range strings.Split(selector, ",") {
		k, v, hasValue := strings.Cut(term, "=")
		got, ok := labels[k]
		if !ok || (hasValue && got != v) {
			return false
		}
	}
	return true
}

// listsMembersOf reports whether an --initial-cluster lists exactly e's
// members, by peer URL, as etcd checks for a member that joins.
func listsMembersOf(initialCluster string, e *fakeEtcd) bool {
	var got, want []string
	for _, part := range strings.Split(initialCluster, ",") {
		_, peer, _ := strings.Cut(part, "=")
		got = append(got, peer)
	}
	for _, m := range e.Members {
		want = append(want, peerURL(m.PeerHost, e.TLS))
	}
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// serveAuth answers etcd's auth requests; it returns etcd's refusal, if any.
func (e *fakeEtcd) serveAuth(w http.ResponseWriter, path, body, host string) string {
	var req struct{ Name, Password, User, Role string }
	_ = json.Unmarshal([]byte(body), &req)
	a := &e.auth
	if a.users == nil {
		a.users = map[string]*fakeUser{}
	}
	u := a.users[cmp.Or(req.Name, req.User)]
	switch path {
	case "/v3/auth/authenticate":
		switch {
		case e.member(host).Learner:
			return "etcdserver: rpc not supported for learner"
		case !a.Enabled:
			return "etcdserver: authentication is not enabled"
		case u == nil || req.Password != u.Password:
			return "etcdserver: authentication failed, invalid user ID or password"
		}
		a.issued++
		tok := fmt.Sprintf("tok-%s-%d", host, a.issued)
		if a.tokens == nil {
			a.tokens = map[string]fakeToken{}
		}
		a.tokens[tok] = fakeToken{host: host, revision: a.revision}
		w.Write(mustJSON(map[string]any{"token": tok}))
	case "/v3/auth/status":
		w.Write(mustJSON(map[string]any{"enabled": a.Enabled}))
	case "/v3/auth/user/get":
		if u == nil {
			return "etcdserver: user name not found"
		}
		roles := []string{}
		if u.Root {
			roles = append(roles, rootUser)
		}
		w.Write(mustJSON(map[string]any{"roles": roles}))
	case "/v3/auth/user/add":
		if u != nil {
			return "etcdserver: user name already exists"
		}
		a.users[req.Name] = &fakeUser{Password: req.Password}
		a.changed()
		w.Write(mustJSON(map[string]any{}))
	case "/v3/auth/user/grant":
		if u == nil {
			return "etcdserver: user name not found"
		}
		u.Root = u.Root || req.Role == rootUser
		a.changed()
		w.Write(mustJSON(map[string]any{}))
	case "/v3/auth/user/changepw":
		if u == nil {
			return "etcdserver: user name not found"
		}
		u.Password = req.Password
		a.changed()
		w.Write(mustJSON(map[string]any{}))
	case "/v3/auth/user/delete":
		switch {
		case u == nil:
			return "etcdserver: user name not found"
		case a.Enabled && req.Name == rootUser:
			return "etcdserver: invalid auth management"
		}
		delete(a.users, req.Name)
		a.changed()
		w.Write(mustJSON(map[string]any{}))
	case "/v3/auth/enable":
		switch root := a.users[rootUser]; {
		case root == nil:
			return "etcdserver: root user does not exist"
		case !root.Root:
			return "etcdserver: root user does not have root role"
		}
		a.Enabled = true
		a.changed()
		w.Write(mustJSON(map[string]any{}))
	default:
		w.WriteHeader(404)
		w.Write([]byte("404 page not found"))
	}
	return ""
}

// expireTokens forgets every token, as etcd does after --auth-token-ttl.
func (f *fakeAPI) expireTokens(ns, base string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.etcds[ns+"/"+base].auth.tokens = nil
}
