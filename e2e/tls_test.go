package e2e

// TLS on the real node: the members of a cluster with spec.tls talk to each
// other over mutual TLS and to clients over TLS with etcd's authentication
// on, so that nobody without the root password (in Secret NAME-root) reads
// or writes a key, and the operator still runs the cluster, resize
// included.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"
)

// foreignCertificate is a certificate for "root" and localhost from a CA
// that has nothing to do with the cluster's.
func foreignCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "root"}, DNSNames: []string{"localhost"}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
}

// etcdClient speaks https to etcd's JSON gateway, trusting roots and
// presenting cert, if any.
func etcdClient(roots *x509.CertPool, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// etcdPost POSTs body to url with etcd's token (if any) and returns the
// status code and the answer.
func etcdPost(c *http.Client, url, token string, body any) (int, string, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest("POST", url, bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), nil
}

// secretData reads a Secret's data as the admin.
func secretData(t *testing.T, ns, name string) map[string][]byte {
	t.Helper()
	code, b, err := cp.Do("GET", "/api/v1/namespaces/"+ns+"/secrets/"+name, nil, "")
	if err != nil || code != 200 {
		t.Fatalf("GET secret %s: %d %v %.300s", name, code, err, b)
	}
	var s struct{ Data map[string][]byte }
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// login signs in as root and returns etcd's token.
func login(t *testing.T, c *http.Client, ip, password string) string {
	t.Helper()
	code, out, err := etcdPost(c, "https://"+ip+":2379/v3/auth/authenticate", "", map[string]string{"name": "root", "password": password})
	var a struct{ Token string }
	if err != nil || code != 200 || json.Unmarshal([]byte(out), &a) != nil || a.Token == "" {
		t.Fatalf("authenticate as root on %s: %d %s %v", ip, code, out, err)
	}
	return a.Token
}

func TestTLSNoAnonymousAccess(t *testing.T) {
	needNode(t)
	ns := nodeNamespace(t, "tls")
	startOperator(t, ns, "")
	// The example as it is.
	if _, err := cp.Kubectl("", "apply", "-n", ns, "-f", examplePath("etcd-cluster-tls.yaml")); err != nil {
		t.Fatal(err)
	}
	ec := waitPhaseIn(t, ns, "example-tls", "Running", 2*time.Minute)
	st, _ := ec.status()["tls"].(map[string]any)
	if st["auth"] != "enabled" {
		// The status may be a pass behind the auth enable.
		err := Eventually(30*time.Second, "status.tls.auth enabled", func() (bool, error) {
			o, err := cp.WaitPhase(ns, "example-tls", "Running", time.Second)
			st, _ = object(o).status()["tls"].(map[string]any)
			return err == nil && st["auth"] == "enabled", nil
		})
		if err != nil {
			t.Fatalf("%v: status.tls = %v", err, st)
		}
	}
	creds := secretData(t, ns, "example-tls-root")
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(creds["ca.crt"]) {
		t.Fatalf("example-tls-root has no ca.crt: %q", creds["ca.crt"])
	}
	ip := cp.PodIP(ns, "example-tls-0")
	client := etcdClient(roots, nil)
	put := map[string]string{"key": b64("/e2e/tls"), "value": b64("secret")}

	t.Run("plain http is refused on the client port", func(t *testing.T) {
		code, out, err := etcdPost(http.DefaultClient, "http://"+ip+":2379/v3/kv/put", "", put)
		if err == nil && code == 200 {
			t.Errorf("a plaintext put succeeded: %s", out)
		}
	})
	t.Run("TLS without credentials is refused", func(t *testing.T) {
		code, out, err := etcdPost(client, "https://"+ip+":2379/v3/kv/put", "", put)
		if err != nil || code == 200 || !strings.Contains(out, "user name is empty") {
			t.Errorf("a put without credentials: %d %s %v; want etcd's refusal", code, out, err)
		}
	})
	foreign := foreignCertificate(t)
	t.Run("a certificate from another CA is no credential", func(t *testing.T) {
		code, out, err := etcdPost(etcdClient(roots, &foreign), "https://"+ip+":2379/v3/kv/put", "", put)
		if err == nil && code == 200 {
			t.Errorf("a put with another CA's certificate succeeded: %s", out)
		}
	})
	t.Run("the root password in the Secret works", func(t *testing.T) {
		token := login(t, client, ip, string(creds["password"]))
		if code, out, err := etcdPost(client, "https://"+ip+":2379/v3/kv/put", token, put); err != nil || code != 200 {
			t.Fatalf("put as root: %d %s %v", code, out, err)
		}
		last := cp.PodIP(ns, "example-tls-2")
		code, out, err := etcdPost(client, "https://"+last+":2379/v3/kv/range", login(t, client, last, string(creds["password"])), map[string]string{"key": put["key"]})
		if err != nil || code != 200 || !strings.Contains(out, put["value"]) {
			t.Errorf("range as root on example-tls-2: %d %s %v", code, out, err)
		}
	})
	t.Run("peers speak mutual TLS only", func(t *testing.T) {
		// Plain http to the peer port.
		if resp, err := http.Get("http://" + ip + ":2380/members"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Errorf("plain http on the peer port answered 200: %.200s", b)
			}
		}
		// TLS with no client certificate, then with another CA's.
		for name, cert := range map[string]*tls.Certificate{"no certificate": nil, "another CA's": &foreign} {
			resp, err := etcdClient(roots, cert).Get("https://" + ip + ":2380/members")
			if err == nil {
				resp.Body.Close()
				t.Errorf("peer port with %s: %s, want the handshake refused", name, resp.Status)
			}
		}
	})
	t.Run("resize over TLS", func(t *testing.T) {
		applyCluster(t, Cluster{Namespace: ns, Name: "example-tls", Size: 5})
		err := Eventually(3*time.Minute, "5 members ready", func() (bool, error) {
			o, err := cp.WaitPhase(ns, "example-tls", "Running", time.Second)
			return err == nil && object(o).status()["ready"] == "5/5", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		last := cp.PodIP(ns, "example-tls-4")
		code, out, err := etcdPost(client, "https://"+last+":2379/v3/kv/range", login(t, client, last, string(creds["password"])), map[string]string{"key": put["key"]})
		if err != nil || code != 200 || !strings.Contains(out, put["value"]) {
			t.Errorf("range as root on the new member: %d %s %v", code, out, err)
		}
		code, out, err = etcdPost(client, "https://"+last+":2379/v3/cluster/member/list", login(t, client, last, string(creds["password"])), map[string]any{})
		if err != nil || code != 200 || strings.Count(out, `"https://`) < 10 || strings.Contains(out, `"http://`) {
			t.Errorf("member list: %d %s %v; want every peer and client URL on https", code, out, err)
		}
	})
}

// servedCertificate is the certificate a member shows on its client port.
func servedCertificate(t *testing.T, roots *x509.CertPool, ip string) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", ip+":2379", &tls.Config{RootCAs: roots, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("TLS to %s: %v", ip, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// TestTLSRenewal: certificates that live 2 minutes are renewed by the
// operator and taken up by etcd with no restart, while a writer puts a key
// every 100 ms for 6 minutes over a new TLS connection each time, to every
// member in turn: not one write fails.
func TestTLSRenewal(t *testing.T) {
	needNode(t)
	ns := nodeNamespace(t, "renewal")
	startOperator(t, ns, "")
	applyCluster(t, Cluster{Namespace: ns, Name: "short", Size: 3, TLS: map[string]any{"certificateLifetime": "2m"}})
	d := &day2{t: t, ns: ns, name: "short"}
	// Running comes a pass or so before auth is on (auth.go).
	d.wait("3 members on TLS, auth enabled", 2*time.Minute, func(st e2eStatus) bool {
		return st.Phase == "Running" && st.Ready == "3/3" && st.TLS.Auth == "enabled"
	})
	creds := secretData(t, ns, "short-root")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(creds["ca.crt"])
	var ips []string
	for i := range 3 {
		ips = append(ips, cp.PodIP(ns, fmt.Sprintf("short-%d", i)))
	}
	first := map[string]string{}
	for _, ip := range ips {
		first[ip] = servedCertificate(t, roots, ip).SerialNumber.String()
	}
	// The JSON gateway takes the token in Authorization when called
	// directly; it lasts 10 minutes.
	client := etcdClient(roots, nil)
	client.Transport.(*http.Transport).DisableKeepAlives = true
	token := login(t, client, ips[0], string(creds["password"]))
	const run = 6 * time.Minute
	start, writes := time.Now(), 0
	var failures []string
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < run {
		<-tick.C
		ip := ips[writes%len(ips)]
		writes++
		code, out, err := etcdPost(client, "https://"+ip+":2379/v3/kv/put", token, map[string]string{"key": b64("/e2e/renewal"), "value": b64(fmt.Sprint(writes))})
		if err != nil || code != 200 {
			failures = append(failures, fmt.Sprintf("%s at %s: %d %.200s %v", ip, time.Since(start).Round(time.Millisecond), code, out, err))
		}
	}
	t.Logf("%d writes in %s, %d failed", writes, run, len(failures))
	if len(failures) > 0 {
		t.Errorf("%d of %d writes failed, the first: %s", len(failures), writes, failures[0])
	}
	// Each member serves a certificate renewed since (another serial, valid
	// for a while yet), from the same Pod: etcd was not restarted.
	for i, ip := range ips {
		c := servedCertificate(t, roots, ip)
		if c.SerialNumber.String() == first[ip] || time.Until(c.NotAfter) <= 0 {
			t.Errorf("short-%d serves serial %s until %s, first %s: not renewed", i, c.SerialNumber, c.NotAfter, first[ip])
		}
		if n := restarts(t, ns, fmt.Sprintf("short-%d", i)); n != 0 {
			t.Errorf("short-%d restarted %d times", i, n)
		}
	}
	log := processLog(t, operatorName(ns), 0)
	if n := strings.Count(log, "certificate renewed"); n < 3*3 {
		t.Errorf("%d renewals in the operator's log, want at least 3 per member", n)
	}
}

// asRoot reaches a TLS cluster's members as root, with the password and
// the CA of Secret NAME-root, signing in again on each call: a member
// replaced or restarted has a new IP and takes the token all the same.
type asRoot struct {
	t        *testing.T
	ns       string
	client   *http.Client
	password string
}

func rootOf(t *testing.T, ns, name string) *asRoot {
	t.Helper()
	creds := secretData(t, ns, name+"-root")
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(creds["ca.crt"]) {
		t.Fatalf("%s-root has no ca.crt", name)
	}
	return &asRoot{t: t, ns: ns, client: etcdClient(roots, nil), password: string(creds["password"])}
}

// call POSTs body to path on pod and decodes the answer into out.
func (r *asRoot) call(pod, path string, body, out any) error {
	ip := cp.PodIP(r.ns, pod)
	token := login(r.t, r.client, ip, r.password)
	code, b, err := etcdPost(r.client, "https://"+ip+":2379"+path, token, body)
	if err == nil && code != 200 {
		err = fmt.Errorf("%s on %s: %d %.300s", path, pod, code, b)
	}
	if err == nil && out != nil {
		err = json.Unmarshal([]byte(b), out)
	}
	return err
}

func (r *asRoot) get(pod, key string) string {
	r.t.Helper()
	var resp struct{ Kvs []struct{ Value []byte } }
	if err := r.call(pod, "/v3/kv/range", map[string]string{"key": b64(key)}, &resp); err != nil {
		r.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// TestTLSDayTwo: what the operator does to a plain cluster it does to a
// TLS one, etcd's authentication on: a backup signed in as root, and a new
// TLS cluster restored from it with the source's credentials; a lost member
// replaced (on emptyDir); a rolling upgrade; the data kept and every peer
// URL still https.
func TestTLSDayTwo(t *testing.T) {
	needNode(t)
	ns := nodeNamespace(t, "tls-day2")
	startOperator(t, ns, "")
	d := &day2{t: t, ns: ns, name: "example", emptyDir: true}
	applyCluster(t, Cluster{Namespace: ns, Name: "example", Size: 3, Version: "v3.6.16", EmptyDir: true, TLS: map[string]any{}})
	st := d.wait("3 members on TLS, auth enabled", 3*time.Minute, func(st e2eStatus) bool {
		return st.Phase == "Running" && st.Ready == "3/3" && st.TLS.Auth == "enabled"
	})
	id := st.ClusterID
	root := rootOf(t, ns, "example")
	if err := root.call(d.member(0), "/v3/kv/put", map[string]string{"key": b64("/before"), "value": b64("tls")}, nil); err != nil {
		t.Fatal(err)
	}

	t.Run("backup under auth", func(t *testing.T) {
		// On the node's bridge: the restored member fetches the backup too.
		s := startS3On(t, "versitygw-"+ns, NodeIP)
		d.secret("s3", map[string]string{"accessKeyID": s.AccessKey, "secretAccessKey": s.SecretKey})
		d.setBackup(map[string]any{"s3": map[string]any{"endpoint": s.URL, "bucket": "backups", "prefix": "e2e", "credentialsSecret": "s3"}, "now": "tls"})
		b := d.waitBackup("tls")
		obj, ok := s.download(t, b.Key)
		if b.Revision < 1 || ok && !bytes.Contains(obj, []byte("/before")) {
			t.Errorf("backup %+v: the snapshot of %d bytes has not the key written", b, len(obj))
		}
		// Its data holds the source's users: the new cluster signs in
		// with a copy of the source's credentials.
		src := secretData(t, ns, "example-root")
		d.secret("example-creds", map[string]string{"username": string(src["username"]), "password": string(src["password"])})
		body, _ := json.Marshal(map[string]any{"apiVersion": "coreos.com/v1", "kind": "EtcdCluster", "metadata": map[string]any{"name": "restored"},
			"spec": map[string]any{"size": 1, "storage": map[string]any{"emptyDir": true}, "tls": map[string]any{}, "restore": map[string]any{
				"s3": map[string]any{"endpoint": s.URL, "bucket": "backups", "credentialsSecret": "s3"}, "key": b.Key, "credentialsSecret": "example-creds"}}})
		if code, out, err := cp.Do("POST", "/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters", body, "application/json"); err != nil || code != 201 {
			t.Fatalf("create the restored cluster: %v %d %s", err, code, out)
		}
		r := &day2{t: t, ns: ns, name: "restored"}
		r.wait("the restored cluster running, auth enabled", 3*time.Minute, func(st e2eStatus) bool {
			return st.Phase == "Running" && st.Ready == "1/1" && st.TLS.Auth == "enabled"
		})
		if v := rootOf(t, ns, "restored").get("restored-0", "/before"); v != "tls" {
			t.Errorf("the restored cluster reads /before as %q", v)
		}
	})
	t.Run("a lost member replaced", func(t *testing.T) {
		old := d.podUID(d.member(1))
		d.deletePods(d.member(1))
		if err := Eventually(3*time.Minute, "a MemberReplaced event", func() (bool, error) { return d.events("MemberReplaced") == 1, nil }); err != nil {
			t.Fatal(err)
		}
		d.wait("3 members again", 3*time.Minute, func(st e2eStatus) bool { return st.Phase == "Running" && st.Ready == "3/3" })
		if d.podUID(d.member(1)) == old {
			t.Error("the member's Pod was not replaced")
		}
		if v := root.get(d.member(1), "/before"); v != "tls" {
			t.Errorf("the new member reads /before as %q", v)
		}
	})
	t.Run("rolling upgrade", func(t *testing.T) {
		applyCluster(t, Cluster{Namespace: ns, Name: "example", Size: 3, Version: "v3.7.3", EmptyDir: true, TLS: map[string]any{}})
		st := d.wait("every member at 3.7.3", 5*time.Minute, func(st e2eStatus) bool {
			return st.Phase == "Running" && st.CurrentVersion == "3.7.3" && st.Ready == "3/3"
		})
		if st.ClusterID != id {
			t.Errorf("cluster ID %s, want %s", st.ClusterID, id)
		}
		for _, m := range d.members(3) {
			if v := root.get(m, "/before"); v != "tls" {
				t.Errorf("%s reads /before as %q", m, v)
			}
		}
	})
	var raw map[string]any
	if err := root.call(d.member(2), "/v3/cluster/member/list", map[string]any{}, &raw); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(raw)
	if strings.Contains(string(b), `"http://`) || strings.Count(string(b), `"https://`) < 6 {
		t.Errorf("member list %s: want every peer and client URL on https", b)
	}
}

// TestTLSCredentialsRotation: a new spec.tls.credentialsRotation gives
// Secret example-root a new user and password, and a client that keeps the
// old credentials (it logs in again whenever etcd refuses its token, as
// etcd's clients do) goes on writing through the rotation until the
// overlap is over; then the old password is refused.
func TestTLSCredentialsRotation(t *testing.T) {
	needNode(t)
	ns := nodeNamespace(t, "tls-rotation")
	startOperator(t, ns, "")
	tlsSpec := map[string]any{"credentialsOverlap": "1m"}
	applyCluster(t, Cluster{Namespace: ns, Name: "example", Size: 3, TLS: tlsSpec})
	d := &day2{t: t, ns: ns, name: "example"}
	d.wait("3 members on TLS, auth enabled", 3*time.Minute, func(st e2eStatus) bool {
		return st.Phase == "Running" && st.Ready == "3/3" && st.TLS.Auth == "enabled"
	})
	old := rootOf(t, ns, "example")
	ip := cp.PodIP(ns, d.member(0))

	// The old client: one token, a new one with the old password when
	// etcd refuses it.
	stop, done := make(chan struct{}), make(chan []string)
	go func() {
		var failures []string
		token, _ := tryLogin(old.client, ip, "root", old.password)
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- failures
				return
			case <-time.After(100 * time.Millisecond):
			}
			put := map[string]string{"key": b64("/e2e/rotation"), "value": b64(fmt.Sprint(i))}
			code, out, err := etcdPost(old.client, "https://"+ip+":2379/v3/kv/put", token, put)
			if err == nil && code != 200 && (strings.Contains(out, "revision of auth store is old") || strings.Contains(out, "invalid auth token")) {
				token, _ = tryLogin(old.client, ip, "root", old.password)
				code, out, err = etcdPost(old.client, "https://"+ip+":2379/v3/kv/put", token, put)
			}
			if err != nil || code != 200 {
				failures = append(failures, fmt.Sprintf("%d %.200s %v", code, out, err))
			}
		}
	}()

	tlsSpec["credentialsRotation"] = "e2e"
	applyCluster(t, Cluster{Namespace: ns, Name: "example", Size: 3, TLS: tlsSpec})
	st := d.wait("the Secret on a new user", 2*time.Minute, func(st e2eStatus) bool { return st.TLS.User != "" && st.TLS.User != "root" })
	fresh := rootOf(t, ns, "example")
	creds := secretData(t, ns, "example-root")
	if string(creds["username"]) != st.TLS.User || fresh.password == old.password {
		t.Fatalf("example-root after the rotation: user %q (status %q), the password changed: %v", creds["username"], st.TLS.User, fresh.password != old.password)
	}
	if _, err := tryLogin(fresh.client, ip, st.TLS.User, fresh.password); err != nil {
		t.Errorf("the new credentials: %v", err)
	}
	// The old client writes on until just before the overlap ends.
	at, err := time.Parse(time.RFC3339, string(creds["rotated-at"]))
	if err != nil {
		t.Fatalf("example-root's rotated-at: %v", err)
	}
	<-time.After(time.Until(at.Add(50 * time.Second)))
	close(stop)
	if failures := <-done; len(failures) > 0 {
		t.Errorf("%d writes with the old credentials failed during the overlap, the first: %s", len(failures), failures[0])
	}
	err = Eventually(2*time.Minute, "the old password refused", func() (bool, error) {
		_, err := tryLogin(old.client, ip, "root", old.password)
		return err != nil && strings.Contains(err.Error(), "authentication failed"), nil
	})
	if err != nil {
		t.Error(err)
	}
	if _, err := tryLogin(fresh.client, ip, st.TLS.User, fresh.password); err != nil {
		t.Errorf("the new credentials after the overlap: %v", err)
	}
	d.wait("Running, the rotation done", time.Minute, func(st e2eStatus) bool {
		return st.Phase == "Running" && st.Ready == "3/3" && st.TLS.CredentialsRotation == "e2e"
	})
	if n := d.events("CredentialsRotated"); n != 1 {
		t.Errorf("%d CredentialsRotated events, want 1", n)
	}
}

// tryLogin signs in as user and returns etcd's token or its refusal.
func tryLogin(c *http.Client, ip, user, password string) (string, error) {
	code, out, err := etcdPost(c, "https://"+ip+":2379/v3/auth/authenticate", "", map[string]string{"name": user, "password": password})
	var a struct{ Token string }
	if err == nil && (code != 200 || json.Unmarshal([]byte(out), &a) != nil || a.Token == "") {
		err = fmt.Errorf("authenticate as %s: %d %.200s", user, code, out)
	}
	return a.Token, err
}
