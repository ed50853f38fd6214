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

// caStage is a point of a CA rotation, as the Secrets and Pods show it.
type caStage struct {
	size int
	// caCert is which CA BASE-ca issues from, "old" or "new"; next and
	// previous are its next.crt and previous.crt ("" for none).
	caCert, next, previous string
	// switchedAgo is when the switch was; issuedAgo when the leaves were
	// written.
	switchedAgo, issuedAgo time.Duration
	rotation               string // BASE-ca's rotation key
	// leaves: per member, the issuer and the CAs of its ca.crt, such as
	// "old:old+new"; root the CAs of BASE-root's ca.crt; pods the CAs
	// each Pod started with ("" for no annotation).
	leaves []string
	root   string
	pods   []string
}

// caWorld builds a TLS world of the stage, its view read by tlsOf from
// Secrets as the API server would hold them.
func caWorld(t *testing.T, cas map[string]*ca.CA, st caStage, now time.Time) *world {
	t.Helper()
	w, _ := tlsWorld(t, st.size)
	bundle := func(names string) []byte {
		var pems [][]byte
		for _, n := range strings.Split(names, "+") {
			pems = append(pems, cas[n].CertPEM())
		}
		return ca.Bundle(pems...)
	}
	jwt := map[string][]byte{"jwt.key": []byte("k"), "jwt.pub": []byte("p")}
	caData := map[string][]byte{"tls.crt": cas[st.caCert].CertPEM(), "tls.key": cas[st.caCert].KeyPEM(), "jwt.key": jwt["jwt.key"], "jwt.pub": jwt["jwt.pub"], keyRotation: []byte(st.rotation)}
	if st.next != "" {
		caData[keyNextCACert], caData[keyNextCAKey] = cas[st.next].CertPEM(), cas[st.next].KeyPEM()
	}
	if st.previous != "" {
		caData[keyPreviousCA], caData[keySwitchedAt] = cas[st.previous].CertPEM(), []byte(stamp(now.Add(-st.switchedAgo)))
	}
	secrets := []secret{
		{Metadata: ownedMeta{Name: caSecret("example")}, Data: caData},
		{Metadata: ownedMeta{Name: rootSecret("example")}, Data: map[string][]byte{"username": []byte("root"), "password": []byte("pw"), "ca.crt": bundle(st.root)}},
	}
	plan := newClusterPlan(objectMeta{Name: "example", Namespace: "default", UID: "u"}, repo+":v3.6.16")
	plan.TLS = tlsIn(st.size).Spec.TLS
	for i, l := range st.leaves {
		member := fmt.Sprintf("example-%d", i)
		issuer, trust, _ := strings.Cut(l, ":")
		plan.Trust = bundle(trust)
		_, data, err := plan.leafToMake(cas[issuer], jwt, member).data(now.Add(-st.issuedAgo))
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, secret{Metadata: ownedMeta{Name: memberSecret(member)}, Data: data})
		if i < len(st.pods) && st.pods[i] != "" {
			w.obs.Pods[i].Trust = ca.Fingerprint(bundle(st.pods[i]))
		}
	}
	w.obs.TLS = tlsOf(secrets, "example", now)
	w.obs.Now = now
	return w
}

