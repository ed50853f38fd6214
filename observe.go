// Observe: what exists, from Kubernetes and from etcd itself.
//
// Kubernetes knows a member's Pod: scheduled or not, its container running,
// restarted or stuck pulling an image, and Ready, which the readiness probe
// on etcd's /readyz decides. The operator reads that from what its Pod and
// Service watches delivered (cache.go), not from a LIST per pass: a new
// cluster costs its objects and nothing more. Only etcd knows the rest: member IDs, the
// leader, learners, versions, the cluster ID. The operator asks etcd through
// its v3 JSON gateway (plain HTTP POSTs) sent to the API server's proxy
// subresource of each member Pod:
//
//	POST /api/v1/namespaces/NS/pods/NAME:2379/proxy/v3/maintenance/status
//
// so that `go run .` against kubectl proxy and the in-cluster Deployment
// reach etcd the same way: no cluster DNS, no Pod network, no new flag on the
// operator's side, and RBAC (create, and get for etcd's /version, on
// pods/proxy) says who may.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

// etcdTimeout bounds each request to a member: a member that is down or
// cut off must not hold up the pass that reports it.
const etcdTimeout = 3 * time.Second

// overdue is how long after the end of its grace period a Pod that is
// still there counts as stuck: its kubelet is gone (a lost node), and
// nothing will finish the deletion until someone removes the Node.
const overdue = time.Minute

// cached is what the cache keeps of a Pod (cache.go).
func (p *pod) cached() *cachedPod {
	v := &cachedPod{podView: podView{Name: p.Metadata.Name, Phase: p.Status.Phase, Ready: p.ready(), Deleting: p.Metadata.DeletionTimestamp != ""}, HasIP: p.Status.PodIP != ""}
	_, v.OwnerUID = p.owner()
	v.Trust = p.Metadata.Annotations[annotationTrust]
	// deletionTimestamp is when the grace period ends.
	if end, err := time.Parse(time.RFC3339, p.Metadata.DeletionTimestamp); err == nil {
		v.DeletionEnd = end
	}
	for _, c := range p.Spec.Containers {
		if c.Name == "etcd" {
			v.Image = c.Image
			for _, arg := range c.Command {
				if s, ok := strings.CutPrefix(arg, "--initial-cluster="); ok {
					v.InitialCluster = s
				}
				if s, ok := strings.CutPrefix(arg, "--initial-cluster-state="); ok {
					v.State = s
				}
				v.TLS = v.TLS || arg == "--peer-client-cert-auth"
			}
		}
	}
	for _, vol := range p.Spec.Volumes {
		if vol.Name == "data" && vol.PersistentVolumeClaim != nil {
			v.Claim = vol.PersistentVolumeClaim.ClaimName
		}
	}
	// An init container (a restored member's, restore.go) that cannot run
	// holds the Pod before etcd starts: its reason is worth a status line.
	for _, c := range p.Status.InitContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason != "PodInitializing" && v.Init == "" {
			v.Init = "init container " + c.Name + ": " + w.Reason
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "etcd" {
			if w := c.State.Waiting; w != nil {
				v.Waiting, v.WaitingMessage = w.Reason, w.Message
			}
			if t := c.LastState.Terminated; t != nil {
				v.DataLost = dataLostSign(t.Message)
			}
		}
	}
	return v
}

// dataLostSigns are what etcd says as it exits when its data directory
// does not match its place in the cluster: the data was wiped or replaced
// while the member stayed. The kubelet keeps the end of the log of a
// container that failed as its termination message
// (terminationMessagePolicy FallbackToLogsOnError, manifests.go), so the
// operator tells a member that lost its data from a release that crashes.
var dataLostSigns = []string{
	// raft: the leader's commit index is beyond the member's empty log.
	"Was the raft log corrupted, truncated, or lost?",
	// --initial-cluster-state=new on empty data, and the member exists.
	"has already been bootstrapped",
	// =existing on empty data, with the member list of when it joined.
	"error validating peerURLs",
}

// dataLostSign is the sign of lost data in etcd's last words, if any.
func dataLostSign(message string) string {
	for _, s := range dataLostSigns {
		if strings.Contains(message, s) {
			return s
		}
	}
	return ""
}

// view is the Pod as a pass saw it at now.
func (p *cachedPod) view(now time.Time) podView {
	v := p.podView
	v.Overdue = !p.DeletionEnd.IsZero() && now.Sub(p.DeletionEnd) > overdue
	return v
}

