package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/ca"
)

func TestParseTLS(t *testing.T) {
	for _, tc := range []struct {
		raw, version string
		want         *tlsSpec
		err          string
	}{
		{raw: ``, want: nil},
		{raw: `null`, want: nil},
		{raw: `{}`, version: "v3.6.16", want: &tlsSpec{CertificateLifetime: defaultCertLifetime, CALifetime: defaultCALifetime, CredentialsOverlap: defaultCredentialsOverlap}},
		{raw: `{"certificateLifetime":"2m","caLifetime":"1h"}`, version: "v3.6.16", want: &tlsSpec{CertificateLifetime: 2 * time.Minute, CALifetime: time.Hour, CredentialsOverlap: defaultCredentialsOverlap}},
		{raw: `{"certificateLifetime":"2m"}`, version: "my-build", want: &tlsSpec{CertificateLifetime: 2 * time.Minute, CALifetime: defaultCALifetime, CredentialsOverlap: defaultCredentialsOverlap}},
		{raw: `{"credentialsRotation":"2026-12-07","credentialsOverlap":"1m"}`, version: "v3.6.16", want: &tlsSpec{CertificateLifetime: defaultCertLifetime, CALifetime: defaultCALifetime, CredentialsRotation: "2026-12-07", CredentialsOverlap: time.Minute}},
		{raw: `{"credentialsOverlap":"10s"}`, err: "spec.tls.credentialsOverlap must be a duration of at least 1m0s"},
		{raw: `{"credentialsRotation":7}`, err: "spec.tls.credentialsRotation must be a string, not number"},
		{raw: `true`, err: "spec.tls must be an object"},
		{raw: `{"certificateLifetime":"soon"}`, err: `spec.tls.certificateLifetime must be a duration of at least 1m0s such as 2160h, not "soon"`},
		{raw: `{"caLifetime":"30s"}`, err: "spec.tls.caLifetime must be a duration of at least 1m0s"},
		{raw: `{"certificateLifetime":"2h","caLifetime":"1h"}`, err: "spec.tls.caLifetime (1h0m0s) must not be shorter than spec.tls.certificateLifetime (2h0m0s)"},
		{raw: `{}`, version: "v3.5.21", err: "spec.tls needs etcd v3.6 or later, and spec.version is v3.5.21"},
	} {
		got, err := parseTLS(json.RawMessage(tc.raw), tc.version)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseTLS(%s) error = %v, want %q", tc.raw, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("parseTLS(%s): %v", tc.raw, err)
		case tc.err == "" && !jsonEqual(got, tc.want):
			t.Errorf("parseTLS(%s) = %+v, want %+v", tc.raw, got, tc.want)
		}
	}
	// parseSpec reads it, and an error in it is the spec's.
	if _, err := parseSpec(json.RawMessage(`{"size":3,"version":"v3.5.21","tls":{}}`)); err == nil || !strings.Contains(err.Error(), "spec.tls needs etcd v3.6") {
		t.Errorf("parseSpec with spec.tls on v3.5: %v", err)
	}
	restore := `"restore":{"s3":{"endpoint":"http://s3:9000","bucket":"bkt","credentialsSecret":"s3"},"key":"a.db","credentialsSecret":"old-root"}`
	if _, err := parseSpec(json.RawMessage(`{"size":3,` + restore + `}`)); err == nil || !strings.Contains(err.Error(), "spec.restore.credentialsSecret is for a cluster with spec.tls") {
		t.Errorf("parseSpec with spec.restore.credentialsSecret and no spec.tls: %v", err)
	}
	if _, err := parseSpec(json.RawMessage(`{"size":3,"tls":{},` + restore + `}`)); err != nil {
		t.Errorf("parseSpec with spec.restore.credentialsSecret and spec.tls: %v", err)
	}
}

// secretData is a Secret's data as the fake holds it.
func secretData(t *testing.T, f *fakeAPI, name string) map[string][]byte {
	t.Helper()
	obj := f.object("secrets", "default", name)
	if obj == nil {
		t.Fatalf("secret %s does not exist", name)
	}
	var s secret
	if err := json.Unmarshal(mustJSON(obj), &s); err != nil {
		t.Fatalf("secret %s: %v", name, err)
	}
	return s.Data
}