func TestDecideCARotation(t *testing.T) {
	now := time.Now()
	cas := map[string]*ca.CA{}
	for name, born := range map[string]time.Time{"old": now.Add(-time.Hour), "new": now, "aging": now.Add(-8 * time.Hour)} {
		c, err := ca.New("example etcd CA "+name, 10*time.Hour, born)
		if err != nil {
			t.Fatal(err)
		}
		cas[name] = c
	}
	three := func(s string) []string { return []string{s, s, s} }
	settled := caStage{size: 3, caCert: "old", leaves: three("old:old"), root: "old", pods: three("old")}
	from := func(base caStage, edit func(*caStage)) caStage {
		s := base
		s.leaves, s.pods = slices.Clone(s.leaves), slices.Clone(s.pods)
		edit(&s)
		return s
	}
	stage := func(edit func(*caStage)) caStage { return from(settled, edit) }
	trusting := stage(func(s *caStage) { s.next, s.leaves, s.root = "new", three("old:old+new"), "old+new" })
	switching := from(trusting, func(s *caStage) { s.pods = three("old+new") })
	issuing := from(switching, func(s *caStage) {
		s.caCert, s.next, s.previous, s.switchedAgo, s.issuedAgo, s.leaves = "new", "", "old", 10*time.Minute, time.Minute, three("new:old+new")
	})
	retired := from(issuing, func(s *caStage) { s.previous, s.leaves, s.root = "", three("new:new"), "new" })
	const (
		inTrust  = "members come to trust the new CA, one restart at a time"
		inIssue  = "the new CA issues the members' certificates; 0 of the previous CA left"
		inForget = "members restart, one at a time, to stop trusting the previous CA"
	)
	for _, tc := range []struct {
		name     string
		spec     string // spec.tls.caRotation
		st       caStage
		edit     func(w *world)
		action   string
		member   string
		reason   string // of the Progressing condition
		phase    string
		body     []string // in the patch, or the renewed Secret's trust
		again    time.Duration
		rotation string // status.tls.caRotation
	}{
		{name: "settled: nothing to do", st: settled, reason: reasonIdle, phase: phaseRunning, rotation: "-"},
		{name: "asked for: a next CA", spec: "2026-12-07", st: settled, action: actPrepareCA, reason: reasonRotatingCA},
		{name: "two thirds of the CA's life: a next CA", st: stage(func(s *caStage) {
			s.caCert, s.leaves, s.root, s.pods = "aging", three("aging:aging"), "aging", three("aging")
		}), action: actPrepareCA},
		{name: "a request answered is not asked again", spec: "2026-12-07", st: stage(func(s *caStage) { s.rotation = "2026-12-07" }), reason: reasonIdle},
		{name: "next CA: leaves get both CAs", st: stage(func(s *caStage) { s.next = "new" }), action: actRenewCertificate, member: "example-0", reason: reasonRenewingCertificate, body: []string{"old+new"}},
		{name: "next CA: then the root Secret", st: from(trusting, func(s *caStage) { s.root = "old" }), action: actTrustCA, body: []string{"ca.crt"}},
		{name: "next CA: a follower restarts first", st: trusting, action: actRestartForCA, member: "example-1", phase: phaseRotating, rotation: inTrust},
		{name: "next CA: the leader last, after it hands over", st: from(trusting, func(s *caStage) { s.pods = []string{"old", "old+new", "old+new"} }), action: actMoveLeader, member: "example-1"},
		{name: "next CA: a Pod without the annotation trusts the CA alone", st: from(trusting, func(s *caStage) { s.pods = []string{"old+new", "", "old+new"} }), action: actRestartForCA, member: "example-1"},
		{name: "next CA: no restart while a member is down", st: trusting, edit: func(w *world) { w.down("example-2") }, reason: reasonWaitingForHealth},
		{name: "next CA: one member cannot restart without downtime", st: from(trusting, func(s *caStage) { s.size, s.leaves, s.pods = 1, s.leaves[:1], s.pods[:1] }), reason: reasonRotationNeedsMembers},
		{name: "every Pod trusts both: switch", st: switching, action: actSwitchCA, rotation: inTrust, body: []string{keyPreviousCA, `"next.crt":null`, `"next.key":null`, keySwitchedAt}},
		{name: "switched: leaves of the previous CA renewed", st: from(issuing, func(s *caStage) { s.leaves[2] = "old:old+new" }), action: actRenewCertificate, member: "example-2", body: []string{"new+old"}, rotation: "the new CA issues the members' certificates; 1 of the previous CA left"},
		{name: "switched: a removed member's Secret of the previous CA does not count", st: from(issuing, func(s *caStage) { s.leaves = append(s.leaves, "old:old+new") }), reason: reasonIdle, again: defaultSecretSync - time.Minute, rotation: inIssue},
		{name: "switched: the previous CA stays while the kubelet syncs, from the last leaf written", st: issuing, reason: reasonIdle, again: defaultSecretSync - time.Minute, rotation: inIssue},
		{name: "switched: then the previous CA is retired", st: from(issuing, func(s *caStage) { s.issuedAgo = defaultSecretSync }), action: actRetireCA, body: []string{`"previous.crt":null`, `"switched-at":null`}},
		{name: "retired: leaves drop the previous CA", st: from(retired, func(s *caStage) { s.leaves[1] = "new:old+new" }), action: actRenewCertificate, member: "example-1", body: []string{"new"}},
		{name: "retired: members restart to forget it", st: retired, action: actRestartForCA, member: "example-1", rotation: inForget},
		{name: "done", st: from(retired, func(s *caStage) { s.pods = three("new") }), reason: reasonIdle, phase: phaseRunning, rotation: "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := caWorld(t, cas, tc.st, now)
			if tc.edit != nil {
				tc.edit(w)
			}
			in := tlsIn(tc.st.size)
			in.Spec.TLS.CARotation = tc.spec
			st, s := decide(in, w.obs)
			if s.Action != tc.action || tc.member != "" && s.Member != tc.member {
				t.Fatalf("step %s %s, want %s %s (status %q)", s.Action, s.Member, tc.action, tc.member, st.Message)
			}
			if p, _ := st.condition(condProgressing); tc.reason != "" && p.Reason != tc.reason {
				t.Errorf("Progressing %s (%s), want %s", p.Reason, p.Message, tc.reason)
			}
			if tc.phase != "" && st.Phase != tc.phase {
				t.Errorf("phase %s (%s), want %s", st.Phase, st.Message, tc.phase)
			}
			for _, want := range tc.body {
				switch {
				case s.Renew != nil:
					if got := ca.Fingerprint(s.Renew.Trust); !strings.Contains(want, "+") && got != ca.Fingerprint(cas[want].CertPEM()) ||
						strings.Contains(want, "+") && got != ca.Fingerprint(ca.Bundle(cas["old"].CertPEM(), cas["new"].CertPEM())) {
						t.Errorf("renewed with a ca.crt of %s, want %s", got, want)
					}
				case s.Patch == nil || !strings.Contains(string(s.Patch.Body), want):
					t.Errorf("patch %v does not hold %s", s.Patch, want)
				}
			}
			if tc.again != 0 && (s.Again < tc.again-time.Second || s.Again > tc.again+time.Second) {
				t.Errorf("again %s, want %s", s.Again, tc.again)
			}
			if st.TLS == nil || tc.rotation != "" && st.TLS.CARotation != strings.TrimPrefix(tc.rotation, "-") {
				t.Errorf("status.tls %+v, want caRotation %q", st.TLS, tc.rotation)
			}
		})
	}
}

