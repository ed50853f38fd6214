package e2e

// Backups (issue 25, first stage) against a real S3-compatible server,
// versitygw (s3server.go), and a real 3-member cluster on the node. The
// operator's control loop does not call its backup code yet, so these
// tests run the operator package's live tests (../backup_live_test.go)
// with the servers' addresses in the environment: the operator's own code
// (the S3 client, the snapshot stream through the API server's Pod proxy,
// a step of the schedule and its goroutine), from inside its package.
// What it wrote is checked with an independent client, the aws CLI, where
// it is installed.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// backupRecord is status.lastBackup.
type backupRecord struct {
	Time, Key, SHA256, Duration, Member, Now string
	Revision, Size                           int64
}

// The CRD's schema takes spec.backup and spec.restore, fills their defaults, and refuses
// what the operator could not use, naming the field.
func TestBackupSchema(t *testing.T) {
	ns := "backup-schema"
	if err := cp.CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cp.Kubectl("", "delete", "namespace", ns, "--wait=false") })
	s3 := `"s3":{"endpoint":"http://127.0.0.1:7070","bucket":"backups","credentialsSecret":"s3"}`
	// field is "backup" or "restore"; the valid ones get their defaults.
	tests := []struct {
		name, field, value, err string
	}{
		{"valid", "backup", `{` + s3 + `,"schedule":"30s","gzip":true,"now":"1"}`, ""},
		{"bucket", "backup", `{"s3":{"endpoint":"http://h","bucket":"Bad_Bucket","credentialsSecret":"s3"}}`, "spec.backup.s3.bucket"},
		{"endpoint", "backup", `{"s3":{"endpoint":"s3.example.com","bucket":"backups","credentialsSecret":"s3"}}`, "spec.backup.s3.endpoint"},
		{"credentials", "backup", `{"s3":{"endpoint":"http://h","bucket":"backups"}}`, "spec.backup.s3.credentialsSecret"},
		{"keep", "backup", `{` + s3 + `,"keep":0}`, "spec.backup.keep"},
		{"schedule", "backup", `{` + s3 + `,"schedule":"daily"}`, "spec.backup.schedule"},
		{"no s3", "backup", `{"now":"1"}`, "spec.backup.s3"},
		{"valid", "restore", `{` + s3 + `,"key":"e2e/a.db","sha256":"` + strings.Repeat("ab", 32) + `"}`, ""},
		{"no key", "restore", `{` + s3 + `}`, "spec.restore.key"},
		{"sha256", "restore", `{` + s3 + `,"key":"a.db","sha256":"abc"}`, "spec.restore.sha256"},
		{"no s3", "restore", `{"key":"a.db"}`, "spec.restore.s3"},
	}
	for i, tt := range tests {
		body := fmt.Sprintf(`{"apiVersion":"coreos.com/v1","kind":"EtcdCluster","metadata":{"name":"c%d"},"spec":{"size":1,%q:%s}}`, i, tt.field, tt.value)
		code, b, err := cp.Do("POST", "/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters", []byte(body), "application/json")
		switch {
		case err != nil:
			t.Fatal(err)
		case tt.err == "" && code != 201:
			t.Errorf("%s %s: %d %s", tt.field, tt.name, code, b)
		case tt.err == "":
			var o struct{ Spec map[string]map[string]any }
			json.Unmarshal(b, &o)
			got := o.Spec[tt.field]
			s3, _ := got["s3"].(map[string]any)
			if s3["region"] != "us-east-1" || tt.field == "backup" && got["keep"] != 3.0 {
				t.Errorf("%s %s: defaults not filled in: %v", tt.field, tt.name, got)
			}
		case code != 422 || !strings.Contains(string(b), tt.err):
			t.Errorf("%s %s: %d %s, want 422 naming %s", tt.field, tt.name, code, b, tt.err)
		}
	}
}

// startS3 starts a versitygw of the test's own with a bucket "backups".
func startS3(t *testing.T, name string) *S3Server {
	t.Helper()
	return startS3On(t, name, "127.0.0.1")
}

// startS3On is startS3 listening on host.
func startS3On(t *testing.T, name, host string) *S3Server {
	t.Helper()
	s, err := cp.StartS3ServerOn(name, host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.StopProcess(name, 5*time.Second) })
	if err := s.MakeBucket("backups"); err != nil {
		t.Fatal(err)
	}
	return s
}

// runLive runs one of the operator package's live tests with env and
// returns its output.
func runLive(t *testing.T, test string, env map[string]string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "test", "-count=1", "-v", "-run", "^"+test+"$", ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("%s: %v\n%s", test, err, out)
	}
	return string(out)
}