func tlsSettled(size int) statusCheck {
	r := running(size)
	return statusCheck{r.what + " with auth enabled", func(st clusterStatus) bool {
		return r.ok(st) && st.TLS != nil && st.TLS.Auth == "enabled" && len(st.TLS.Certificates) == size
	}}
}

// TestTLSCluster: a cluster with spec.tls gets a CA, a certificate per
// member for all its names, the root password, Pods with etcd's TLS flags,
// and etcd's authentication on; the operator then reaches etcd only over
// https and with a token, and keeps working through a resize and through
// tokens that expire.
func TestTLSCluster(t *testing.T) {
	f := newFakeAPI(t)
	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{}})
	startOperator(t, f)
	st := waitStatus(f, "example", tlsSettled(3))

	cad := secretData(t, f, "example-ca")
	issuer, err := ca.Parse(cad["tls.crt"], cad["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	if st.TLS.CANotAfter != stamp(issuer.NotAfter()) || st.TLS.CredentialsSecret != "example-root" {
		t.Errorf("status.tls = %+v", st.TLS)
	}
	root := secretData(t, f, "example-root")
	if string(root["username"]) != "root" || len(root["password"]) < 20 || string(root["ca.crt"]) != string(issuer.CertPEM()) {
		t.Errorf("example-root = %q", root)
	}
	f.mu.Lock()
	a := f.etcds["default/example"].auth
	u := *a.users["root"]
	f.mu.Unlock()
	if !a.Enabled || u.Password != string(root["password"]) || !u.Root {
		t.Errorf("etcd auth = %+v, root %+v, want enabled with the Secret's password", a, u)
	}
	for _, m := range membersOf(3) {
		d := secretData(t, f, m+"-tls")
		info, err := ca.Check(d["tls.crt"], d["tls.key"], d["ca.crt"], time.Now())
		if err != nil || string(d["ca.crt"]) != string(issuer.CertPEM()) {
			t.Errorf("secret %s-tls: %v", m, err)
		}
		for _, name := range []string{m, m + ".default.svc", "example-client.default.svc.cluster.local", "localhost"} {
			if !info.Covers(name) {
				t.Errorf("certificate of %s does not cover %s (%v)", m, name, info.DNSNames)
			}
		}
		if !info.Server || !info.Client {
			t.Errorf("certificate of %s: server %v, client %v; want both", m, info.Server, info.Client)
		}
		c := f.object("pods", "default", m)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		cmd := strings.Join(toStrings(c["command"]), " ")
		for _, flag := range []string{"--peer-client-cert-auth", "--listen-client-urls=https://0.0.0.0:2379", "--initial-advertise-peer-urls=https://" + m + ":2380", "--listen-metrics-urls=http://0.0.0.0:2381", "--auth-token=jwt,pub-key=/etc/etcd/tls/jwt.pub"} {
			if !strings.Contains(cmd, flag) {
				t.Errorf("pod %s lacks %s: %s", m, flag, cmd)
			}
		}
		if strings.Contains(cmd, "--trusted-ca-file") {
			t.Errorf("pod %s asks clients for certificates, which the Pod proxy has none of: %s", m, cmd)
		}
		if port := c["readinessProbe"].(map[string]any)["httpGet"].(map[string]any)["port"]; port != float64(metricsPort) {
			t.Errorf("pod %s probes port %v, want %d", m, port, metricsPort)
		}
	}
	// Every question to etcd went over https, and its Secrets came before
	// the Pods that mount them.
	var order []string
	for _, r := range f.requestsSince(0) {
		if strings.Contains(r.Path, "/proxy/") && !strings.Contains(r.Path, "/pods/https:") {
			t.Errorf("plain request to a TLS member: %s %s", r.Method, r.Path)
		}
		if r.Method == "POST" && (strings.HasSuffix(r.Path, "/secrets") || strings.HasSuffix(r.Path, "/pods")) {
			order = append(order, r.Path[strings.LastIndex(r.Path, "/")+1:])
		}
	}
	if i, j := slices.Index(order, "pods"), slices.Index(order, "secrets"); i < j || slices.Index(order[i:], "secrets") >= 0 {
		t.Errorf("POST order = %v, want every Secret before any Pod", order)
	}

	// Tokens expire: the operator logs in again, and a resize works.
	f.expireTokens("default", "example")
	f.putCluster("default", "example", map[string]any{"size": 5, "tls": map[string]any{}})
	st = waitStatus(f, "example", tlsSettled(5))
	if got := secretData(t, f, "example-4-tls"); got == nil {
		t.Error("no certificate for the new member")
	}
	f.mu.Lock()
	members := f.etcds["default/example"].Members
	for _, m := range members {
		if !m.Started {
			t.Errorf("member %s never started", m.PeerHost)
		}
	}
	f.mu.Unlock()
}

func toStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// TestTLSRenewsCertificates: a member's certificate that is due (two thirds
// of its life over) or that is not good (expired, another CA's) is
// replaced in its Secret, with an Event, and nothing restarts.
func TestTLSRenewsCertificates(t *testing.T) {
	f := newFakeAPI(t)
	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{}})
	op := startOperator(t, f)
	waitStatus(f, "example", tlsSettled(3))

	cad := secretData(t, f, "example-ca")
	issuer, _ := ca.Parse(cad["tls.crt"], cad["tls.key"])
	other, _ := ca.New("other", time.Hour, time.Now())
	leaf := ca.Leaf{CommonName: "example-1", DNSNames: []string{"example-1"}, Server: true, Client: true, Lifetime: 3 * time.Second}
	// Due in 2 seconds: the operator comes back by itself, with no event.
	due, dueKey, _ := issuer.Issue(leaf, time.Now())
	leaf.Lifetime = time.Hour
	foreign, foreignKey, _ := other.Issue(leaf, time.Now())
	for _, tc := range []struct {
		name      string
		cert, key []byte
	}{{"another CA's", foreign, foreignKey}, {"due", due, dueKey}} {
		// Counted first: a pass under way may see the change at once.
		n := op.logged("certificate renewed")
		f.mu.Lock()
		s := f.objects["secrets/default/example-1-tls"]
		s["data"] = map[string]any{"tls.crt": tc.cert, "tls.key": tc.key, "ca.crt": issuer.CertPEM()}
		f.mu.Unlock()
		// The operator watches no Secrets: a member's failure brings a
		// pass (renewals need no quorum). One that sees the short
		// certificate renews nothing yet: it comes back when it is due.
		f.killMember("default", "example-2", true)
		op.waitLogs("certificate renewed", n+1)
		f.killMember("default", "example-2", false)
		d := secretData(t, f, "example-1-tls")
		info, err := ca.Check(d["tls.crt"], d["tls.key"], issuer.CertPEM(), time.Now())
		if err != nil || time.Until(info.NotAfter) < 80*24*time.Hour {
			t.Errorf("%s: the renewed certificate: %v, valid until %s", tc.name, err, info.NotAfter)
		}
		waitStatus(f, "example", tlsSettled(3))
	}
	f.waitFor("2 CertificateRenewed events", func() bool {
		renewed := 0
		for _, e := range f.events {
			if e["reason"] == reasonCertificateRenewed {
				renewed++
			}
		}
		return renewed == 2
	})
}

