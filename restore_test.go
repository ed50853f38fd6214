package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/s3/s3test"
	"github.com/etcd-operator/etcd-operator/internal/snapshot/snapshottest"
)

func TestParseRestore(t *testing.T) {
	s3 := `"s3":{"endpoint":"http://s3.example:9000","bucket":"bkt","credentialsSecret":"s3"}`
	tests := []struct {
		restore, err string
	}{
		{`{` + s3 + `,"key":"etcd/ns/a/20261205T101010Z-42.db"}`, ""},
		{`{` + s3 + `,"key":"/etcd/x.db.gz.enc","encryptionKeySecret":"k","sha256":"` + strings.Repeat("A", 64) + `"}`, ""},
		{`"s3://bkt/x"`, "spec.restore must be an object"},
		{`{` + s3 + `}`, "spec.restore.key is missing"},
		{`{"s3":{"endpoint":"s3.example","bucket":"bkt","credentialsSecret":"s3"},"key":"x.db"}`, "spec.restore.s3.endpoint"},
		{`{"s3":{"endpoint":"http://s3.example","bucket":"B","credentialsSecret":"s3"},"key":"x.db"}`, "spec.restore.s3.bucket"},
		{`{"s3":{"endpoint":"http://s3.example","bucket":"bkt"},"key":"x.db"}`, "spec.restore.s3.credentialsSecret is missing"},
		{`{` + s3 + `,"key":"x.db","sha256":"abc"}`, "spec.restore.sha256"},
		{`{` + s3 + `,"key":"x.db.enc"}`, "spec.restore.encryptionKeySecret is missing"},
		{`{` + s3 + `,"key":"x.db","encryptionKeySecret":"k"}`, "does not end in .enc"},
	}
	for _, tt := range tests {
		_, err := parseSpec(json.RawMessage(`{"size":3,"restore":` + tt.restore + `}`))
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: error %v, want %q", tt.restore, err, tt.err)
		}
	}
}

// makeBackup has the operator's backup code make one backup of data with
// spec.backup options (backup: more JSON fields) into a fake S3.
func makeBackup(t *testing.T, data []byte, backup string) (*backupAPI, *s3test.Server, backupRecord) {
	t.Helper()
	a, objs := newBackupAPI(t, data), s3test.New(t, "bkt")
	ec := exampleCluster(t, objs.URL, backup)
	spec, err := backupSpecOf(ec.Spec)
	if err != nil {
		t.Fatal(err)
	}
	made, err := backupController(a).backupCluster(context.Background(), ec, spec)
	if err != nil {
		t.Fatal(err)
	}
	return a, objs, made
}

// restoreOf is the spec.restore naming a backup of the fake S3's bucket.
func restoreOf(s3URL, key, extra string) *restoreSpec {
	r, err := parseRestore(json.RawMessage(fmt.Sprintf(`{"s3":{"endpoint":%q,"bucket":"bkt","credentialsSecret":"s3"},"key":%q%s}`, s3URL, key, extra)))
	if err != nil {
		panic(err)
	}
	return r
}

// A backup of each kind reads back as the snapshot it was made of, and
// the record names the object as the backup's record did.
func TestReadBackup(t *testing.T) {
	data := snapshottest.Data(200000)
	sum := sha256.Sum256(data)
	snap := append(bytes.Clone(data), sum[:]...)
	for _, backup := range []string{``, `,"gzip":true`, `,"encryptionKeySecret":"key"`, `,"gzip":true,"encryptionKeySecret":"key"`} {
		t.Run(backup, func(t *testing.T) {
			a, objs, made := makeBackup(t, data, backup)
			c := backupController(a)
			extra := `,"sha256":"` + made.SHA256 + `"`
			if strings.HasSuffix(made.Key, ".enc") {
				extra += `,"encryptionKeySecret":"key"`
			}
			r := restoreOf(objs.URL, made.Key, extra)
			rec, err := c.readBackup(context.Background(), "ns", r)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Key != made.Key || rec.SHA256 != made.SHA256 || rec.Size != int64(len(snap)) {
				t.Errorf("record %+v; the backup's %+v, snapshot of %d bytes", rec, made, len(snap))
			}
			var got bytes.Buffer
			store := objs.Client(t, "bkt")
			key := testKey
			if _, err := fetchBackup(context.Background(), store, r, key, &got); err != nil || !bytes.Equal(got.Bytes(), snap) {
				t.Errorf("fetched %d bytes (%v), want the snapshot's %d", got.Len(), err, len(snap))
			}
		})
	}
}