func (s *S3Server) liveEnv() map[string]string {
	return map[string]string{"LIVE_S3_URL": s.URL, "LIVE_S3_ACCESS": s.AccessKey, "LIVE_S3_SECRET": s.SecretKey, "LIVE_S3_BUCKET": "backups"}
}

// The operator's S3 client against versitygw: a stream in one part and in
// several, of known and unknown size; streams cut midway leave no object
// and no upload; a wrong secret and a missing bucket are refused.
func TestBackupS3Client(t *testing.T) {
	s := startS3(t, "versitygw-s3client")
	runLive(t, "TestLiveS3", s.liveEnv())
}

// aws runs the aws CLI against s, or skips the check when it is missing.
func (s *S3Server) aws(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	if _, err := exec.LookPath("aws"); err != nil {
		t.Log("no aws CLI: the independent check is skipped")
		return "", false
	}
	cmd := exec.Command("aws", append([]string{"--endpoint-url", s.URL}, args...)...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey, "AWS_DEFAULT_REGION="+s.Region, "AWS_EC2_METADATA_DISABLED=true")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("aws %v: %v\n%s", args, err, out)
	}
	return string(out), true
}

// listed is what the aws CLI lists under prefix: key -> size.
func (s *S3Server) listed(t *testing.T, prefix string) (map[string]int64, bool) {
	t.Helper()
	out, ok := s.aws(t, "s3api", "list-objects-v2", "--bucket", "backups", "--prefix", prefix, "--output", "json")
	if !ok {
		return nil, false
	}
	var l struct {
		Contents []struct {
			Key  string
			Size int64
		}
	}
	if out != "" {
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatal(err)
		}
	}
	m := map[string]int64{}
	for _, o := range l.Contents {
		m[o.Key] = o.Size
	}
	return m, true
}

// parts is the number of parts an object was uploaded in, from its ETag
// ("md5-N" for a multipart upload).
func (s *S3Server) parts(t *testing.T, key string) (int, bool) {
	t.Helper()
	out, ok := s.aws(t, "s3api", "head-object", "--bucket", "backups", "--key", key, "--output", "json")
	if !ok {
		return 0, false
	}
	var h struct{ ETag string }
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatal(err)
	}
	n := 0
	if _, count, found := strings.Cut(strings.Trim(h.ETag, `"`), "-"); found {
		fmt.Sscan(count, &n)
	}
	return n, true
}