// TestTLSRotatesCredentials: a new spec.tls.credentialsRotation puts a new
// user with the root role and a new password into Secret example-root;
// the previous user root keeps its password for the overlap, then gets a
// random one; the operator signs in as the new user throughout.
func TestTLSRotatesCredentials(t *testing.T) {
	f := newFakeAPI(t)
	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{}})
	startOperator(t, f)
	waitStatus(f, "example", tlsSettled(3))
	old := string(secretData(t, f, "example-root")["password"])
	users := func() map[string]fakeUser {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := map[string]fakeUser{}
		for name, u := range f.etcds["default/example"].auth.users {
			out[name] = *u
		}
		return out
	}

	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{"credentialsRotation": "one", "credentialsOverlap": "1m"}})
	next := rotationUser("one")
	st := waitStatus(f, "example", statusCheck{"the Secret switched to " + next, func(st clusterStatus) bool {
		return st.TLS != nil && st.TLS.User == next && st.TLS.CredentialsRotation == "one"
	}})
	d := secretData(t, f, "example-root")
	u := users()
	switch {
	case string(d["username"]) != next || string(d[keyPreviousUser]) != rootUser || d[keyNextUser] != nil || d[keyNextPassword] != nil:
		t.Errorf("example-root after the switch: %q", d)
	case u[next].Password != string(d["password"]) || !u[next].Root || string(d["password"]) == old:
		t.Errorf("etcd's user %s: %+v; the Secret's password %q, the old one %q", next, u[next], d["password"], old)
	case u[rootUser].Password != old:
		t.Errorf("root's password changed before the overlap was over")
	}
	if p, _ := st.condition(condProgressing); p.Status != "False" {
		t.Errorf("during the overlap: Progressing %+v", p)
	}

	// The overlap is over (its start set back), and a pass comes.
	f.mu.Lock()
	f.objects["secrets/default/example-root"]["data"].(map[string]any)[keyRotatedAt] = []byte(stamp(time.Now().Add(-2 * time.Minute)))
	f.mu.Unlock()
	f.killMember("default", "example-2", true)
	f.killMember("default", "example-2", false)
	f.waitFor("root retired", func() bool {
		return f.etcds["default/example"].auth.users[rootUser].Password != old && f.objects["secrets/default/example-root"]["data"].(map[string]any)[keyPreviousUser] == nil
	})
	waitStatus(f, "example", tlsSettled(3))
	if u := users(); len(u) != 2 || !u[rootUser].Root || u[next].Password != string(d["password"]) {
		t.Errorf("etcd's users after the rotation: %+v", u)
	}
	for _, reason := range []string{reasonCredentialsRotated, reasonCredentialsRetired} {
		f.waitFor("a "+reason+" event", func() bool {
			return slices.ContainsFunc(f.events, func(e map[string]any) bool { return e["reason"] == reason })
		})
	}
}

// TestTLSStatusCrossesAPodChange: a TLS cluster is never settled (its
// renewals are timers a pass sets), yet its status write that comes back
// after the Pod changed again still brings a pass, as a plain cluster's
// does: the status does not stay on a member that came back.
func TestTLSStatusCrossesAPodChange(t *testing.T) {
	f := newFakeAPI(t)
	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{}})
	startOperator(t, f)
	waitStatus(f, "example", tlsSettled(3))
	f.lag() // the operator's status writes come back late
	f.killMember("default", "example-2", true)
	waitStatus(f, "example", statusCheck{"example-2 not ready", func(st clusterStatus) bool { return st.ReadyMembers == 2 }})
	// Back up while the operator still believes the status that called
	// it ready: the Pod's event is no news.
	f.killMember("default", "example-2", false)
	f.catchUp()
	waitStatus(f, "example", tlsSettled(3))
}