// The Pods a rotation's plan makes record the CAs they trust, and a
// switch's patch carries the new CA whole.
func TestCARotationManifests(t *testing.T) {
	now := time.Now()
	old, err := ca.New("old", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	next, err := ca.New("next", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	plan := newClusterPlan(objectMeta{Name: "example", Namespace: "default", UID: "u"}, repo+":v3.6.16")
	plan.TLS, plan.Trust = tlsIn(3).Spec.TLS, ca.Bundle(old.CertPEM(), next.CertPEM())
	var p pod
	if err := json.Unmarshal(plan.joiningPod("example-1", ""), &p); err != nil {
		t.Fatal(err)
	}
	if got := p.cached().Trust; got != ca.Fingerprint(ca.Bundle(next.CertPEM(), old.CertPEM())) {
		t.Errorf("pod trust %q, want the fingerprint of both CAs", got)
	}
	// A Pod made before its Secret is renewed (a quorum lost, the operator
	// restarted) mounts the Secret as it is: it trusts the old CA alone,
	// and must not pass for one that trusts both (the simulation's seed
	// 699409140: the CA switched, and the member was cut off).
	plan.SecretTrust = map[string]string{"example-1": ca.Fingerprint(old.CertPEM())}
	var early pod
	if err := json.Unmarshal(plan.joiningPod("example-1", ""), &early); err != nil {
		t.Fatal(err)
	}
	if got := early.cached().Trust; got != ca.Fingerprint(old.CertPEM()) {
		t.Errorf("pod trust %q, want the fingerprint of the old CA its Secret holds", got)
	}
	plan.TLS = nil
	var plain pod
	if err := json.Unmarshal(plan.joiningPod("example-1", ""), &plain); err != nil {
		t.Fatal(err)
	}
	if plain.Metadata.Annotations[annotationTrust] != "" {
		t.Errorf("a plain http pod has annotation %s", annotationTrust)
	}
}

// TestTLSRotatesCA: a new spec.tls.caRotation takes a cluster on the fake
// API through the whole rotation, Pods deleted and made again one at a
// time, until every certificate and every Pod is of the new CA alone.
func TestTLSRotatesCA(t *testing.T) {
	f := newFakeAPI(t)
	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{}})
	startOperator(t, f, "-secret-sync", "1s")
	waitStatus(f, "example", tlsSettled(3))
	before := secretData(t, f, "example-ca")

	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{"caRotation": "one"}})
	f.waitFor("a new CA, the previous one retired, every Pod trusting it", func() bool {
		var s secret // waitFor holds f.mu
		_ = json.Unmarshal(mustJSON(f.objects["secrets/default/example-ca"]), &s)
		if s.Data[keyPreviousCA] != nil || s.Data[keyNextCACert] != nil {
			return false
		}
		crt := s.Data["tls.crt"]
		fp, pods := ca.Fingerprint(crt), 0
		for key, p := range f.objects {
			if strings.HasPrefix(key, "pods/default/example-") {
				a, _ := p["metadata"].(map[string]any)["annotations"].(map[string]any)
				if a[annotationTrust] != fp {
					return false
				}
				pods++
			}
		}
		return pods == 3 && !slices.Equal(crt, before["tls.crt"])
	})
	done := tlsSettled(3)
	st := waitStatus(f, "example", statusCheck{done.what + ", no CA rotation under way", func(st clusterStatus) bool { return done.ok(st) && st.TLS.CARotation == "" }})
	cad := secretData(t, f, "example-ca")
	issuer, err := ca.Parse(cad["tls.crt"], cad["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	if st.TLS.CARotation != "" || st.TLS.CANotAfter != stamp(issuer.NotAfter()) || string(cad[keyRotation]) != "one" {
		t.Errorf("status.tls %+v, BASE-ca's rotation %q; want the rotation done, for the new CA", st.TLS, cad[keyRotation])
	}
	for _, name := range []string{"example-root", "example-0-tls", "example-1-tls", "example-2-tls"} {
		d := secretData(t, f, name)
		if !slices.Equal(d["ca.crt"], issuer.CertPEM()) {
			t.Errorf("Secret %s: ca.crt is not the new CA alone", name)
		}
		if _, err := ca.Check(d["tls.crt"], d["tls.key"], issuer.CertPEM(), time.Now()); name != "example-root" && err != nil {
			t.Errorf("Secret %s: %v", name, err)
		}
	}
	// Every member restarts twice: to trust the new CA, and to forget the
	// old one.
	counts := map[string]int{}
	f.waitFor("one CARotationStarted, CASwitched and CARetired event, and 6 MemberRestarted", func() bool {
		clear(counts)
		for _, e := range f.events {
			r := e["reason"].(string)
			if r != reasonMemberRestarted || strings.Contains(fmt.Sprint(e["message"]), "restarts to trust") {
				counts[r]++
			}
		}
		return counts[reasonCARotationStarted] == 1 && counts[reasonCASwitched] == 1 && counts[reasonCARetired] == 1 && counts[reasonMemberRestarted] == 6
	})
	t.Logf("events: %v", counts)
}