// Each way a backup can be bad is refused, with a message that says which.
func TestReadBackupRefuses(t *testing.T) {
	data := snapshottest.Data(200000)
	tests := []struct {
		name, backup, extra string
		change              func(a *backupAPI, objs *s3test.Server, key string)
		err                 string
	}{
		{"missing object", ``, ``, func(_ *backupAPI, objs *s3test.Server, key string) { objs.Remove("bkt", key) }, "there is no such object"},
		{"missing bucket", ``, ``, func(_ *backupAPI, objs *s3test.Server, _ string) { objs.RemoveBucket("bkt") }, "NoSuchBucket"},
		{"wrong credentials", ``, ``, func(a *backupAPI, _ *s3test.Server, _ string) { a.secrets["s3"]["secretAccessKey"] = []byte("wrong") }, "SignatureDoesNotMatch"},
		{"a flipped byte", ``, ``, flip(1000), "is not a whole etcd snapshot"},
		{"cut short", ``, ``, func(_ *backupAPI, objs *s3test.Server, key string) {
			o, _ := objs.Object("bkt", key)
			objs.Put("bkt", key, o[:len(o)-100])
		}, "is not a whole etcd snapshot"},
		{"a flipped byte, gzip", `,"gzip":true`, ``, flip(1000), "reading it"},
		{"a flipped byte, encrypted", `,"encryptionKeySecret":"key"`, `,"encryptionKeySecret":"key"`, flip(5000), "does not open (wrong key, or the object was changed)"},
		{"wrong key", `,"encryptionKeySecret":"key"`, `,"encryptionKeySecret":"key"`, func(a *backupAPI, _ *s3test.Server, _ string) { a.secrets["key"]["key"] = bytes.Repeat([]byte{8}, 32) }, "does not open (wrong key"},
		{"no key Secret", `,"encryptionKeySecret":"key"`, `,"encryptionKeySecret":"key"`, func(a *backupAPI, _ *s3test.Server, _ string) { delete(a.secrets, "key") }, "read Secret ns/key"},
		{"another object", ``, `,"sha256":"` + strings.Repeat("0", 64) + `"`, func(*backupAPI, *s3test.Server, string) {}, "not " + strings.Repeat("0", 64) + " as spec.restore.sha256 says"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, objs, made := makeBackup(t, data, tt.backup)
			c := backupController(a)
			tt.change(a, objs, made.Key)
			chk := c.checkBackup(context.Background(), "ns", restoreOf(objs.URL, made.Key, tt.extra))
			if !strings.Contains(chk.Err, tt.err) {
				t.Errorf("check %+v, want an error with %q", chk, tt.err)
			}
		})
	}
}

// A plain snapshot under a name that says gzip is refused as not gzip.
func TestReadBackupNotGzip(t *testing.T) {
	data := snapshottest.Data(1000)
	sum := sha256.Sum256(data)
	objs := s3test.New(t, "bkt")
	objs.Put("bkt", "a.db.gz", append(bytes.Clone(data), sum[:]...))
	_, err := fetchBackup(context.Background(), objs.Client(t, "bkt"), restoreOf(objs.URL, "a.db.gz", ""), nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "it is not gzip") {
		t.Errorf("error %v, want it to say it is not gzip", err)
	}
}

// flip changes one byte of the object at offset i.
func flip(i int) func(*backupAPI, *s3test.Server, string) {
	return func(_ *backupAPI, objs *s3test.Server, key string) {
		b, _ := objs.Object("bkt", key)
		o := bytes.Clone(b)
		o[i] ^= 0x40
		objs.Put("bkt", key, o)
	}
}