// download fetches an object with the aws CLI.
func (s *S3Server) download(t *testing.T, key string) ([]byte, bool) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "object")
	if _, ok := s.aws(t, "s3", "cp", "--only-show-errors", "s3://backups/"+key, file); !ok {
		return nil, false
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

// A real cluster of 3 with 10,000 keys, backed up to versitygw: a plain
// snapshot, then compressed and encrypted, each a multipart upload of
// several parts; wrong credentials and a missing bucket refused with
// nothing written; a schedule with retention 3 leaving exactly 3 objects.
func TestBackupCluster(t *testing.T) {
	ns := "backup-cluster"
	d := startDay2(t, ns, "example", 3, "")
	s := startS3(t, "versitygw-"+ns)
	d.running(3)
	rev := d.writeKeys(10000)
	d.secret("s3", map[string]string{"accessKeyID": s.AccessKey, "secretAccessKey": s.SecretKey})
	d.secret("s3-wrong", map[string]string{"accessKeyID": s.AccessKey, "secretAccessKey": "not-the-secret"})
	d.secret("backup-key", map[string]string{"key": strings.Repeat("0123456789abcdef", 4)})
	prefix := "e2e/" + ns + "/example/"
	base := map[string]any{"endpoint": s.URL, "bucket": "backups", "prefix": "e2e", "credentialsSecret": "s3"}

	// The operator itself makes each backup a new spec.backup.now asks
	// for, and records it in status.lastBackup.
	d.setBackup(map[string]any{"s3": base, "now": "plain"})
	plain := d.waitBackup("plain")
	if plain.Revision < rev || plain.Size <= 5<<20 || !strings.HasSuffix(plain.Key, ".db") {
		t.Fatalf("plain backup %+v (keys written at revision %d)", plain, rev)
	}
	t.Logf("plain backup: %+v", plain)
	if n, ok := s.parts(t, plain.Key); ok && n < 1 {
		t.Errorf("the plain backup of %d bytes came in %d parts", plain.Size, n)
	}
	if obj, ok := s.download(t, plain.Key); ok {
		sum := sha256.Sum256(obj)
		db := obj[:len(obj)-32]
		dbSum := sha256.Sum256(db)
		if hex.EncodeToString(sum[:]) != plain.SHA256 || !bytes.Equal(dbSum[:], obj[len(obj)-32:]) || !bytes.Contains(db, []byte("/backup/key-09999")) {
			t.Errorf("the object the aws CLI reads (%d bytes) is not the snapshot recorded", len(obj))
		}
	}

	d.setBackup(map[string]any{"s3": base, "gzip": true, "encryptionKeySecret": "backup-key", "now": "sealed"})
	sealed := d.waitBackup("sealed")
	if !strings.HasSuffix(sealed.Key, ".db.gz.enc") || sealed.Size >= plain.Size {
		t.Errorf("compressed and encrypted backup %+v, plain was %d bytes", sealed, plain.Size)
	}
	if obj, ok := s.download(t, sealed.Key); ok {
		sum := sha256.Sum256(obj)
		if hex.EncodeToString(sum[:]) != sealed.SHA256 || bytes.Contains(obj, []byte("/backup/key-")) {
			t.Errorf("the sealed object the aws CLI reads (%d bytes) is not the one recorded, or not encrypted", len(obj))
		}
	}

	before, _ := s.listed(t, prefix)
	for _, bad := range []struct{ secret, bucket, err string }{
		{"s3-wrong", "backups", "SignatureDoesNotMatch"},
		{"s3", "no-such-bucket", "NoSuchBucket"},
	} {
		d.setBackup(map[string]any{"s3": map[string]any{"endpoint": s.URL, "bucket": bad.bucket, "prefix": "e2e", "credentialsSecret": bad.secret}, "now": bad.err})
		if err := Eventually(2*time.Minute, "a backup failure that says "+bad.err, func() (bool, error) {
			return strings.Contains(d.backupFailure(), bad.err), nil
		}); err != nil {
			t.Error(err)
		}
	}
	if after, ok := s.listed(t, prefix); ok && len(after) != len(before) {
		t.Errorf("refused backups changed the bucket: %v, then %v", before, after)
	}

	// A schedule with keep 3: once the schedule has made two more, the
	// oldest (the plain one) is gone and exactly 3 remain.
	d.setBackup(map[string]any{"s3": base, "schedule": "30s", "keep": 3})
	err := Eventually(3*time.Minute, "3 backups kept, the oldest deleted", func() (bool, error) {
		objs, _ := s.listed(t, prefix)
		_, oldest := objs[plain.Key]
		_, newest := objs[d.lastBackup().Key]
		return len(objs) == 3 && !oldest && newest, nil
	})
	if err != nil {
		objs, _ := s.listed(t, prefix)
		t.Errorf("%v: %v", err, objs)
	}
}

// The operator killed (SIGKILL) in the middle of an upload, slowed
// down by a throttling proxy so that there is a middle: the bucket has no
// object that looks complete and lost none; the next operator aborts the
// upload left open, makes the backup asked for, and retention keeps 3.
func TestBackupKilledDuringUpload(t *testing.T) {
	ns := "backup-killed"
	d := startDay2(t, ns, "example", 3, "")
	s := startS3(t, "versitygw-"+ns)
	d.running(3)
	d.writeKeys(10000)
	d.secret("s3", map[string]string{"accessKeyID": s.AccessKey, "secretAccessKey": s.SecretKey})
	prefix := "e2e/" + ns + "/example/"
	base := map[string]any{"endpoint": s.URL, "bucket": "backups", "prefix": "e2e", "credentialsSecret": "s3"}
	for _, now := range []string{"first", "second"} {
		d.setBackup(map[string]any{"s3": base, "keep": 2, "now": now})
		d.waitBackup(now)
	}
	before, ok := s.listed(t, prefix)
	if !ok {
		t.Skip("no aws CLI to look at the bucket with")
	}
	if len(before) != 2 {
		t.Fatalf("before the kill: %v, want 2 backups", before)
	}

	slow := throttle(t, strings.TrimPrefix(s.URL, "http://"), 1<<20)
	d.setBackup(map[string]any{"s3": map[string]any{"endpoint": slow, "bucket": "backups", "prefix": "e2e", "credentialsSecret": "s3"}, "keep": 2, "now": "killed"})
	if err := Eventually(2*time.Minute, "an upload under way", func() (bool, error) { return len(s.uploads(t, prefix)) > 0, nil }); err != nil {
		t.Fatal(err)
	}
	cp.KillProcess(operatorName(ns))
	if after, _ := s.listed(t, prefix); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("after the kill the bucket holds %v, want what it held before, %v", after, before)
	}
	if n := len(s.uploads(t, prefix)); n != 1 {
		t.Errorf("%d uploads open after the kill, want the killed one", n)
	}

	startOperator(t, ns, "")
	killed := d.waitBackup("killed")
	after, _ := s.listed(t, prefix)
	if _, ok := after[killed.Key]; len(after) != 2 || !ok {
		t.Errorf("after the next try: %v, want 2 backups, the newest %s", after, killed.Key)
	}
	if ups := s.uploads(t, prefix); len(ups) != 0 {
		t.Errorf("uploads still open: %v", ups)
	}
	if obj, ok := s.download(t, killed.Key); ok {
		if sum := sha256.Sum256(obj); hex.EncodeToString(sum[:]) != killed.SHA256 || int64(len(obj)) != killed.Size {
			t.Errorf("the object (%d bytes) is not the backup recorded: %+v", len(obj), killed)
		}
	}
}