// TestTLSRotatesCAThroughFaults: faults that overlap a CA rotation. The
// operator stops once a member has restarted for the next CA; meanwhile
// someone deletes another member's Pod and spec.tls.caRotation changes
// again. A new operator finishes the rotation under way from what the
// Secrets and Pods say, then makes the one asked for since: every member
// ends trusting the last CA alone.
func TestTLSRotatesCAThroughFaults(t *testing.T) {
	f := newFakeAPI(t)
	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{}})
	op := startOperator(t, f, "-secret-sync", "1s")
	waitStatus(f, "example", tlsSettled(3))
	first := secretData(t, f, "example-ca")["tls.crt"]

	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{"caRotation": "one"}})
	restarts := func() (n int) { // waitFor holds f.mu
		for _, e := range f.events {
			if e["reason"] == reasonMemberRestarted && strings.Contains(fmt.Sprint(e["message"]), "restarts to trust") {
				n++
			}
		}
		return n
	}
	f.waitFor("a member restarted for the next CA", func() bool { return restarts() >= 1 })
	op.stop()
	var pod string
	for _, name := range []string{"example-0", "example-1", "example-2"} {
		if p := f.object("pods", "default", name); p != nil && p["metadata"].(map[string]any)["annotations"].(map[string]any)[annotationTrust] != nil && pod == "" {
			pod = name
		}
	}
	f.deletePod("default", pod)
	f.putCluster("default", "example", map[string]any{"size": 3, "tls": map[string]any{"caRotation": "two"}})
	startOperator(t, f, "-secret-sync", "1s")

	f.waitFor("the second rotation done: every Pod trusting the last CA alone", func() bool {
		var s secret
		_ = json.Unmarshal(mustJSON(f.objects["secrets/default/example-ca"]), &s)
		if string(s.Data[keyRotation]) != "two" || s.Data[keyPreviousCA] != nil || s.Data[keyNextCACert] != nil {
			return false
		}
		fp, pods := ca.Fingerprint(s.Data["tls.crt"]), 0
		for key, p := range f.objects {
			if strings.HasPrefix(key, "pods/default/example-") {
				if a, _ := p["metadata"].(map[string]any)["annotations"].(map[string]any); a[annotationTrust] != fp {
					return false
				}
				pods++
			}
		}
		return pods == 3
	})
	done := tlsSettled(3)
	waitStatus(f, "example", statusCheck{done.what + ", no CA rotation under way", func(st clusterStatus) bool { return done.ok(st) && st.TLS.CARotation == "" }})
	if slices.Equal(secretData(t, f, "example-ca")["tls.crt"], first) {
		t.Error("the CA is still the first one")
	}
	f.waitFor("two CARetired events", func() bool {
		n := 0
		for _, e := range f.events {
			if e["reason"] == reasonCARetired {
				n++
			}
		}
		return n == 2
	})
}
