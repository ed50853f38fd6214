// Auth: no anonymous client, and the operator signs in like any other.
//
// With spec.tls, etcd's authentication is on: every request needs a user
// and a password, or a token that etcd gave for them. The operator reaches
// etcd through the API server's Pod proxy (observe.go), which dials the Pod
// over https without a client certificate and drops the caller's
// Authorization header. So etcd cannot ask clients for certificates (its
// --trusted-ca-file demands one on every client URL, tls.go), and clients,
// the operator among them, sign in with a password instead:
//
//   - The operator keeps the root user's password in Secret BASE-root and,
//     once the cluster has a quorum, adds the user root, grants it the root
//     role and turns authentication on (enableAuth below): three etcd
//     requests, each decided from what etcd says, so each safe to repeat.
//     Until then the cluster is open, as any etcd is before auth enable.
//     A rotation later moves the Secret to another user (credentials.go).
//   - It logs in (POST /v3/auth/authenticate) and sends the token in the
//     Grpc-Metadata-Token header, which etcd's JSON gateway passes on as
//     the gRPC metadata "token". The members issue JWTs signed with one key
//     of the cluster's (in its Secrets, tls.go), so a token from one member
//     is good on every other: a learner, which refuses to log anyone in
//     ("rpc not supported for learner") but wants a token for its status,
//     takes one its peers gave. etcd's default simple tokens live in one
//     member's memory. A token expires (ttl below): the operator logs in
//     again when etcd refuses one.
//
// The kubelet's probes have no credentials either; etcd's health checks
// need none on the metrics port (tls.go).
package main

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

const rootUser = "root"

// tokenTTL is how long etcd's tokens last (--auth-token's ttl).
const tokenTTL = 10 * time.Minute

// etcdLogins says how the operator reaches each member Pod, and holds one
// token per cluster: observe sets them each pass from the Pods and the
// cluster's Secrets.
type etcdLogins struct {
	mu     sync.Mutex
	pods   map[string]podLogin // by namespace/Pod
	tokens map[string]token    // by namespace/base name
}

type podLogin struct {
	https    bool
	cluster  string // namespace/base name
	user     string // with the root role: root until a rotation (credentials.go)
	password string // user's; "" for a cluster without auth
}

type token struct{ user, password, value string }

// set records how to reach a Pod of the cluster base.
func (l *etcdLogins) set(ns, pod, base string, https bool, user, password string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pods == nil {
		l.pods, l.tokens = map[string]podLogin{}, map[string]token{}
	}
	l.pods[ns+"/"+pod] = podLogin{https: https, cluster: ns + "/" + base, user: user, password: password}
}

func (l *etcdLogins) get(ns, pod string) podLogin {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pods[ns+"/"+pod]
}

// token is the cluster's token for the Pod's password, "" if none.
func (l *etcdLogins) token(ns, pod string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pods[ns+"/"+pod]
	if t := l.tokens[p.cluster]; t.user == p.user && t.password == p.password {
		return t.value
	}
	return ""
}

func (l *etcdLogins) setToken(ns, pod, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pods[ns+"/"+pod]
	l.tokens[p.cluster] = token{user: p.user, password: p.password, value: value}
}