// decide creates nothing until the backup was found good, says why, and
// then gives every bootstrap Pod (only those) the restore init containers.
func TestDecideRestore(t *testing.T) {
	ec := &EtcdCluster{Metadata: objectMeta{Name: "example", Namespace: "ns", UID: "uid-1"}}
	ec.Spec = json.RawMessage(`{"size":3,"restore":{"s3":{"endpoint":"http://s3:9000","bucket":"bkt","credentialsSecret":"s3"},"key":"etcd/ns/old/20261205T101010Z-42.db.gz"}}`)
	rec := restoreRecord{Key: "etcd/ns/old/20261205T101010Z-42.db.gz", SHA256: strings.Repeat("a", 64), Size: 1000}

	in := newInput(ec, repo)
	in.OperatorImage = "etcd-operator:dev"
	if !in.needsRestoreCheck() {
		t.Fatal("a new cluster to restore needs its backup checked")
	}
	st, s := decide(in, observed{Restore: &restoreCheck{Err: "there is no object s3://bkt/etcd/ns/old/20261205T101010Z-42.db.gz"}})
	if s.Action != actNone || s.Again != restoreRetry || st.Phase != phaseFailed || !strings.Contains(st.Message, "there is no object") {
		t.Fatalf("backup missing: step %s, status %s: %s", s.Action, st.Phase, st.Message)
	}
	if c, _ := st.condition(condProgressing); c.Reason != reasonRestoreFailed || len(s.News) != 1 || s.News[0].Type != eventWarning {
		t.Errorf("backup missing: Progressing %+v, news %+v", c, s.News)
	}

	st, s = decide(in, observed{Restore: &restoreCheck{Record: rec}})
	if s.Action != actBootstrap || st.Restore == nil || *st.Restore != rec {
		t.Fatalf("backup good: step %s, status restore %+v", s.Action, st.Restore)
	}
	pods := 0
	for _, o := range s.Create {
		if o.Resource != "pods" {
			continue
		}
		pods++
		var p struct {
			Spec struct {
				InitContainers []struct {
					Name, Image   string
					Command, Args []string
				}
			}
		}
		if err := json.Unmarshal(o.Body, &p); err != nil {
			t.Fatal(err)
		}
		ic := p.Spec.InitContainers
		if len(ic) != 3 || ic[0].Image != "etcd-operator:dev" || ic[1].Image != repo+":"+defaultVersion || ic[2].Args[1] != "place" {
			t.Fatalf("Pod %s: init containers %+v", o.Name, ic)
		}
		want := []string{"--name=" + o.Name, "--initial-cluster-token=" + newClusterPlan(ec.Metadata, "").Token, "--data-dir=" + restoredData}
		for _, w := range want {
			if !slices.Contains(ic[1].Command, w) {
				t.Errorf("Pod %s: etcdutl %v lacks %s", o.Name, ic[1].Command, w)
			}
		}
		if !slices.Contains(ic[0].Args, "-key="+rec.Key) {
			t.Errorf("Pod %s: fetch-backup %v", o.Name, ic[0].Args)
		}
	}
	if pods != 3 {
		t.Errorf("%d Pods created, want 3", pods)
	}

	// Once recorded, the check holds for that key; another key is read again.
	in.Prev = st
	if in.needsRestoreCheck() {
		t.Error("a recorded check is made again")
	}
	if _, s := decide(in, observed{}); s.Action != actBootstrap {
		t.Errorf("with the check recorded: step %s", s.Action)
	}
	in.Spec.Restore = &restoreSpec{Key: "other.db"}
	if !in.needsRestoreCheck() {
		t.Error("another key is not read again")
	}
	// A member joining later is not restored: only bootstrap Pods are.
	plan := newClusterPlan(ec.Metadata, repo+":"+defaultVersion)
	plan.Restore, plan.OperatorImage = in.Spec.Restore, "etcd-operator:dev"
	if b := plan.joiningPod("x-3", "x-0=http://x-0:2380"); bytes.Contains(b, []byte("initContainers")) {
		t.Error("a joining Pod gets the restore init containers")
	}
}

