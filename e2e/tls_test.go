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
	"net"
	"net/http"
	"strings"
	"sync"
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
	needNodeBeside(t)
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

// TestCertRotation: certificates that live 2 minutes are renewed by the
// operator and taken up by etcd with no restart, and then the CA rotates,
// each member restarted one at a time, while a writer puts a new key every
// 100 ms over a new TLS connection each time (tlsWriter). Through the
// renewals not one write fails or is retried; through the CA rotation no
// acknowledged write is lost, no wait is longer than an election, and no
// member ever shows a certificate the client's CAs (Secret NAME-root's) do
// not trust.
func TestCertRotation(t *testing.T) {
	needNodeBeside(t)
	ns := nodeNamespace(t, "cert-rotation")
	// The node's kubelet syncs Pods every 10 s: 30 s is ample for it to put
	// a new certificate into every Pod (the default is for a minute's).
	name := operatorName(ns)
	if _, err := cp.StartOperator(OperatorOptions{Name: name, Namespace: ns, Flags: []string{"-log-level=debug", "-secret-sync=30s"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.StopProcess(name, 10*time.Second) })
	tlsSpec := map[string]any{"certificateLifetime": "2m"}
	applyCluster(t, Cluster{Namespace: ns, Name: "short", Size: 3, TLS: tlsSpec})
	d := &day2{t: t, ns: ns, name: "short"}
	// Running comes a pass or so before auth is on (auth.go).
	d.wait("3 members on TLS, auth enabled", 2*time.Minute, func(st e2eStatus) bool {
		return st.Phase == "Running" && st.Ready == "3/3" && st.TLS.Auth == "enabled"
	})
	oldCA := rootOf(t, ns, "short").roots
	uids := podUIDs(t, ns, "short", 3)
	w := startTLSWriter(t, ns, "short", 3)
	const run = 6 * time.Minute

	// 1. Renewals: each member serves its third certificate, etcd not
	// restarted, and no write failed or was retried.
	serials := map[string]map[string]bool{}
	err := Eventually(5*time.Minute, "every member serving its third certificate", func() (bool, error) {
		n := 3
		for i := range 3 {
			pod := fmt.Sprintf("short-%d", i)
			if serials[pod] == nil {
				serials[pod] = map[string]bool{}
			}
			if c, err := dialCertificate(oldCA, cp.PodIP(ns, pod)); err == nil {
				serials[pod][c.SerialNumber.String()] = true
			}
			n = min(n, len(serials[pod]))
		}
		return n >= 3, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	renewed := w.snapshot()
	t.Logf("renewals: %d writes in %s, %d retried", renewed.acked, time.Since(w.start).Round(time.Second), len(renewed.retries))
	if len(renewed.retries) > 0 {
		t.Errorf("%d writes retried through the renewals, the first: %s", len(renewed.retries), renewed.retries[0])
	}
	for i := range 3 {
		pod := fmt.Sprintf("short-%d", i)
		if n := restarts(t, ns, pod); n != 0 || podUIDs(t, ns, "short", 3)[pod] != uids[pod] {
			t.Errorf("%s restarted (%d container restarts) through the renewals", pod, n)
		}
	}

	// 2. The CA rotation, asked for by spec.tls.caRotation.
	tlsSpec["caRotation"] = "e2e"
	asked := time.Now()
	applyCluster(t, Cluster{Namespace: ns, Name: "short", Size: 3, TLS: tlsSpec})
	d.wait("the rotation started", time.Minute, func(st e2eStatus) bool { return d.events("CARotationStarted") == 1 })
	d.wait("the rotation done", 8*time.Minute, func(st e2eStatus) bool {
		return st.Phase == "Running" && st.Ready == "3/3" && st.TLS.CARotation == "" && d.events("CARetired") == 1
	})
	t.Logf("the CA rotation took %s", time.Since(asked).Round(time.Second))
	<-time.After(time.Until(w.start.Add(run)))
	done := w.stop()
	t.Logf("%d writes in %s, %d retried, the longest wait %s; the first retries: %q", done.acked, time.Since(w.start).Round(time.Second), len(done.retries), done.longest.Round(time.Millisecond), done.retries[:min(3, len(done.retries))])
	for _, r := range done.retries {
		if strings.Contains(r, "x509") || strings.Contains(r, "certificate") {
			t.Errorf("a member showed a certificate its client did not trust: %s", r)
		}
	}
	if done.longest > 5*time.Second {
		t.Errorf("a write waited %s, longer than an election", done.longest)
	}
	// (The Pod made again on its volume has an Event of its own.)
	restarted := 0
	for _, msg := range d.eventMessages("MemberRestarted") {
		if strings.Contains(msg, "restarts to trust") {
			restarted++
		}
	}
	if restarted != 2*3 {
		t.Errorf("%d members restarted for the CA, want 2 per member (to trust the new CA, to forget the old)", restarted)
	}
	w.checkKeys(done.acked)
	// The old CA verifies none of the certificates served now.
	for i := range 3 {
		ip := cp.PodIP(ns, fmt.Sprintf("short-%d", i))
		if _, err := dialCertificate(oldCA, ip); err == nil || !strings.Contains(err.Error(), "unknown authority") {
			t.Errorf("short-%d after the rotation, verified with the old CA: %v, want an unknown authority", i, err)
		}
	}
}

// podUIDs are the uids of the Pods NAME-0 to NAME-(n-1).
func podUIDs(t *testing.T, ns, name string, n int) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for i := range n {
		var p struct{ Metadata struct{ UID string } }
		pod := fmt.Sprintf("%s-%d", name, i)
		if err := cp.Get("/api/v1/namespaces/"+ns+"/pods/"+pod, &p); err != nil {
			t.Fatalf("GET pod %s: %v", pod, err)
		}
		uids[pod] = p.Metadata.UID
	}
	return uids
}

// dialCertificate is the certificate a member serves, verified with roots.
func dialCertificate(roots *x509.CertPool, ip string) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", ip+":2379", &tls.Config{RootCAs: roots, ServerName: "localhost"})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// tlsWriter is a careful client of a TLS cluster: every 100 ms it puts the
// next key /e2e/rotation/NNNNNN, over a new connection each time, and it
// goes on to the next key only once a member acknowledged this one. A
// member that does not answer within a second, or refuses, it leaves for
// the next; a token a member forgot (it restarted) it replaces. Every 3 s
// it reads again the CAs to trust from Secret NAME-root and the members'
// Pod IPs, as a client that follows the Secret does.
type tlsWriter struct {
	t        *testing.T
	ns, name string
	size     int
	start    time.Time
	quit     chan struct{}
	done     chan writerStats

	mu    sync.Mutex
	stats writerStats
}

type writerStats struct {
	acked   int           // keys 0 to acked-1 acknowledged
	retries []string      // why an attempt failed
	longest time.Duration // the longest time from one acknowledgement to the next
}

func startTLSWriter(t *testing.T, ns, name string, size int) *tlsWriter {
	w := &tlsWriter{t: t, ns: ns, name: name, size: size, start: time.Now(), quit: make(chan struct{}), done: make(chan writerStats, 1)}
	go w.run()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *tlsWriter) snapshot() writerStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.retries = append([]string(nil), s.retries...)
	return s
}

// stop ends the writer (once) and returns what it did.
func (w *tlsWriter) stop() writerStats {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	s := <-w.done
	w.done <- s
	return s
}

func (w *tlsWriter) run() {
	var client *http.Client
	var ips []string
	var password string
	tokens := map[string]string{}
	var refreshed, last time.Time
	last = time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for next := 0; ; {
		select {
		case <-w.quit:
			w.done <- w.snapshot()
			return
		case <-tick.C:
		}
		if time.Since(refreshed) >= 3*time.Second {
			if c, p, m, err := w.refresh(); err == nil {
				client, password, ips, refreshed = c, p, m, time.Now()
			}
		}
		for j := 0; client != nil && j < len(ips); j++ {
			ip := ips[(next+j)%len(ips)]
			err := w.put(client, ip, password, tokens, next)
			if err == nil {
				w.mu.Lock()
				w.stats.acked, w.stats.longest = next+1, max(w.stats.longest, time.Since(last))
				w.mu.Unlock()
				next, last = next+1, time.Now()
				break
			}
			w.mu.Lock()
			w.stats.retries = append(w.stats.retries, fmt.Sprintf("key %d on %s at %s: %v", next, ip, time.Since(w.start).Round(time.Millisecond), err))
			w.mu.Unlock()
		}
	}
}

// put writes key n on ip, signing in first if ip has no token, and again
// if etcd forgot it.
func (w *tlsWriter) put(c *http.Client, ip, password string, tokens map[string]string, n int) error {
	body := map[string]string{"key": b64(fmt.Sprintf("/e2e/rotation/%06d", n)), "value": b64(fmt.Sprint(n))}
	for try := 0; try < 2; try++ {
		if tokens[ip] == "" {
			token, err := tryLogin(c, ip, "root", password)
			if err != nil {
				return err
			}
			tokens[ip] = token
		}
		code, out, err := etcdPost(c, "https://"+ip+":2379/v3/kv/put", tokens[ip], body)
		switch {
		case err != nil:
			return err
		case code == 200:
			return nil
		case strings.Contains(out, "invalid auth token") && try == 0:
			tokens[ip] = ""
		default:
			return fmt.Errorf("%d %.200s", code, out)
		}
	}
	return fmt.Errorf("signed in, and the token refused")
}

// refresh reads NAME-root and the members' Pod IPs.
func (w *tlsWriter) refresh() (*http.Client, string, []string, error) {
	code, b, err := cp.Do("GET", "/api/v1/namespaces/"+w.ns+"/secrets/"+w.name+"-root", nil, "")
	var s struct{ Data map[string][]byte }
	if err == nil && (code != 200 || json.Unmarshal(b, &s) != nil) {
		err = fmt.Errorf("GET secret %s-root: %d", w.name, code)
	}
	if err != nil {
		return nil, "", nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data["ca.crt"])
	c := etcdClient(roots, nil)
	c.Timeout = time.Second
	c.Transport.(*http.Transport).DisableKeepAlives = true
	var ips []string
	for i := range w.size {
		if ip := cp.PodIP(w.ns, fmt.Sprintf("%s-%d", w.name, i)); ip != "" {
			ips = append(ips, ip)
		}
	}
	return c, string(s.Data["password"]), ips, nil
}

// checkKeys: the cluster holds keys 0 to acked-1 and no other, as root.
func (w *tlsWriter) checkKeys(acked int) {
	w.t.Helper()
	r := rootOf(w.t, w.ns, w.name)
	var resp struct {
		Count int64 `json:",string"`
	}
	rng := map[string]any{"key": b64("/e2e/rotation/"), "range_end": b64("/e2e/rotation0"), "count_only": true}
	if err := r.call(w.name+"-0", "/v3/kv/range", rng, &resp); err != nil {
		w.t.Fatal(err)
	}
	if resp.Count != int64(acked) {
		w.t.Errorf("%d keys written, %d acknowledged", resp.Count, acked)
	}
	for _, n := range []int{0, acked / 2, acked - 1} {
		if v := r.get(w.name+"-0", fmt.Sprintf("/e2e/rotation/%06d", n)); v != fmt.Sprint(n) {
			w.t.Errorf("key %d holds %q", n, v)
		}
	}
}

// asRoot reaches a TLS cluster's members as root, with the password and
// the CA of Secret NAME-root, signing in again on each call: a member
// replaced or restarted has a new IP and takes the token all the same.
type asRoot struct {
	t        *testing.T
	ns       string
	client   *http.Client
	roots    *x509.CertPool
	password string
}

func rootOf(t *testing.T, ns, name string) *asRoot {
	t.Helper()
	creds := secretData(t, ns, name+"-root")
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(creds["ca.crt"]) {
		t.Fatalf("%s-root has no ca.crt", name)
	}
	return &asRoot{t: t, ns: ns, client: etcdClient(roots, nil), roots: roots, password: string(creds["password"])}
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
	needNodeBeside(t)
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
	needNodeBeside(t)
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