// uploads is what the aws CLI lists of the multipart uploads open under
// prefix: their keys.
func (s *S3Server) uploads(t *testing.T, prefix string) []string {
	t.Helper()
	out, ok := s.aws(t, "s3api", "list-multipart-uploads", "--bucket", "backups", "--prefix", prefix, "--output", "json")
	if !ok {
		return nil
	}
	var l struct{ Uploads []struct{ Key string } }
	if out != "" {
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	for _, u := range l.Uploads {
		keys = append(keys, u.Key)
	}
	return keys
}

// throttle forwards TCP connections to target at about rate bytes a
// second each way, and returns its URL: an upload through it lasts long
// enough to be cut. A TCP relay leaves the Host header, and so SigV4
// signatures, as the client made them.
func throttle(t *testing.T, target string, rate int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			go paced(u, c, rate)
			go paced(c, u, rate)
		}
	}()
	return "http://" + ln.Addr().String()
}

// paced copies src to dst at about rate bytes a second, then closes dst.
func paced(dst, src net.Conn, rate int) {
	defer dst.Close()
	buf := make([]byte, 16<<10)
	start, sent := time.Now(), 0
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			sent += n
			// Pacing, not waiting for anything: the bytes so far may
			// take sent/rate seconds.
			time.Sleep(time.Until(start.Add(time.Duration(sent) * time.Second / time.Duration(rate))))
		}
		if err != nil {
			return
		}
	}
}

// waitBackup waits for the operator to record the backup that spec.backup.now
// asked for.
func (d *day2) waitBackup(now string) backupRecord {
	d.t.Helper()
	var r backupRecord
	if err := Eventually(3*time.Minute, "the backup "+now, func() (bool, error) {
		r = d.lastBackup()
		return r.Now == now, nil
	}); err != nil {
		d.t.Fatalf("%v; status.backupFailure: %s", err, d.backupFailure())
	}
	return r
}

// backupFailure is status.backupFailure.message.
func (d *day2) backupFailure() string {
	var o struct {
		Status struct{ BackupFailure struct{ Message string } }
	}
	_ = cp.Get("/apis/coreos.com/v1/namespaces/"+d.ns+"/etcdclusters/"+d.name, &o)
	return o.Status.BackupFailure.Message
}

// writeKeys writes /backup/key-00000 ... in transactions of 100 and
// returns the revision after the last.
func (d *day2) writeKeys(n int) int64 {
	d.t.Helper()
	var rev int64
	for i := 0; i < n; i += 100 {
		var ops []any
		for j := i; j < min(i+100, n); j++ {
			value := fmt.Sprintf("value-%05d-%s", j, strings.Repeat("x", 1000))
			ops = append(ops, map[string]any{"requestPut": map[string]string{"key": b64(fmt.Sprintf("/backup/key-%05d", j)), "value": b64(value)}})
		}
		var resp struct{ Header struct{ Revision string } }
		if err := d.etcd(d.member(0), "/v3/kv/txn", map[string]any{"success": ops}, &resp); err != nil {
			d.t.Fatal(err)
		}
		fmt.Sscan(resp.Header.Revision, &rev)
	}
	return rev
}

func (d *day2) secret(name string, data map[string]string) {
	d.t.Helper()
	body, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": name}, "stringData": data})
	code, b, err := cp.Do("POST", "/api/v1/namespaces/"+d.ns+"/secrets", body, "application/json")
	if err != nil || code != 201 {
		d.t.Fatalf("create Secret %s: %v %d %s", name, err, code, b)
	}
}

// setBackup sets spec.backup as a whole (a JSON patch: a merge patch would
// keep the fields it does not name).
func (d *day2) setBackup(backup map[string]any) {
	d.t.Helper()
	body, _ := json.Marshal([]any{map[string]any{"op": "add", "path": "/spec/backup", "value": backup}})
	code, b, err := cp.Do("PATCH", "/apis/coreos.com/v1/namespaces/"+d.ns+"/etcdclusters/"+d.name, body, "application/json-patch+json")
	if err != nil || code != 200 {
		d.t.Fatalf("set spec.backup: %v %d %s", err, code, b)
	}
}

func (d *day2) lastBackup() backupRecord {
	var o struct {
		Status struct{ LastBackup backupRecord }
	}
	_ = cp.Get("/apis/coreos.com/v1/namespaces/"+d.ns+"/etcdclusters/"+d.name, &o)
	return o.Status.LastBackup
}