// decodePodEvent is the Pod watcher's decode function: the member Pod as
// the cache keeps it, and the cluster that owns it.
func decodePodEvent(raw json.RawMessage) (ownedEvent, string, error) {
	var p pod
	if err := json.Unmarshal(raw, &p); err != nil {
		return ownedEvent{}, "", err
	}
	cluster, uid := p.owner()
	return ownedEvent{Namespace: p.Metadata.Namespace, Name: p.Metadata.Name, Cluster: cluster, OwnerUID: uid, Pod: p.cached()}, p.Metadata.ResourceVersion, nil
}

// decodeServiceEvent is the Service watcher's decode function.
func decodeServiceEvent(raw json.RawMessage) (ownedEvent, string, error) {
	var s service
	if err := json.Unmarshal(raw, &s); err != nil {
		return ownedEvent{}, "", err
	}
	cluster, uid := s.owner()
	return ownedEvent{Namespace: s.Metadata.Namespace, Name: s.Metadata.Name, Cluster: cluster, OwnerUID: uid}, s.Metadata.ResourceVersion, nil
}

// corePath is a core/v1 collection: in one namespace, or in all.
func corePath(namespace, resource string) string {
	if namespace == "" {
		return "/api/v1/" + resource
	}
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/" + resource
}

// observe reads a cluster's member Pods and Services, from the watches'
// cache (cache.go) or, without one or while it lags behind the operator's
// own writes, from LISTs; then it asks etcd about its members. Failing to
// reach etcd is an observation, not an error.
func (c *controller) observe(ctx context.Context, ec *EtcdCluster, in input) (observed, error) {
	base, known := in.Base, in.Prev.CurrentVersion
	var obs observed
	ns := ec.Metadata.Namespace
	var pods []cachedPod
	ok := false
	if c.cache != nil {
		pods, obs.Services, obs.Claims, ok = c.cache.objects(ctx, ns, ec.Metadata.Name, ec.Metadata.UID, func() {
			c.log.Debug("waiting for the watches to show the operator's last writes", "cluster", ec.key())
		})
	}
	if !ok {
		if c.cache != nil {
			c.log.Info("the watches do not show the operator's last writes; listing instead", "cluster", ec.key(), "after", cacheLag)
		}
		var err error
		if pods, obs.Services, obs.Claims, err = c.list(ctx, ec, base); err != nil {
			return obs, err
		}
		c.cache.forgetWrites(ns, ec.Metadata.Name)
	}
	slices.SortFunc(pods, func(a, b cachedPod) int { return cmp.Compare(a.Name, b.Name) })
	slices.Sort(obs.Services)
	slices.SortFunc(obs.Claims, func(a, b claimView) int { return cmp.Compare(a.Name, b.Name) })
	now := time.Now()
	obs.Now = now
	tlsOn := in.Spec.TLS != nil || in.Prev.TLS != nil
	for _, p := range pods {
		obs.Pods = append(obs.Pods, p.view(now))
		tlsOn = tlsOn || p.TLS
	}
	var err error
	if tlsOn {
		if obs.TLS, err = c.observeTLS(ctx, ec, base, now); err != nil {
			return obs, err
		}
		if r := in.Spec.Restore; r != nil && r.CredentialsSecret != "" && !obs.TLS.HasRoot {
			obs.TLS.Restored = c.restoredCredentials(ctx, ec.Metadata.Namespace, r.CredentialsSecret)
		}
	}
	obs.Etcd, err = c.observeEtcd(ctx, ns, c.reachable(ns, base, pods, obs.TLS), known, obs.TLS)
	return obs, err
}

// reachable are the Pods whose etcd can be asked, each recorded with how
// to reach it (auth.go).
func (c *controller) reachable(ns, base string, pods []cachedPod, tls *tlsView) []string {
	var running []string
	for _, p := range pods {
		if p.Phase == "Running" && p.HasIP && !p.Deleting {
			running = append(running, p.Name)
			user, password := "", ""
			if p.TLS && tls != nil {
				user, password = tls.Creds.User, tls.Root
			}
			c.logins.set(ns, p.Name, base, p.TLS, user, password)
		}
	}
	return running
}

