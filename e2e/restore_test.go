package e2e

// Restore (issue 25) on the real node: a cluster of 3 with 10,000 keys
// backed up to versitygw (compressed and encrypted), the EtcdCluster
// deleted, and a new one restored from the object. Before that, each bad
// backup is refused in the status with nothing created.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRestoreCluster(t *testing.T) {
	ns := "restore-cluster"
	d := startDay2(t, ns, "example", 3, "")
	// On the node's bridge: the restored members fetch the backup too.
	s := startS3On(t, "versitygw-"+ns, NodeIP)
	old := d.running(3)
	rev := d.writeKeys(10000)
	d.secret("s3", map[string]string{"accessKeyID": s.AccessKey, "secretAccessKey": s.SecretKey})
	d.secret("backup-key", map[string]string{"key": strings.Repeat("0123456789abcdef", 4)})
	d.secret("other-key", map[string]string{"key": strings.Repeat("fedcba9876543210", 4)})
	store := map[string]any{"endpoint": s.URL, "bucket": "backups", "prefix": "e2e", "credentialsSecret": "s3"}
	d.setBackup(map[string]any{"s3": store, "now": "plain"})
	plain := d.waitBackup("plain")
	d.setBackup(map[string]any{"s3": store, "gzip": true, "encryptionKeySecret": "backup-key", "now": "to-restore"})
	b := d.waitBackup("to-restore")
	if b.Revision < rev {
		t.Fatalf("backup %+v, keys written at revision %d", b, rev)
	}
	deleteAndWait(t, "/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/example")

	// Refused before anything is created: each says why in the status.
	bad := []struct{ name, key, keySecret, sha, err string }{
		{"missing", "e2e/nothing-here.db", "", "", "s3://backups/e2e/nothing-here.db: there is no such object"},
		{"wrong-key", b.Key, "other-key", "", "does not open (wrong key"},
		{"other-object", b.Key, "backup-key", strings.Repeat("0", 64), "as spec.restore.sha256 says"},
	}
	// A changed byte in a plain copy of the snapshot, put there by the aws CLI.
	if obj, ok := s.download(t, plain.Key); ok {
		obj[len(obj)/2] ^= 0x40
		file := filepath.Join(t.TempDir(), "changed.db")
		if err := os.WriteFile(file, obj, 0o644); err != nil {
			t.Fatal(err)
		}
		s.aws(t, "s3", "cp", "--only-show-errors", file, "s3://backups/e2e/changed.db")
		bad = append(bad, struct{ name, key, keySecret, sha, err string }{"changed", "e2e/changed.db", "", "", "is not a whole etcd snapshot"})
	}
	for _, tt := range bad {
		restoreFrom(t, ns, tt.name, store, tt.key, tt.keySecret, tt.sha)
		st := (&day2{t: t, ns: ns, name: tt.name}).wait("restore refused", 2*time.Minute, func(st e2eStatus) bool {
			return st.Phase == "Failed" && st.reason("Progressing") == "RestoreFailed"
		})
		if !strings.Contains(st.Message, tt.err) {
			t.Errorf("%s: status %q, want it to say %q", tt.name, st.Message, tt.err)
		}
		for _, res := range []string{"pods", "services", "persistentvolumeclaims"} {
			if objs := listIn(t, ns, res, ofCluster(tt.name)); len(objs) != 0 {
				t.Errorf("%s: a refused restore created %s %v", tt.name, res, names(objs))
			}
		}
		t.Logf("%s refused: %s", tt.name, st.Message)
	}

	// The restore: every member from the backup, a new cluster ID, every key.
	start := time.Now()
	restoreFrom(t, ns, "restored", store, b.Key, "backup-key", b.SHA256)
	r := &day2{t: t, ns: ns, name: "restored"}
	st := r.running(3)
	t.Logf("restored 3 members from %s (%d bytes) -> Running 3/3 in %s", b.Key, b.Size, time.Since(start).Round(time.Millisecond))
	if st.ClusterID == "" || st.ClusterID == old.ClusterID {
		t.Errorf("restored cluster ID %q, the old one was %q", st.ClusterID, old.ClusterID)
	}
	var rec struct {
		Status struct{ Restore struct{ Key, SHA256 string } }
	}
	if err := cp.Get("/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/restored", &rec); err != nil || rec.Status.Restore.Key != b.Key || rec.Status.Restore.SHA256 != b.SHA256 {
		t.Errorf("status.restore %+v (%v), want the backup %s", rec.Status.Restore, err, b.Key)
	}
	for i := range 3 {
		count, revision := r.countKeys(r.member(i), "/backup/")
		if count != 10000 || revision < b.Revision {
			t.Errorf("member %d: %d keys at revision %d, want 10000 at %d or later", i, count, revision, b.Revision)
		}
	}
	if v := r.get("/backup/key-09999"); !strings.HasPrefix(v, "value-09999-") {
		t.Errorf("/backup/key-09999 = %.20q", v)
	}
	if err := r.put("/after-restore", "x"); err != nil {
		t.Errorf("write to the restored cluster: %v", err)
	}
}

// restoreFrom creates EtcdCluster name with spec.restore.
func restoreFrom(t *testing.T, ns, name string, store map[string]any, key, keySecret, sha string) {
	t.Helper()
	restore := map[string]any{"s3": store, "key": key}
	if keySecret != "" {
		restore["encryptionKeySecret"] = keySecret
	}
	if sha != "" {
		restore["sha256"] = sha
	}
	body, _ := json.Marshal(map[string]any{"apiVersion": "coreos.com/v1", "kind": "EtcdCluster", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"size": 3, "restore": restore}})
	code, b, err := cp.Do("POST", "/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters", body, "application/json")
	if err != nil || code != 201 {
		t.Fatalf("create %s: %v %d %s", name, err, code, b)
	}
}

// countKeys asks a member how many keys start with prefix, and its revision.
func (d *day2) countKeys(pod, prefix string) (count, revision int64) {
	d.t.Helper()
	var resp struct {
		Header struct{ Revision string }
		Count  string
	}
	end := prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1)
	if err := d.etcd(pod, "/v3/kv/range", map[string]any{"key": b64(prefix), "range_end": b64(end), "count_only": true}, &resp); err != nil {
		d.t.Fatal(err)
	}
	fmt.Sscan(resp.Count, &count)
	fmt.Sscan(resp.Header.Revision, &revision)
	return count, revision
}
