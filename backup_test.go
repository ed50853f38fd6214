package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/encryption"
	"github.com/etcd-operator/etcd-operator/internal/kube"
	"github.com/etcd-operator/etcd-operator/internal/s3/s3test"
	"github.com/etcd-operator/etcd-operator/internal/snapshot/snapshottest"
)

func TestParseBackupSpec(t *testing.T) {
	base := `"s3":{"endpoint":"http://127.0.0.1:7070","bucket":"backups","credentialsSecret":"s3"}`
	tests := []struct {
		spec string
		err  string // "" : valid
	}{
		{`{"size":3}`, ""},
		{`{"size":3,"backup":{` + base + `}}`, ""},
		{`{"backup":{` + base + `,"schedule":"30s","keep":5,"gzip":true,"encryptionKeySecret":"k","now":"1"}}`, ""},
		{`{"backup":{"s3":{"endpoint":"s3.example.com","bucket":"backups","credentialsSecret":"s3"}}}`, "spec.backup.s3.endpoint"},
		{`{"backup":{"s3":{"endpoint":"https://h/path","bucket":"backups","credentialsSecret":"s3"}}}`, "spec.backup.s3.endpoint"},
		{`{"backup":{"s3":{"endpoint":"http://h","bucket":"Backups","credentialsSecret":"s3"}}}`, "spec.backup.s3.bucket"},
		{`{"backup":{"s3":{"endpoint":"http://h","bucket":"backups"}}}`, "spec.backup.s3.credentialsSecret"},
		{`{"backup":{` + base + `,"schedule":"5s"}}`, "spec.backup.schedule"},
		{`{"backup":{` + base + `,"schedule":"daily"}}`, "spec.backup.schedule"},
		{`{"backup":{` + base + `,"keep":0}}`, "spec.backup.keep"},
		{`{"backup":"yes"}`, "spec.backup"},
	}
	for _, tt := range tests {
		b, err := backupSpecOf(json.RawMessage(tt.spec))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.spec, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want one naming %s", tt.spec, err, tt.err)
		case tt.err == "" && strings.Contains(tt.spec, "backup") && (b == nil || b.keep < 1 || b.S3.Region == ""):
			t.Errorf("%s: %+v, want defaults filled in", tt.spec, b)
		}
	}
}

func TestObjectKey(t *testing.T) {
	at := time.Date(2026, 12, 4, 17, 3, 9, 0, time.UTC)
	tests := []struct {
		prefix   string
		gz, enc  bool
		wantKey  string
		clusterN string
	}{
		{"", false, false, "ns/example/20261204T170309.000Z-42.db", "example"},
		{"/etcd/", true, false, "etcd/ns/example/20261204T170309.000Z-42.db.gz", "example"},
		{"a/b", true, true, "a/b/ns/example/20261204T170309.000Z-42.db.gz.enc", "example"},
	}
	for _, tt := range tests {
		spec := &backupSpec{Gzip: tt.gz}
		spec.S3.Prefix = strings.Trim(tt.prefix, "/")
		if tt.enc {
			spec.EncryptionKeySecret = "k"
		}
		prefix := backupPrefix(spec, "ns", tt.clusterN)
		if got := objectKey(prefix, at, 42, spec); got != tt.wantKey {
			t.Errorf("objectKey = %q, want %q", got, tt.wantKey)
		}
		if !backupName.MatchString(strings.TrimPrefix(tt.wantKey, prefix)) {
			t.Errorf("%q does not match backupName", tt.wantKey)
		}
		// Two backups within a second, at the same revision: two objects,
		// in the order they were made.
		next := objectKey(prefix, at.Add(time.Millisecond), 42, spec)
		if next <= tt.wantKey {
			t.Errorf("a backup a millisecond later is %q, not after %q", next, tt.wantKey)
		}
	}
}