// list reads a cluster's member Pods, Services and PVCs with
// label-selected LISTs. An object of a deleted cluster of the same name may
// linger until the garbage collector removes it: only this cluster's own
// count.
func (c *controller) list(ctx context.Context, ec *EtcdCluster, base string) ([]cachedPod, []string, []claimView, error) {
	ns := ec.Metadata.Namespace
	sel := "?" + url.Values{"labelSelector": {labelCluster + "=" + base}}.Encode()
	var pods struct{ Items []pod }
	if err := c.getJSON(ctx, corePath(ns, "pods")+sel, &pods); err != nil {
		return nil, nil, nil, fmt.Errorf("list pods of %s: %w", ec.key(), err)
	}
	var cached []cachedPod
	for i := range pods.Items {
		if p := pods.Items[i].cached(); p.OwnerUID == ec.Metadata.UID {
			cached = append(cached, *p)
		}
	}
	var svcs struct{ Items []service }
	if err := c.getJSON(ctx, corePath(ns, "services")+sel, &svcs); err != nil {
		return nil, nil, nil, fmt.Errorf("list services of %s: %w", ec.key(), err)
	}
	var names []string
	for _, s := range svcs.Items {
		if _, uid := s.owner(); uid == ec.Metadata.UID {
			names = append(names, s.Metadata.Name)
		}
	}
	var pvcs struct{ Items []claim }
	if err := c.getJSON(ctx, corePath(ns, "persistentvolumeclaims")+sel, &pvcs); err != nil {
		return nil, nil, nil, fmt.Errorf("list persistentvolumeclaims of %s: %w", ec.key(), err)
	}
	var claims []claimView
	for i := range pvcs.Items {
		if cl := pvcs.Items[i].cached(); cl.OwnerUID == ec.Metadata.UID {
			claims = append(claims, cl.claimView)
		}
	}
	return cached, names, claims, nil
}

// memberStatusAnswer is etcd's answer to /v3/maintenance/status.
type memberStatusAnswer struct {
	Header struct {
		ClusterID string `json:"cluster_id"`
		MemberID  string `json:"member_id"`
	} `json:"header"`
	Version   string `json:"version"`
	Leader    string `json:"leader"`
	IsLearner bool   `json:"isLearner"`
}

type memberListAnswer struct {
	Header struct {
		ClusterID string `json:"cluster_id"`
	} `json:"header"`
	Members []struct {
		ID        string   `json:"ID"`
		Name      string   `json:"name"`
		PeerURLs  []string `json:"peerURLs"`
		IsLearner bool     `json:"isLearner"`
	} `json:"members"`
}

// observeEtcd asks every running member for its status, then the leader
// for the member list: the leader's list is current, a follower's may lag.
// A member that does not answer is an observation; the API server refusing
// the operator the proxy (403) is an error that someone must fix.
func (c *controller) observeEtcd(ctx context.Context, ns string, running []string, known string, tls *tlsView) (etcdView, error) {
	var v etcdView
	if len(running) > 0 {
		v.AnsweredPods = []string{}
	}
	answers := map[string]memberStatusAnswer{} // by member ID
	podOf := map[string]string{}               // member ID -> Pod name
	for _, name := range running {
		var a memberStatusAnswer
		if err := c.etcd(ctx, ns, name, "/v3/maintenance/status", struct{}{}, &a); err != nil {
			if kube.IsStatus(err, http.StatusForbidden) || kube.IsStatus(err, http.StatusUnauthorized) || authFailed(err) {
				return v, fmt.Errorf("ask etcd member %s: %w", name, err)
			}
			c.log.Debug("member did not answer", "pod", ns+"/"+name, "err", err)
			continue
		}
		answers[a.Header.MemberID] = a
		podOf[a.Header.MemberID] = name
		v.AnsweredPods = append(v.AnsweredPods, name)
		if !a.IsLearner {
			v.AnsweredVoters++
		}
		v.ClusterID = cmp.Or(v.ClusterID, a.Header.ClusterID)
		if a.Leader != "" && a.Leader != "0" && v.Leader == "" {
			v.Leader = a.Leader
		}
	}
	v.Answered = len(answers)
	c.listMembers(ctx, ns, &v, podOf[v.Leader], answers)
	if tls != nil && v.LeaderPod != "" {
		v.Auth = c.observeAuth(ctx, ns, v.LeaderPod, tls.Creds.NextUser)
	}
	if askClusterVersion(v.Listed, known) {
		var err error
		if v.ClusterVersion, err = c.clusterVersion(ctx, ns, v.AnsweredPods); err != nil {
			return v, err
		}
	}
	return v, nil
}

// askClusterVersion reports whether etcd's cluster version is worth a
// request: while a listed member is silent (its version is not known), and
// while the members report another minor version than the status knows
// (an upgrade or a rollback: etcd raises its cluster version only once
// every member runs the new one, and until then a version the members
// report is not the data's).
func askClusterVersion(listed []memberView, known string) bool {
	for _, m := range listed {
		if !m.Answered || known == "" || minorLess(m.Version, known) || minorLess(known, m.Version) {
			return true
		}
	}
	return false
}