// peers are the other Pods of pod's cluster, where it can log in too.
func (l *etcdLogins) peers(ns, pod string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pods[ns+"/"+pod]
	var out []string
	for key, o := range l.pods {
		if name := strings.TrimPrefix(key, ns+"/"); o.cluster == p.cluster && name != pod {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// tokenRefused are etcd's words for a token it no longer takes, or for a
// request that came without one.
var tokenRefused = []string{"invalid auth token", "revision of auth store is old", "user name is empty"}

// authenticated returns ctx with the cluster's token, if the operator has
// one; with login, it logs in for a new one first, at pod or, if pod
// will not (a learner), at its peers. A token is asked for only once etcd
// wants one: a cluster whose auth is not on yet needs none.
func (c *controller) authenticated(ctx context.Context, ns, pod string, login bool) (context.Context, error) {
	l := c.logins.get(ns, pod)
	if l.password == "" {
		return ctx, nil
	}
	if login {
		var err error
		for _, at := range append([]string{pod}, c.logins.peers(ns, pod)...) {
			var a struct {
				Token string `json:"token"`
			}
			err = c.etcdOnce(ctx, ns, at, c.logins.get(ns, at).https, "/v3/auth/authenticate", map[string]string{"name": l.user, "password": l.password}, &a)
			if etcdRefused(err, "authentication is not enabled") {
				return ctx, nil
			}
			if err == nil {
				c.logins.setToken(ns, pod, a.Token)
				break
			}
			if authFailed(err) {
				break
			}
		}
		if err != nil {
			return ctx, fmt.Errorf("log in to etcd member %s as %s, with the password of Secret %s: %w%s", pod, l.user, rootSecret(strings.TrimPrefix(l.cluster, ns+"/")), err, refusedHint(err))
		}
	}
	if t := c.logins.token(ns, pod); t != "" {
		return kube.WithHeader(ctx, "Grpc-Metadata-Token", t), nil
	}
	return ctx, nil
}

// refusedHint says what may be wrong when etcd refuses the password.
func refusedHint(err error) string {
	if !authFailed(err) {
		return ""
	}
	return "; etcd's users are not the Secret's: someone changed them, or the data was restored from a backup of another cluster, whose users it holds (spec.restore.credentialsSecret names its credentials)"
}

// authFailed reports etcd refusing the password itself: someone changed
// the root user's password or BASE-root, and a person must set them right.
func authFailed(err error) bool {
	return etcdRefused(err, "authentication failed, invalid user ID or password")
}

// knowLogin makes sure the operator knows how to reach a Pod that no pass
// has looked at yet (the backup schedule runs beside the passes).
func (c *controller) knowLogin(ctx context.Context, ec *EtcdCluster, p *pod) error {
	ns := ec.Metadata.Namespace
	https := p.cached().TLS
	if !https || c.logins.get(ns, p.Metadata.Name).password != "" {
		return nil
	}
	var s secret
	if err := c.getJSON(ctx, corePath(ns, "secrets")+"/"+rootSecret(baseName(ec.Metadata.Name)), &s); err != nil {
		return fmt.Errorf("read the root password of %s: %w", ec.key(), err)
	}
	c.logins.set(ns, p.Metadata.Name, baseName(ec.Metadata.Name), https, credentialsOf(s.Data, time.Now()).User, string(s.Data["password"]))
	return nil
}

// authView is what etcd says of its authentication.
type authView struct {
	Enabled bool
	// RootUser and RootRole: the user root exists and has the role root,
	// which auth enable needs. Asked only while auth is off.
	RootUser, RootRole bool
	// NextUser and NextRole: the same of a rotation's next user, asked
	// only while one is under way (credentials.go).
	NextUser, NextRole bool
}

// observeAuth asks the leader whether auth is on and, while it is not,
// how far enableAuth got; while it is and a rotation is under way, how far
// that got (next is its user). nil if the leader did not say.
func (c *controller) observeAuth(ctx context.Context, ns, leaderPod, next string) *authView {
	var st struct {
		Enabled bool `json:"enabled"`
	}
	if err := c.etcd(ctx, ns, leaderPod, "/v3/auth/status", struct{}{}, &st); err != nil {
		c.log.Debug("leader did not say whether auth is on", "pod", ns+"/"+leaderPod, "err", err)
		return nil
	}
	user := rootUser
	if st.Enabled {
		if next == "" {
			return &authView{Enabled: true}
		}
		user = next
	}
	exists, role, err := c.userRole(ctx, ns, leaderPod, user)
	if err != nil {
		c.log.Debug("leader did not say whether user "+user+" exists", "pod", ns+"/"+leaderPod, "err", err)
		return nil
	}
	if st.Enabled {
		return &authView{Enabled: true, NextUser: exists, NextRole: role}
	}
	return &authView{RootUser: exists, RootRole: role}
}

// userRole says whether etcd has user, and whether it has the role root.
func (c *controller) userRole(ctx context.Context, ns, pod, user string) (exists, root bool, err error) {
	var u struct {
		Roles []string `json:"roles"`
	}
	err = c.etcd(ctx, ns, pod, "/v3/auth/user/get", map[string]string{"name": user}, &u)
	if etcdRefused(err, "user name not found") {
		return false, false, nil
	}
	return err == nil, slices.Contains(u.Roles, rootUser), err
}

// observeTLS reads the cluster's Secrets with a label-selected LIST: a
// TLS cluster's pass costs one request more, and sees its own writes.
func (c *controller) observeTLS(ctx context.Context, ec *EtcdCluster, base string, now time.Time) (*tlsView, error) {
	sel := "?" + url.Values{"labelSelector": {labelCluster + "=" + base}}.Encode()
	var list struct{ Items []secret }
	if err := c.getJSON(ctx, corePath(ec.Metadata.Namespace, "secrets")+sel, &list); err != nil {
		return nil, fmt.Errorf("list secrets of %s: %w", ec.key(), err)
	}
	var own []secret
	for _, s := range list.Items {
		for _, ref := range s.Metadata.OwnerReferences {
			if ref.Controller && ref.UID == ec.Metadata.UID {
				own = append(own, s)
			}
		}
	}
	return tlsOf(own, base, now), nil
}

// restoredCredentials reads spec.restore.credentialsSecret.
func (c *controller) restoredCredentials(ctx context.Context, ns, name string) *restoredCredentials {
	var s secret
	err := c.getJSON(ctx, corePath(ns, "secrets")+"/"+url.PathEscape(name), &s)
	r := &restoredCredentials{User: string(s.Data["username"]), Password: string(s.Data["password"])}
	switch {
	case err != nil:
		r.Problem = fmt.Sprintf("spec.restore.credentialsSecret %s: %v", name, err)
	case r.User == "" || r.Password == "":
		r.Problem = fmt.Sprintf("spec.restore.credentialsSecret %s has no username and password (the source cluster's NAME-root has them)", name)
	}
	return r
}

// enableAuth: once a TLS cluster has a quorum, etcd's authentication is
// turned on, one request a pass, each chosen by what the leader says
// (observeAuth): the root password's Secret, the user root, its role,
// then auth enable. Until then the cluster is open, as every etcd is
// before auth enable; the status says so.
func (d *decision) enableAuth() (step, bool) {
	a, v := d.obs.Etcd.Auth, d.tlsView()
	if d.tls() == nil || a == nil || a.Enabled || !d.quorumOK() || v.CA == nil {
		return step{}, false
	}
	phase := d.healthPhase()
	var s step
	var msg string
	switch {
	case !v.HasRoot:
		msg = "creating the root user's password (Secret " + rootSecret(d.in.Base) + ")"
		s = step{Action: actCreateRootSecret, Create: []object{{Resource: "secrets", Name: rootSecret(d.in.Base), Secret: d.plan(d.image()).rootToMake(v.CA, v.Restored)}}}
	case !a.RootUser:
		msg = "adding etcd's user root, with the password in Secret " + rootSecret(d.in.Base)
		s = d.etcdStep(actAddRootUser, "", "", "/v3/auth/user/add", map[string]string{"name": rootUser, "password": v.Root})
	case !a.RootRole:
		msg = "granting etcd's user root the role root"
		s = d.etcdStep(actGrantRoot, "", "", "/v3/auth/user/grant", map[string]string{"user": rootUser, "role": rootUser})
	default:
		msg = "turning on etcd's authentication"
		s = d.etcdStep(actEnableAuth, "", "", "/v3/auth/enable", struct{}{})
		s.News = []notice{{eventNormal, reasonAuthEnabled, "etcd's authentication is on: clients sign in as root with the password in Secret " + rootSecret(d.in.Base) + ", over TLS with its ca.crt"}}
	}
	msg += "; until authentication is on, any client that reaches the cluster can use it"
	return d.progress(phase, reasonEnablingAuth, msg, s), true
}