// fetch writes the snapshot for etcdutl; place moves what etcdutl made
// into place, or keeps a member's data that is there already. Both may run
// again after a crash at any point.
func TestFetchAndPlace(t *testing.T) {
	data := snapshottest.Data(50000)
	sum := sha256.Sum256(data)
	snap := append(bytes.Clone(data), sum[:]...)
	objs := s3test.New(t, "bkt")
	objs.Put("bkt", "a.db", snap)
	r := restoreOf(objs.URL, "a.db", "")
	dir := t.TempDir()
	for range 2 {
		if err := fetchSnapshot(context.Background(), objs.Client(t, "bkt"), r, nil, dir, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "restore", "snapshot.db")); err != nil || !bytes.Equal(b, snap) {
			t.Fatalf("snapshot.db: %d bytes, %v", len(b), err)
		}
	}
	// What etcdutl would have made; then place, twice.
	write(t, filepath.Join(dir, "restore", "data", "member", "snap", "db"), "restored")
	for range 2 {
		if err := placeRestored(dir); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "member", "snap", "db")); string(b) != "restored" {
			t.Fatalf("member data %q", b)
		}
		if _, err := os.Stat(filepath.Join(dir, "restore")); !os.IsNotExist(err) {
			t.Fatalf("restore/ left: %v", err)
		}
		// The Pod made again on the same volume restores once more...
		write(t, filepath.Join(dir, "restore", "data", "member", "snap", "db"), "again")
	}
	// ...and the data that was there is kept.
	if b, _ := os.ReadFile(filepath.Join(dir, "member", "snap", "db")); string(b) != "restored" {
		t.Errorf("member data %q after a second restore", b)
	}

	// A bad object leaves no snapshot.db for etcdutl.
	objs.Put("bkt", "a.db", snap[:len(snap)-1])
	if err := fetchSnapshot(context.Background(), objs.Client(t, "bkt"), r, nil, dir, &bytes.Buffer{}); err == nil {
		t.Fatal("a cut object was fetched")
	}
	if _, err := os.Stat(filepath.Join(dir, "restore", "snapshot.db")); !os.IsNotExist(err) {
		t.Errorf("snapshot.db of a bad object: %v", err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Through the whole operator on the fake API server: a cluster whose
// backup does not exist is refused with nothing created; once its spec
// names one that does, its members are made with the restore init
// containers and the cluster forms.
func TestRestoreThroughTheOperator(t *testing.T) {
	objs := s3test.New(t, "bkt")
	data := snapshottest.Data(50000)
	sum := sha256.Sum256(data)
	objs.Put("bkt", "etcd/default/old/a.db", append(bytes.Clone(data), sum[:]...))
	f := newFakeAPI(t)
	f.putSecret("default", "s3", map[string]string{"accessKeyID": objs.Access, "secretAccessKey": objs.Secret})
	spec := func(key string) map[string]any {
		return map[string]any{"size": 3, "restore": map[string]any{
			"s3": map[string]any{"endpoint": objs.URL, "bucket": "bkt", "credentialsSecret": "s3"}, "key": key}}
	}
	f.putCluster("default", "example", spec("etcd/default/old/missing.db"))
	startOperator(t, f)
	st := waitStatus(f, "example", progressing(reasonRestoreFailed))
	if st.Phase != phaseFailed || !strings.Contains(st.Message, "cannot restore from s3://bkt/etcd/default/old/missing.db: there is no such object") {
		t.Errorf("status %s: %s", st.Phase, st.Message)
	}
	for _, res := range []string{"pods", "services", "persistentvolumeclaims"} {
		if n := f.objectNames(res); len(n) != 0 {
			t.Errorf("a refused restore created %s %v", res, n)
		}
	}

	f.putCluster("default", "example", spec("etcd/default/old/a.db"))
	st = waitStatus(f, "example", running(3))
	if st.Restore == nil || st.Restore.Key != "etcd/default/old/a.db" || st.Restore.Size != int64(len(data)+len(sum)) {
		t.Errorf("status.restore %+v", st.Restore)
	}
	for _, m := range membersOf(3) {
		spec, _ := f.object("pods", "default", m)["spec"].(map[string]any)
		if ic, _ := spec["initContainers"].([]any); len(ic) != 3 {
			t.Errorf("Pod %s: %d init containers, want 3", m, len(ic))
		}
	}
}

// An init container that cannot run (a node that cannot reach the store,
// a Secret without the key) is named in the status while the cluster waits.
func TestInitContainerInStatus(t *testing.T) {
	var p pod
	raw := `{"metadata":{"name":"example-0"},"spec":{"containers":[{"name":"etcd","image":"x"}]},"status":{"phase":"Pending",
		"initContainerStatuses":[{"name":"fetch-backup","state":{"waiting":{"reason":"CrashLoopBackOff"}}},{"name":"restore","state":{"waiting":{"reason":"PodInitializing"}}}],
		"containerStatuses":[{"name":"etcd","state":{"waiting":{"reason":"PodInitializing"}}}]}}`
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		t.Fatal(err)
	}
	v := p.cached().view(time.Now())
	if v.Init != "init container fetch-backup: CrashLoopBackOff" {
		t.Fatalf("Init %q", v.Init)
	}

	ec := &EtcdCluster{Metadata: objectMeta{Name: "example", Namespace: "ns", UID: "uid-1"}, Spec: json.RawMessage(`{"size":3,"storage":{"emptyDir":true},
		"restore":{"s3":{"endpoint":"http://s3:9000","bucket":"bkt","credentialsSecret":"s3"},"key":"a.db"}}`)}
	in := newInput(ec, repo)
	in.Prev.Restore = &restoreRecord{Key: "a.db"}
	obs := observed{Services: []string{"example-0", "example-1", "example-2", "example-client"}}
	for _, m := range membersOf(3) {
		obs.Pods = append(obs.Pods, podView{Name: m, Phase: "Pending", Image: repo + ":" + defaultVersion, State: "new",
			InitialCluster: "example-0=http://example-0:2380,example-1=http://example-1:2380,example-2=http://example-2:2380"})
	}
	obs.Pods[0].Init = v.Init
	st, s := decide(in, obs)
	if s.Action != actNone || !strings.Contains(st.Message, "example-0 init container fetch-backup: CrashLoopBackOff") {
		t.Errorf("step %s, status %s: %s", s.Action, st.Phase, st.Message)
	}
}

// A TLS cluster restored from a backup of another with authentication on
// starts with the credentials of spec.restore.credentialsSecret (the
// backup's etcd holds its users); a Secret that is missing or has no
// password stops it before anything is created.
func TestRestoreWithCredentials(t *testing.T) {
	objs := s3test.New(t, "bkt")
	data := snapshottest.Data(50000)
	sum := sha256.Sum256(data)
	objs.Put("bkt", "etcd/default/old/a.db", append(bytes.Clone(data), sum[:]...))
	f := newFakeAPI(t)
	f.putSecret("default", "s3", map[string]string{"accessKeyID": objs.Access, "secretAccessKey": objs.Secret})
	spec := map[string]any{"size": 3, "tls": map[string]any{}, "restore": map[string]any{
		"s3": map[string]any{"endpoint": objs.URL, "bucket": "bkt", "credentialsSecret": "s3"}, "key": "etcd/default/old/a.db", "credentialsSecret": "old-root"}}
	f.putCluster("default", "example", spec)
	startOperator(t, f)
	st := waitStatus(f, "example", progressing(reasonBadSecret))
	if !strings.Contains(st.Message, `spec.restore.credentialsSecret old-root: GET /api/v1/namespaces/default/secrets/old-root: 404`) {
		t.Errorf("status %s: %s", st.Phase, st.Message)
	}
	if n := f.objectNames("pods"); len(n) != 0 {
		t.Errorf("created Pods %v without the credentials", n)
	}

	f.putSecret("default", "old-root", map[string]string{"username": "root-7692c3ad35", "password": "the old one"})
	waitStatus(f, "example", statusCheck{"example-root made", func(clusterStatus) bool { return f.objects["secrets/default/example-root"] != nil }})
	if d := secretData(t, f, "example-root"); string(d["username"]) != "root-7692c3ad35" || string(d["password"]) != "the old one" {
		t.Errorf("example-root = %q, want the credentials of old-root", d)
	}
}