// clusterVersion asks a member for etcd's cluster version (a GET of its
// HTTP /version, so "get" on pods/proxy), which the leader raises only
// once every member reports a higher one. While a member is silent it is
// the one fact of what that member last ran.
func (c *controller) clusterVersion(ctx context.Context, ns string, pods []string) (string, error) {
	for _, pod := range pods {
		var v struct {
			Cluster string `json:"etcdcluster"`
		}
		p := etcdPath(ns, pod, c.logins.get(ns, pod).https) + "/version"
		ctx, cancel := context.WithTimeout(ctx, etcdTimeout)
		b, err := c.client.Once(ctx, http.MethodGet, p, nil, "")
		cancel()
		if kube.IsStatus(err, http.StatusForbidden) || kube.IsStatus(err, http.StatusUnauthorized) {
			return "", fmt.Errorf("ask etcd member %s its cluster version: %w", pod, err)
		}
		if err == nil && json.Unmarshal(b, &v) == nil && isVersion(v.Cluster) {
			return v.Cluster, nil
		}
		c.log.Debug("member did not say the cluster version", "pod", ns+"/"+pod, "err", err)
	}
	return "", nil
}

// listMembers asks the leader's Pod for the member list: the leader's is
// current, a follower's may lag. Without a leader, a member's own view (a
// serializable read) still says how many voters the quorum needs.
func (c *controller) listMembers(ctx context.Context, ns string, v *etcdView, leaderPod string, answers map[string]memberStatusAnswer) {
	if leaderPod == "" {
		v.Leader = ""
		for _, pod := range v.AnsweredPods {
			var list memberListAnswer
			if c.etcd(ctx, ns, pod, "/v3/cluster/member/list", map[string]bool{"linearizable": false}, &list) == nil {
				v.Listed = memberViews(list, answers)
				return
			}
		}
		return
	}
	var list memberListAnswer
	if err := c.etcd(ctx, ns, leaderPod, "/v3/cluster/member/list", map[string]bool{"linearizable": true}, &list); err != nil {
		c.log.Debug("leader did not list members", "pod", ns+"/"+leaderPod, "err", err)
		v.Leader = ""
		return
	}
	v.LeaderPod = leaderPod
	v.Members = memberViews(list, answers)
	v.Listed = v.Members
}

// memberViews joins the leader's member list with what each member answered.
func memberViews(list memberListAnswer, answers map[string]memberStatusAnswer) []memberView {
	views := []memberView{}
	for _, m := range list.Members {
		mv := memberView{ID: m.ID, Name: m.Name, Learner: m.IsLearner}
		if len(m.PeerURLs) > 0 {
			if u, err := url.Parse(m.PeerURLs[0]); err == nil {
				mv.PeerHost, mv.PeerHTTPS = u.Hostname(), u.Scheme == "https"
			}
		}
		if a, ok := answers[m.ID]; ok {
			mv.Answered, mv.Version = true, a.Version
		}
		views = append(views, mv)
	}
	return views
}

// etcd POSTs one request to a member's JSON gateway through the API
// server's Pod proxy, signed in if the cluster has auth on (auth.go). One
// try, bounded: the next pass tries again; a token etcd refuses is
// replaced at once.
func (c *controller) etcd(ctx context.Context, ns, podName, path string, req, resp any) error {
	l := c.logins.get(ns, podName)
	actx, err := c.authenticated(ctx, ns, podName, false)
	if err != nil {
		return err
	}
	err = c.etcdOnce(actx, ns, podName, l.https, path, req, resp)
	if l.password != "" && etcdRefused(err, tokenRefused...) {
		if actx, err = c.authenticated(ctx, ns, podName, true); err != nil {
			return err
		}
		err = c.etcdOnce(actx, ns, podName, l.https, path, req, resp)
	}
	return err
}

func (c *controller) etcdOnce(ctx context.Context, ns, podName string, https bool, path string, req, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	p := etcdPath(ns, podName, https) + path
	b, err := c.client.Once(ctx, http.MethodPost, p, mustJSON(req), "application/json")
	if err != nil {
		return err
	}
	if resp != nil {
		if err := json.Unmarshal(b, resp); err != nil {
			return fmt.Errorf("POST %s: decode: %w", p, err)
		}
	}
	return nil
}

// etcdPath is a member's client port through the Pod proxy; "https:" in
// front of the Pod's name makes the API server dial it with TLS.
func etcdPath(ns, podName string, https bool) string {
	name := url.PathEscape(podName)
	if https {
		name = "https:" + name
	}
	return "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + name + fmt.Sprintf(":%d/proxy", clientPort)
}

func (c *controller) getJSON(ctx context.Context, path string, v any) error {
	b, err := c.client.Do(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// etcdRefused reports an answer in which etcd itself refused the request
// (as opposed to not being reached), with etcd's words.
func etcdRefused(err error, words ...string) bool {
	var e *kube.Error
	if !errors.As(err, &e) {
		return false
	}
	for _, w := range words {
		if strings.Contains(e.Message, w) {
			return true
		}
	}
	return false
}