func TestToPrune(t *testing.T) {
	p := "x/ns/c/"
	k := func(i int) string { return fmt.Sprintf("%s2026120%dT000000.000Z-%d.db", p, i, i) }
	tests := []struct {
		name   string
		keys   []string
		keep   int
		latest string
		want   []string
	}{
		{"fewer than keep", []string{k(1), k(2)}, 3, k(2), nil},
		{"oldest go", []string{k(1), k(2), k(3), k(4), k(5)}, 3, k(5), []string{k(1), k(2)}},
		{"keep 1", []string{k(1), k(2)}, 1, k(2), []string{k(1)}},
		{"never the one just written", []string{k(1), k(2), k(3)}, 1, k(1), []string{k(2)}},
		{"foreign objects stay", []string{p + "notes.txt", k(1), p + "deeper/" + k(2)[len(p):], k(3)}, 1, k(3), []string{k(1)}},
		{"keep 0 is 1", []string{k(1), k(2)}, 0, k(2), []string{k(1)}},
		{"names to the second, of earlier versions", []string{p + "20261201T000000Z-1.db", k(2), k(3)}, 2, k(3), []string{p + "20261201T000000Z-1.db"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := toPrune(tt.keys, p, tt.keep, tt.latest)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("toPrune = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBackupDue(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) string { return now.Add(-d).Format(time.RFC3339) }
	last := func(d time.Duration, token string) *backupRecord { return &backupRecord{Time: ago(d), Now: token} }
	fail := func(d time.Duration, attempts int) *backupFailure {
		return &backupFailure{Time: ago(d), Attempts: attempts}
	}
	tests := []struct {
		name     string
		schedule time.Duration
		now      string
		st       backupStatus
		gen      int64
		due      bool
		wait     time.Duration
	}{
		{"nothing asked", 0, "", backupStatus{}, 0, false, 0},
		{"first scheduled", time.Hour, "", backupStatus{}, 0, true, 0},
		{"scheduled, not yet", time.Hour, "", backupStatus{Last: last(20*time.Minute, "")}, 0, false, 40 * time.Minute},
		{"scheduled, due", time.Hour, "", backupStatus{Last: last(time.Hour, "")}, 0, true, 0},
		{"on demand", 0, "a", backupStatus{}, 0, true, 0},
		{"on demand, answered", 0, "a", backupStatus{Last: last(time.Minute, "a")}, 0, false, 0},
		{"on demand, new token", time.Hour, "b", backupStatus{Last: last(time.Minute, "a")}, 0, true, 0},
		{"failed, retry later", time.Hour, "", backupStatus{Failure: fail(5*time.Second, 1)}, 0, false, 5 * time.Second},
		{"failed twice, longer", 0, "a", backupStatus{Failure: fail(5*time.Second, 2)}, 0, false, 15 * time.Second},
		{"failed long ago", 0, "a", backupStatus{Failure: fail(time.Hour, 9)}, 0, true, 0},
		{"failure older than the last success", time.Hour, "", backupStatus{Last: last(time.Hour, ""), Failure: fail(2*time.Hour, 5)}, 0, true, 0},
		{"retry capped", 0, "a", backupStatus{Failure: fail(time.Minute, 30)}, 0, false, 4 * time.Minute},
		{"failed under an older spec", 0, "a", backupStatus{Failure: fail(5*time.Second, 2)}, 1, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &backupSpec{interval: tt.schedule, Now: tt.now}
			due, wait := backupDue(spec, &tt.st, tt.gen, now)
			if due != tt.due || wait != tt.wait {
				t.Errorf("backupDue = %v, %v; want %v, %v", due, wait, tt.due, tt.wait)
			}
		})
	}
}

// The status a watch delivers late never undoes what the schedule knows.
func TestBackupStatusMerge(t *testing.T) {
	st := backupStatus{Last: &backupRecord{Time: "2026-12-04T12:00:00Z", Key: "new"}}
	st.merge(backupOf(`{"phase":"Running","lastBackup":{"time":"2026-12-04T11:00:00Z","key":"old"},"backupFailure":{"time":"2026-12-04T10:00:00Z","attempts":3}}`))
	if st.Last.Key != "new" || st.failing() != nil {
		t.Errorf("after an older status: %+v, failing %+v", st.Last, st.failing())
	}
	st.merge(backupOf(`{"members":["a foreign status"],"lastBackup":{"time":"2026-12-04T13:00:00Z","key":"newer"}}`))
	if st.Last.Key != "newer" {
		t.Errorf("after a newer status: %+v", st.Last)
	}
}

// backupSpecOf is spec.backup as parseSpec reads it.
func backupSpecOf(raw json.RawMessage) (*backupSpec, error) {
	spec, _ := parseSpec(raw)
	return spec.Backup, spec.BackupErr
}

// backupOf is the backup schedule's part of a status.
func backupOf(status string) backupStatus {
	_, st := readStatus(json.RawMessage(status))
	return st
}

// backupAPI is an API server for backups: the Secrets, a cluster's member
// Pods, their etcd (status and snapshot) through the Pod proxy, and the
// status patches it records.
type backupAPI struct {
	srv       *httptest.Server
	secrets   map[string]map[string][]byte
	revisions map[string]string // Pod -> etcd revision; the leader is example-0
	stream    func(pod string) string
	mu        sync.Mutex
	patches   []string
	snapshots []string // Pods asked for a snapshot
	// tls: the members run spec.tls's flags; they answer on https only
	// and, auth on, want the token that root's password "pw" buys.
	tls bool
}

func newBackupAPI(t *testing.T, data []byte) *backupAPI {
	a := &backupAPI{
		secrets:   map[string]map[string][]byte{"s3": {"accessKeyID": []byte("AKIDTEST"), "secretAccessKey": []byte("test-secret-key")}, "key": {"key": testKey}},
		revisions: map[string]string{"example-0": "42", "example-1": "42", "example-2": "41"},
		stream:    func(string) string { return snapshottest.Stream(data, 32<<10) },
	}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *backupAPI) serve(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/ns/")
	if a.tls && strings.Contains(p, "/proxy/") {
		var ok bool
		if p, ok = strings.CutPrefix(p, "pods/https:"); !ok {
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, `{"kind":"Status","code":502,"message":"error trying to reach service: tls: first record does not look like a TLS handshake"}`)
			return
		}
		p = "pods/" + p
		b, _ := io.ReadAll(r.Body)
		switch {
		case strings.HasSuffix(p, "/v3/auth/authenticate"):
			if !strings.Contains(string(b), `"password":"pw"`) {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprint(w, `{"error":"etcdserver: authentication failed, invalid user ID or password","code":3,"message":"etcdserver: authentication failed, invalid user ID or password"}`)
				return
			}
			fmt.Fprint(w, `{"token":"tok"}`)
			return
		case r.Header.Get("Grpc-Metadata-Token") != "tok":
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"etcdserver: user name is empty","code":16,"message":"etcdserver: user name is empty"}`)
			return
		}
	}
	switch {
	case strings.HasPrefix(p, "secrets/"):
		data, ok := a.secrets[strings.TrimPrefix(p, "secrets/")]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","code":404,"reason":"NotFound","message":"secrets not found"}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"data": data})
	case p == "pods":
		a.servePods(w)
	case strings.HasSuffix(p, "/proxy/v3/maintenance/status"):
		name := strings.TrimSuffix(strings.TrimPrefix(p, "pods/"), ":2379/proxy/v3/maintenance/status")
		fmt.Fprintf(w, `{"header":{"member_id":"%d","revision":"%s"},"leader":"0"}`, name[len(name)-1]-'0', a.revisions[name])
	case strings.HasSuffix(p, "/proxy/v3/maintenance/snapshot"):
		name := strings.TrimSuffix(strings.TrimPrefix(p, "pods/"), ":2379/proxy/v3/maintenance/snapshot")
		a.mu.Lock()
		a.snapshots = append(a.snapshots, name)
		a.mu.Unlock()
		io.WriteString(w, a.stream(name))
	case r.Method == http.MethodPatch:
		b, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.patches = append(a.patches, string(b))
		a.mu.Unlock()
		w.Write([]byte("{}"))
	default:
		w.Write([]byte("{}")) // Events
	}
}

func (a *backupAPI) servePods(w http.ResponseWriter) {
	var items []map[string]any
	for name := range a.revisions {
		items = append(items, map[string]any{
			"metadata": map[string]any{"name": name, "namespace": "ns", "ownerReferences": []any{
				map[string]any{"apiVersion": apiVersion, "kind": kind, "name": "example", "uid": "uid-1", "controller": true}}},
			"status": map[string]any{"phase": "Running", "podIP": "10.0.0.1", "conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
		})
		if a.tls {
			items[len(items)-1]["spec"] = map[string]any{"containers": []any{map[string]any{"name": "etcd", "command": []string{"/usr/local/bin/etcd", "--peer-client-cert-auth"}}}}
		}
	}
	json.NewEncoder(w).Encode(map[string]any{"items": items})
}

func (a *backupAPI) statusPatches() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.patches...)
}

func backupController(a *backupAPI) *controller {
	c := kube.New(a.srv.URL, nil)
	log := slog.New(slog.DiscardHandler)
	return &controller{client: c, log: log, image: repo, events: newRecorder(c, log)}
}

func exampleCluster(t *testing.T, s3URL, backup string) *EtcdCluster {
	t.Helper()
	spec := fmt.Sprintf(`{"size":3,"backup":{"s3":{"endpoint":%q,"bucket":"bkt","prefix":"etcd","credentialsSecret":"s3"}%s}}`, s3URL, backup)
	return &EtcdCluster{Metadata: objectMeta{Name: "example", Namespace: "ns", UID: "uid-1"}, Spec: json.RawMessage(spec)}
}

// One backup, as each option makes it: the object undone is the
// snapshot, and the record says what S3 holds.
func TestBackupCluster(t *testing.T) {
	data := snapshottest.Data(100000)
	sum := sha256.Sum256(data)
	want := append(bytes.Clone(data), sum[:]...)
	tests := []struct {
		name, backup, suffix string
	}{
		{"plain", ``, ".db"},
		{"gzip", `,"gzip":true`, ".db.gz"},
		{"encrypted", `,"encryptionKeySecret":"key"`, ".db.enc"},
		{"both", `,"gzip":true,"encryptionKeySecret":"key","now":"x"`, ".db.gz.enc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, objs := newBackupAPI(t, data), s3test.New(t, "bkt")
			ec := exampleCluster(t, objs.URL, tt.backup)
			spec, err := backupSpecOf(ec.Spec)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := backupController(a).backupCluster(context.Background(), ec, spec)
			if err != nil {
				t.Fatal(err)
			}
			// The highest revision, and a follower rather than the leader.
			if rec.Member != "example-1" || rec.Revision != 42 {
				t.Errorf("snapshot of %s at %d, want example-1 at 42", rec.Member, rec.Revision)
			}
			if !strings.HasPrefix(rec.Key, "etcd/ns/example/") || !strings.HasSuffix(rec.Key, "-42"+tt.suffix) || rec.Now != spec.Now {
				t.Errorf("record %+v", rec)
			}
			obj, ok := objs.Object("bkt", rec.Key)
			objSum := sha256.Sum256(obj)
			if !ok || rec.Size != int64(len(obj)) || rec.SHA256 != hex.EncodeToString(objSum[:]) {
				t.Fatalf("record %+v; S3 holds %d bytes (exists %v)", rec, len(obj), ok)
			}
			if got := undo(t, obj, strings.Contains(tt.suffix, ".gz"), strings.Contains(tt.suffix, ".enc")); !bytes.Equal(got, want) {
				t.Errorf("the object undone is %d bytes, want the snapshot's %d", len(got), len(want))
			}
		})
	}
}

// A backup of a TLS cluster: over https, signed in as root with the
// password from the cluster's Secret, though no pass has run.
func TestBackupWithTLS(t *testing.T) {
	data := snapshottest.Data(50000)
	a, objs := newBackupAPI(t, data), s3test.New(t, "bkt")
	a.tls = true
	a.secrets["example-root"] = map[string][]byte{"username": []byte("root"), "password": []byte("pw")}
	ec := exampleCluster(t, objs.URL, "")
	spec, err := backupSpecOf(ec.Spec)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := backupController(a).backupCluster(context.Background(), ec, spec)
	if err != nil {
		t.Fatal(err)
	}
	if obj, ok := objs.Object("bkt", rec.Key); !ok || rec.Size != int64(len(obj)) || rec.Member != "example-1" {
		t.Errorf("record %+v, object in S3 %v", rec, ok)
	}
	// A wrong password is an error that says so.
	a.secrets["example-root"]["password"] = []byte("changed")
	_, err = backupController(a).backupCluster(context.Background(), ec, spec)
	if err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("backup with a wrong password: %v", err)
	}
}

// undo decrypts and decompresses a backup object.
func undo(t *testing.T, obj []byte, gz, enc bool) []byte {
	t.Helper()
	r := io.Reader(bytes.NewReader(obj))
	var err error
	if enc {
		if r, err = encryption.Decrypt(r, testKey); err != nil {
			t.Fatal(err)
		}
	}
	if gz {
		if r, err = gzip.NewReader(r); err != nil {
			t.Fatal(err)
		}
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Each fault fails the backup with a message that says what, and leaves
// no object in the bucket.
func TestBackupClusterFaults(t *testing.T) {
	data := snapshottest.Data(100000)
	tests := []struct {
		name   string
		backup string
		change func(a *backupAPI, objs *s3test.Server)
		err    string
	}{
		{"wrong secret key", "", func(a *backupAPI, _ *s3test.Server) { a.secrets["s3"]["secretAccessKey"] = []byte("wrong") }, "SignatureDoesNotMatch"},
		{"no credentials Secret", "", func(a *backupAPI, _ *s3test.Server) { delete(a.secrets, "s3") }, "read Secret ns/s3"},
		{"Secret without the keys", "", func(a *backupAPI, _ *s3test.Server) { a.secrets["s3"] = map[string][]byte{"user": []byte("x")} }, "needs the keys accessKeyID and secretAccessKey"},
		{"missing bucket", "", func(_ *backupAPI, objs *s3test.Server) { objs.RemoveBucket("bkt") }, "NoSuchBucket"},
		{"bad encryption key", `,"encryptionKeySecret":"key"`, func(a *backupAPI, _ *s3test.Server) { a.secrets["key"]["key"] = []byte("short") }, "must be 32 bytes"},
		{"stream cut", "", func(a *backupAPI, _ *s3test.Server) {
			a.stream = func(string) string { s := snapshottest.Stream(data, 32<<10); return s[:len(s)/2] }
		}, "cut after"},
		{"stream cut, gzip", `,"gzip":true`, func(a *backupAPI, _ *s3test.Server) {
			a.stream = func(string) string { s := snapshottest.Stream(data, 32<<10); return s[:len(s)-60] }
		}, "cut after"},
		{"sha256 mismatch", "", func(a *backupAPI, _ *s3test.Server) {
			a.stream = func(string) string { return strings.Replace(snapshottest.Stream(data, 32<<10), "A", "B", 1) }
		}, "sha256 mismatch"},
		{"etcd error", "", func(a *backupAPI, _ *s3test.Server) {
			a.stream = func(string) string { return `{"error":{"code":14,"message":"etcdserver: request timed out"}}` }
		}, "request timed out"},
		{"no member answers", "", func(a *backupAPI, _ *s3test.Server) { a.revisions = map[string]string{} }, "no ready member"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, objs := newBackupAPI(t, data), s3test.New(t, "bkt")
			tt.change(a, objs)
			ec := exampleCluster(t, objs.URL, tt.backup)
			spec, err := backupSpecOf(ec.Spec)
			if err != nil {
				t.Fatal(err)
			}
			_, err = backupController(a).backupCluster(context.Background(), ec, spec)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want one with %q", err, tt.err)
			}
			if keys := objs.Keys(); len(keys) != 0 {
				t.Errorf("objects left: %v", keys)
			}
			if objs.OpenUploads() != 0 {
				t.Errorf("%d uploads left open", objs.OpenUploads())
			}
		})
	}
}

// An unreachable endpoint fails the backup, not the operator.
func TestBackupUnreachableEndpoint(t *testing.T) {
	a := newBackupAPI(t, snapshottest.Data(1000))
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	ec := exampleCluster(t, dead.URL, "")
	spec, _ := backupSpecOf(ec.Spec)
	_, err := backupController(a).backupCluster(context.Background(), ec, spec)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("error %v, want connection refused", err)
	}
}

// A schedule's steps: one backup per on-demand token, none for a token
// answered, retention after each backup, and the status written with a
// merge patch of the backup's own fields only.
func TestBackupStepOnDemand(t *testing.T) {
	a, objs := newBackupAPI(t, snapshottest.Data(5000)), s3test.New(t, "bkt")
	b := newBackups(context.Background(), backupController(a))
	var st backupStatus
	for i, token := range []string{"1", "2", "3"} {
		rev := fmt.Sprint(100 + i) // distinct keys, even within one second
		a.revisions = map[string]string{"example-0": rev, "example-1": rev}
		ec := exampleCluster(t, objs.URL, `,"keep":2,"now":"`+token+`"`)
		b.step(context.Background(), ec, &st)
		patches := a.statusPatches()
		if len(patches) != i+1 {
			t.Fatalf("token %s: %d status patches, want %d", token, len(patches), i+1)
		}
		if p := patches[i]; !strings.Contains(p, `"now":"`+token+`"`) || !strings.Contains(p, `"backupFailure":null`) || strings.Contains(p, "phase") {
			t.Fatalf("patch: %s", p)
		}
		if _, ok := b.step(context.Background(), ec, &st); ok || len(a.statusPatches()) != i+1 {
			t.Fatalf("token %s answered, yet another step did something", token)
		}
	}
	keys := objs.Keys()
	if len(keys) != 2 || !strings.HasSuffix(keys[0], "-101.db") || !strings.HasSuffix(keys[1], "-102.db") {
		t.Errorf("objects after retention: %v, want the last 2", keys)
	}
}

// A failed step records the failure, counts the attempts, and says when
// to try again.
func TestBackupStepFailure(t *testing.T) {
	a, objs := newBackupAPI(t, snapshottest.Data(5000)), s3test.New(t, "bkt")
	objs.RemoveBucket("bkt")
	b := newBackups(context.Background(), backupController(a))
	var st backupStatus
	ec := exampleCluster(t, objs.URL, `,"schedule":"1h"`)
	for attempt := 1; attempt <= 2; attempt++ {
		b.step(context.Background(), ec, &st)
		wait, ok := b.step(context.Background(), ec, &st) // too early to retry
		if !ok || wait <= 0 || wait > backupRetryDelay(attempt) {
			t.Fatalf("attempt %d: look again in %v (%v), want within %v", attempt, wait, ok, backupRetryDelay(attempt))
		}
		patches := a.statusPatches()
		if len(patches) != attempt || !strings.Contains(patches[attempt-1], "NoSuchBucket") || !strings.Contains(patches[attempt-1], fmt.Sprintf(`"attempts":%d`, attempt)) {
			t.Fatalf("patches: %v", patches)
		}
		st.Failure.Time = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339) // as if the wait were over
	}
	// A changed spec is tried at once, its failures counted afresh.
	st.Failure.Time = time.Now().UTC().Format(time.RFC3339)
	ec.Metadata.Generation++
	b.step(context.Background(), ec, &st)
	if patches := a.statusPatches(); len(patches) != 3 || !strings.Contains(patches[2], `"attempts":1`) {
		t.Fatalf("after a spec change: %v", patches)
	}
}

// The schedule's goroutine starts with spec.backup, and stops when it
// goes, when the cluster is deleted, or when a new cluster takes the name.
func TestBackupsUpdate(t *testing.T) {
	a := newBackupAPI(t, snapshottest.Data(5000))
	ctx, cancel := context.WithCancel(context.Background())
	b := newBackups(ctx, backupController(a))
	defer func() { cancel(); b.stop() }()
	with := exampleCluster(t, "http://127.0.0.1:1", "")
	without := &EtcdCluster{Metadata: with.Metadata, Spec: json.RawMessage(`{"size":3}`)}
	other := exampleCluster(t, "http://127.0.0.1:1", "")
	other.Metadata.UID = "uid-2"
	jobs := func() (int, string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if j := b.jobs["ns/example"]; j != nil {
			return len(b.jobs), j.uid
		}
		return len(b.jobs), ""
	}
	steps := []struct {
		ec      *EtcdCluster
		deleted bool
		jobs    int
		uid     string
	}{
		{without, false, 0, ""},
		{with, false, 1, "uid-1"},
		{with, false, 1, "uid-1"},
		{other, false, 1, "uid-2"},
		{without, false, 0, ""},
		{with, false, 1, "uid-1"},
		{with, true, 0, ""},
	}
	for i, s := range steps {
		if s.deleted {
			b.remove(s.ec)
		} else {
			b.update(s.ec)
		}
		if n, uid := jobs(); n != s.jobs || uid != s.uid {
			t.Fatalf("step %d: %d jobs, uid %q; want %d, %q", i, n, uid, s.jobs, s.uid)
		}
	}
}

// testKey is the encryption key of the tests' encrypted backups.
var testKey = bytes.Repeat([]byte{7}, 32)