// tlsWorld is newWorld(n) on TLS: every Pod with the TLS flags, every
// peer URL https, a CA, the root password, a good certificate per member
// due in an hour, and auth on.
func tlsWorld(t *testing.T, n int) (*world, *ca.CA) {
	t.Helper()
	issuer, err := ca.New("example etcd CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(n)
	w.obs.TLS = &tlsView{CA: issuer, HasRoot: true, Root: "pw", RootTrust: ca.Fingerprint(issuer.CertPEM()), Creds: credentialsView{User: rootUser}, Leaves: map[string]leafView{}}
	for i := range w.obs.Pods {
		w.obs.Pods[i].TLS = true
		w.obs.Etcd.Members[i].PeerHTTPS = true
		w.obs.TLS.Leaves[w.obs.Pods[i].Name] = leafView{NotAfter: time.Now().Add(3 * time.Hour), RenewIn: time.Hour + time.Duration(i)*time.Minute}
	}
	w.obs.Etcd.Auth = &authView{Enabled: true}
	return w, issuer
}

func tlsIn(size int) input {
	i := in(size, "v3.6.16")
	i.Spec.TLS = &tlsSpec{CertificateLifetime: time.Hour, CALifetime: 10 * time.Hour, CredentialsOverlap: defaultCredentialsOverlap}
	return i
}

func TestDecideTLS(t *testing.T) {
	fresh := tlsIn(3)
	fresh.Prev, fresh.FormedID = clusterStatus{}, ""
	empty := observed{}
	withCA, _ := tlsWorld(t, 0)
	withCA.obs.Etcd = etcdView{}
	withCA.obs.TLS.HasRoot = false
	plain := in(3, "v3.6.16")
	grown := tlsIn(4)
	// spec.tls removed from a cluster on volumes whose Pods are all gone:
	// nothing seen says how it runs but its last status.
	untold := in(3, "v3.6.16")
	untold.Spec.Storage = storageSpec{Size: defaultStorageSize}
	untold.Prev.TLS = &tlsStatus{Auth: "enabled"}
	rotate := tlsIn(3)
	rotate.Spec.TLS.CredentialsRotation = "2026-12-07"
	next := rotationUser("2026-12-07")
	for _, tc := range []struct {
		name    string
		in      input
		obs     func(w *world)
		fresh   *observed
		action  string
		member  string
		reason  string // of the Progressing condition
		phase   string
		creates []string
		again   time.Duration
	}{
		{name: "a new cluster gets its CA first", in: fresh, fresh: &empty, action: actCreateCA, creates: []string{"secrets/example-ca"}},
		{name: "then its Secrets before its Pods", in: fresh, fresh: &withCA.obs, action: actBootstrap,
			creates: []string{"services/example-0", "services/example-1", "services/example-2", "services/example-client",
				"secrets/example-root", "secrets/example-0-tls", "secrets/example-1-tls", "secrets/example-2-tls", "pods/example-0", "pods/example-1", "pods/example-2"}},
		{name: "auth off, no root password yet", in: tlsIn(3), obs: func(w *world) { w.obs.Etcd.Auth = &authView{}; w.obs.TLS.HasRoot = false }, action: actCreateRootSecret, reason: reasonEnablingAuth, creates: []string{"secrets/example-root"}},
		{name: "auth off, no user root", in: tlsIn(3), obs: func(w *world) { w.obs.Etcd.Auth = &authView{} }, action: actAddRootUser, reason: reasonEnablingAuth},
		{name: "auth off, root without its role", in: tlsIn(3), obs: func(w *world) { w.obs.Etcd.Auth = &authView{RootUser: true} }, action: actGrantRoot, reason: reasonEnablingAuth},
		{name: "auth off, root ready", in: tlsIn(3), obs: func(w *world) { w.obs.Etcd.Auth = &authView{RootUser: true, RootRole: true} }, action: actEnableAuth, reason: reasonEnablingAuth},
		{name: "auth waits for a quorum", in: tlsIn(3), obs: func(w *world) { w.obs.Etcd.Auth = &authView{}; w.down("example-1", "example-2") }},
		{name: "a member without its certificate gets one", in: tlsIn(3), obs: func(w *world) { delete(w.obs.TLS.Leaves, "example-1") }, action: actIssueCertificate, member: "example-1", reason: reasonRenewingCertificate, creates: []string{"secrets/example-1-tls"}},
		{name: "a due certificate is renewed", in: tlsIn(3), obs: func(w *world) { w.obs.TLS.Leaves["example-2"] = leafView{Renew: true} }, action: actRenewCertificate, member: "example-2", reason: reasonRenewingCertificate},
		{name: "renewal needs no quorum", in: tlsIn(3), obs: func(w *world) {
			w.down("example-1", "example-2")
			w.obs.TLS.Leaves["example-2"] = leafView{Renew: true}
		}, action: actRenewCertificate, member: "example-2", phase: phaseUnavailable},
		{name: "a renewal says the cluster is healthy", in: tlsIn(3), obs: func(w *world) { w.obs.TLS.Leaves["example-2"] = leafView{Renew: true} }, action: actRenewCertificate, phase: phaseRunning},
		{name: "a renewal with more members than spec.size says Scaling", in: tlsIn(2), obs: func(w *world) { w.obs.TLS.Leaves["example-2"] = leafView{Renew: true} }, action: actRenewCertificate, phase: phaseScaling},
		{name: "without its CA the cluster waits", in: tlsIn(3), obs: func(w *world) { w.obs.TLS.CA = nil }, reason: reasonBadSecret, again: pollAgain},
		{name: "settled: back when the first certificate is due", in: tlsIn(3), reason: reasonIdle, again: time.Hour},
		{name: "spec.tls removed: the members stay on TLS", in: plain, reason: reasonTLSSwitchUnsupported, again: time.Hour},
		{name: "a new member joins on https", in: grown, action: actAddMember, member: "example-3"},
		{name: "nothing seen, spec.tls removed: its Pod made again on TLS, as the status says it ran", in: untold, obs: func(w *world) {
			withClaims("8Gi")(w)
			w.noPod("example-0", "example-1", "example-2").noQuorum()
			w.obs.Etcd.Listed = nil
		}, action: actRestartMember, member: "example-0", creates: []string{"pods/example-0"}},
		{name: "without its CA or a quorum: the quorum's loss first", in: tlsIn(3), obs: func(w *world) {
			w.obs.TLS.CA = nil
			w.down("example-1", "example-2")
		}, phase: phaseUnavailable, reason: reasonBadSecret},
		// A credentials rotation (credentials.go), step by step.
		{name: "rotation asked: the next user and password into the Secret", in: rotate, action: actPrepareCredentials, reason: reasonRotatingCredentials},
		{name: "rotation prepared: the user added", in: rotate, obs: func(w *world) { w.obs.TLS.Creds.NextUser = next }, action: actAddUser, reason: reasonRotatingCredentials},
		{name: "rotation: the user gets the role root", in: rotate, obs: func(w *world) {
			w.obs.TLS.Creds.NextUser, w.obs.Etcd.Auth.NextUser = next, true
		}, action: actGrantUser},
		{name: "rotation: the Secret switched", in: rotate, obs: func(w *world) {
			w.obs.TLS.Creds.NextUser, w.obs.Etcd.Auth.NextUser, w.obs.Etcd.Auth.NextRole = next, true, true
		}, action: actSwitchCredentials},
		{name: "rotation: the previous user works for the overlap", in: rotate, obs: func(w *world) {
			w.obs.TLS.Creds = credentialsView{User: next, Rotation: "2026-12-07", PreviousUser: rootUser, RotatedAgo: time.Minute}
		}, reason: reasonIdle, again: 14 * time.Minute},
		{name: "rotation: root retired after the overlap", in: rotate, obs: func(w *world) {
			w.obs.TLS.Creds = credentialsView{User: next, Rotation: "2026-12-07", PreviousUser: rootUser, RotatedAgo: 15 * time.Minute}
		}, action: actRetireUser},
		{name: "rotation done", in: rotate, obs: func(w *world) { w.obs.TLS.Creds = credentialsView{User: next, Rotation: "2026-12-07"} }, reason: reasonIdle, again: time.Hour},
		{name: "another rotation waits for the previous user's retirement", in: rotate, obs: func(w *world) {
			w.obs.TLS.Creds = credentialsView{User: rootUser, Rotation: "2026-12-01", PreviousUser: "root-1", RotatedAgo: time.Minute}
		}, reason: reasonIdle, again: 14 * time.Minute},
		{name: "rotation waits for a quorum", in: rotate, obs: func(w *world) { w.down("example-1", "example-2") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := tlsWorld(t, 3)
			if tc.obs != nil {
				tc.obs(w)
			}
			obs := w.obs
			if tc.fresh != nil {
				obs = *tc.fresh
			}
			st, s := decide(tc.in, obs)
			if s.Action != tc.action || tc.member != "" && s.Member != tc.member {
				t.Fatalf("step %s %s, want %s %s (status %q)", s.Action, s.Member, tc.action, tc.member, st.Message)
			}
			if p, _ := st.condition(condProgressing); tc.reason != "" && p.Reason != tc.reason {
				t.Errorf("Progressing %s (%s), want %s", p.Reason, p.Message, tc.reason)
			}
			if tc.phase != "" && st.Phase != tc.phase {
				t.Errorf("phase %s (%s), want %s", st.Phase, st.Message, tc.phase)
			}
			var created []string
			for _, o := range s.Create {
				created = append(created, o.Resource+"/"+o.Name)
				if o.Resource == "pods" && !strings.Contains(string(o.Body), "https://example-0:2380") {
					t.Errorf("pod %s is not on https: %s", o.Name, o.Body)
				}
			}
			if tc.creates != nil && !slices.Equal(created, tc.creates) {
				t.Errorf("creates %v, want %v", created, tc.creates)
			}
			if s.Action == actAddMember && !strings.Contains(fmt.Sprint(s.Etcd.Body), "https://example-3:2380") {
				t.Errorf("member added with %v, want an https peer URL", s.Etcd.Body)
			}
			if tc.again != 0 && s.Again != tc.again {
				t.Errorf("again %s, want %s", s.Again, tc.again)
			}
		})
	}
}
