// Restore: a new cluster whose members start from a backup.
//
// etcd restores offline. `etcdutl snapshot restore` turns a snapshot file
// into a member's data directory, rewriting the membership to the one given
// on its command line: every member of the new cluster is restored from the
// same snapshot with the --initial-cluster and token its etcd then starts
// with, so the members agree on a membership that is new, and on a cluster
// ID that is new too (etcd derives it from the members and the token, and
// the token comes from the new EtcdCluster's uid). Every key of the
// snapshot is kept, at its revision.
//
// An EtcdCluster with spec.restore is a new cluster like any other, but
// before anything is created the operator reads the whole object once:
// the object's sha256 (when spec.restore.sha256 gives it), the decryption
// (AES-GCM authenticates every chunk: a wrong key or a changed byte fails),
// the gzip stream, and etcd's own sha256 at the end of the snapshot. A
// backup that fails any of them is refused in the status, with nothing
// created. Then each bootstrap Pod gets three init containers:
//
//	fetch-backup  this operator's image: `etcd-operator restore fetch`
//	              downloads and checks the object again, and writes the
//	              snapshot to /var/lib/etcd/restore/snapshot.db
//	restore       the cluster's etcd image: etcdutl snapshot restore into
//	              /var/lib/etcd/restore/data
//	place-data    this operator's image: `etcd-operator restore place`
//	              moves the restored member/ directory into place, unless
//	              one is there already, and removes the rest
//
// Each is safe to run again: a Pod made again on a volume that was
// restored keeps its data (etcdutl restores into a directory fetch-backup
// has just emptied; place-data keeps the member/ already there).
package main

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/encryption"
	"github.com/etcd-operator/etcd-operator/internal/s3"
	"github.com/etcd-operator/etcd-operator/internal/snapshot"
)

// restoreRetry is how soon a backup that could not be read is read again.
const restoreRetry = 30 * time.Second

// restoreSpec is spec.restore.
type restoreSpec struct {
	// S3 holds the same fields as spec.backup.s3 (its prefix is not used:
	// Key is the whole key).
	S3  s3Spec `json:"s3"`
	Key string `json:"key"`
	// SHA256 is the object's, as status.lastBackup recorded it; optional.
	SHA256              string `json:"sha256"`
	EncryptionKeySecret string `json:"encryptionKeySecret"`
	// CredentialsSecret names a Secret with a username and password that
	// the backup's etcd takes (the source cluster's NAME-root): a backup
	// of a cluster with authentication on holds its users, and a TLS
	// cluster restored from it starts with those credentials (tls.go).
	CredentialsSecret string `json:"credentialsSecret"`
}

// restoreCheck is what a pass found when it read the backup.
type restoreCheck struct {
	Record restoreRecord
	Err    string
}

var sha256Hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// parseRestore reads spec.restore; nil when there is none. Its errors name
// the field, as they end up in the status.
func parseRestore(raw json.RawMessage) (*restoreSpec, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var r restoreSpec
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("spec.restore must be an object with s3, key, sha256 and encryptionKeySecret, not %s", excerpt(raw))
	}
	if err := r.S3.check("spec.restore.s3"); err != nil {
		return nil, err
	}
	r.Key = strings.TrimLeft(r.Key, "/")
	r.SHA256 = strings.ToLower(r.SHA256)
	switch {
	case r.Key == "":
		return nil, errors.New("spec.restore.key is missing: the object key of a backup (status.lastBackup.key)")
	case r.SHA256 != "" && !sha256Hex64.MatchString(r.SHA256):
		return nil, fmt.Errorf("spec.restore.sha256 %q is not a sha256 (64 hexadecimal digits)", r.SHA256)
	case r.encrypted() && r.EncryptionKeySecret == "":
		return nil, fmt.Errorf("spec.restore.key %q names an encrypted backup (.enc): spec.restore.encryptionKeySecret is missing", r.Key)
	case !r.encrypted() && r.EncryptionKeySecret != "":
		return nil, fmt.Errorf("spec.restore.encryptionKeySecret is set, but spec.restore.key %q does not end in .enc as encrypted backups do", r.Key)
	}
	return &r, nil
}

// The object's name says how it was sealed: .db, then .gz, then .enc.
func (r *restoreSpec) encrypted() bool { return strings.HasSuffix(r.Key, ".enc") }
func (r *restoreSpec) gzipped() bool {
	return strings.HasSuffix(strings.TrimSuffix(r.Key, ".enc"), ".gz")
}

func (r *restoreSpec) where() string { return "s3://" + r.S3.Bucket + "/" + r.Key }

// restoreChecked is the record of a check of spec.restore's backup that
// still holds: the same key (and sha256, when given).
func (in input) restoreChecked() *restoreRecord {
	r, rec := in.Spec.Restore, in.Prev.Restore
	if r == nil || rec == nil || rec.Key != r.Key || r.SHA256 != "" && r.SHA256 != rec.SHA256 {
		return nil
	}
	return rec
}

// needsRestoreCheck: a cluster to restore that has not formed, whose
// backup no check has found good.
func (in input) needsRestoreCheck() bool {
	return in.Spec.Restore != nil && in.Invalid == "" && in.FormedID == "" && in.Prev.ClusterID == "" && in.restoreChecked() == nil
}

// checkRestore: a cluster to restore creates nothing until its backup was
// read and found good; a backup that cannot be read is said so, and read
// again.
func (d *decision) checkRestore() (step, bool) {
	r := d.in.Spec.Restore
	if r == nil {
		return step{}, false
	}
	if rec := d.in.restoreChecked(); rec != nil {
		d.st.Restore = rec
		return step{}, false
	}
	chk := d.obs.Restore
	if chk != nil && chk.Err == "" {
		rec := chk.Record
		d.st.Restore = &rec
		return step{}, false
	}
	why := "it was not read yet"
	if chk != nil {
		why = chk.Err
	}
	msg := fmt.Sprintf("cannot restore from %s: %s; nothing is created until it can be read (trying again every %s)", r.where(), why, restoreRetry)
	d.st.Phase, d.st.Message = phaseFailed, msg
	d.setProgressing(false, reasonRestoreFailed, msg)
	return step{Again: restoreRetry}, true
}

// checkBackup reads spec.restore's backup as a restored member will (the
// operator's side of the check, at the start of a pass).
func (c *controller) checkBackup(ctx context.Context, ns string, r *restoreSpec) *restoreCheck {
	rec, err := c.readBackup(ctx, ns, r)
	if err != nil {
		c.log.Warn("backup cannot be restored", "namespace", ns, "object", r.where(), "err", err)
		return &restoreCheck{Err: err.Error()}
	}
	c.log.Info("backup read and found good", "namespace", ns, "object", r.where(), "size", rec.Size)
	return &restoreCheck{Record: rec}
}

func (c *controller) readBackup(ctx context.Context, ns string, r *restoreSpec) (restoreRecord, error) {
	store, err := c.s3For(ctx, ns, r.S3)
	if err != nil {
		return restoreRecord{}, err
	}
	var key []byte
	if r.encrypted() {
		if key, err = c.encryptionKey(ctx, ns, r.EncryptionKeySecret); err != nil {
			return restoreRecord{}, err
		}
	}
	return fetchBackup(ctx, store, r, key, io.Discard)
}

// fetchBackup streams the backup r names into w as the snapshot etcdutl
// reads (decrypted, decompressed), checking it on the way: an error means
// w got something that must not be used.
func fetchBackup(ctx context.Context, store *s3.Client, r *restoreSpec, key []byte, w io.Writer) (rec restoreRecord, err error) {
	// A store that stops sending must not hold the pass (or the Pod) for
	// ever: as for backups, no progress for backupIdle cancels.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(backupIdle, func() { cancel(errBackupStalled) })
	defer idle.Stop()
	defer func() {
		if err != nil && context.Cause(ctx) == errBackupStalled {
			err = fmt.Errorf("%w: %w", errBackupStalled, err)
		}
	}()
	body, err := store.Get(ctx, r.Key)
	if s3.IsCode(err, "NoSuchKey") {
		return restoreRecord{}, errors.New("there is no such object")
	}
	if err != nil {
		return restoreRecord{}, err
	}
	defer body.Close()
	obj := &hashingReader{r: &progressReader{r: body, idle: idle}, h: sha256.New()}
	src, err := unsealed(obj, r, key)
	if err != nil {
		return restoreRecord{}, err
	}
	snap := snapshot.NewCheck()
	if _, err := io.Copy(io.MultiWriter(w, snap), src); err != nil {
		return restoreRecord{}, fmt.Errorf("reading it: %w", err)
	}
	// Only now has everything been read: the object's hash is whole.
	sum := hex.EncodeToString(obj.h.Sum(nil))
	switch {
	case r.SHA256 != "" && sum != r.SHA256:
		return restoreRecord{}, fmt.Errorf("its sha256 is %s, not %s as spec.restore.sha256 says: it is another object, or it was changed", sum, r.SHA256)
	case !snap.Whole():
		return restoreRecord{}, errors.New("it is not a whole etcd snapshot: its data does not match the sha256 etcd ends a snapshot with")
	}
	return restoreRecord{Key: r.Key, SHA256: sum, Size: snap.Len(), Verified: time.Now().UTC().Format(time.RFC3339)}, nil
}

// unsealed undoes what a backup's name says was done to its snapshot
// (backup.go's sealed): decrypted, then decompressed.
func unsealed(obj io.Reader, r *restoreSpec, key []byte) (io.Reader, error) {
	src := obj
	if r.encrypted() {
		var err error
		if src, err = encryption.Decrypt(src, key); err != nil {
			return nil, err
		}
	}
	if !r.gzipped() {
		return src, nil
	}
	z, err := gzip.NewReader(src)
	switch {
	case errors.Is(err, gzip.ErrHeader):
		return nil, errors.New("it is not gzip, though its name ends in .gz")
	case err != nil:
		return nil, fmt.Errorf("reading it: %w", err)
	}
	return z, nil
}

// Paths inside a restored member's data volume.
const (
	dataDir         = "/var/lib/etcd"
	restoreDir      = dataDir + "/restore"
	restoreSnapshot = restoreDir + "/snapshot.db"
	restoredData    = restoreDir + "/data"
)

// restoreContainers are the init containers of a restored member's Pod
// (see the top of this file).
func (p clusterPlan) restoreContainers(member, initialCluster string) []map[string]any {
	r := p.Restore
	env := []map[string]any{
		secretEnv("S3_ACCESS_KEY_ID", r.S3.CredentialsSecret, "accessKeyID"),
		secretEnv("S3_SECRET_ACCESS_KEY", r.S3.CredentialsSecret, "secretAccessKey"),
	}
	if r.EncryptionKeySecret != "" {
		env = append(env, secretEnv("BACKUP_ENCRYPTION_KEY", r.EncryptionKeySecret, "key"))
	}
	mounts := []map[string]any{{"name": "data", "mountPath": dataDir}}
	// etcd runs as root in its images and owns its data: the helpers that
	// write and move it run as root too.
	root := map[string]any{"runAsUser": 0, "runAsNonRoot": false}
	return []map[string]any{
		{
			"name": "fetch-backup", "image": p.OperatorImage,
			"args": []string{"restore", "fetch", "-endpoint=" + r.S3.Endpoint, "-bucket=" + r.S3.Bucket, "-region=" + r.S3.Region,
				"-key=" + r.Key, "-sha256=" + r.SHA256, "-data-dir=" + dataDir},
			"env": env, "volumeMounts": mounts, "securityContext": root,
		},
		{
			"name": "restore", "image": p.Image,
			"command": []string{"/usr/local/bin/etcdutl", "snapshot", "restore", restoreSnapshot,
				"--name=" + member, "--initial-cluster=" + initialCluster, "--initial-cluster-token=" + p.Token,
				"--initial-advertise-peer-urls=" + peerURL(member, p.TLS != nil), "--data-dir=" + restoredData},
			"volumeMounts": mounts,
		},
		{
			"name": "place-data", "image": p.OperatorImage,
			"args":         []string{"restore", "place", "-data-dir=" + dataDir},
			"volumeMounts": mounts, "securityContext": root,
		},
	}
}

func secretEnv(name, secret, key string) map[string]any {
	return map[string]any{"name": name, "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": secret, "key": key}}}
}

// restoreMain is `etcd-operator restore fetch|place`, run by a restored
// member's init containers.
func restoreMain(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "fetch" && args[0] != "place" {
		return errors.New("usage: etcd-operator restore fetch|place [flags]")
	}
	fs := flag.NewFlagSet("etcd-operator restore "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var r restoreSpec
	dir := fs.String("data-dir", dataDir, "the member's data directory")
	if args[0] == "fetch" {
		fs.StringVar(&r.S3.Endpoint, "endpoint", "", "S3 endpoint URL")
		fs.StringVar(&r.S3.Bucket, "bucket", "", "bucket")
		fs.StringVar(&r.S3.Region, "region", "us-east-1", "region")
		fs.StringVar(&r.Key, "key", "", "the backup's object key")
		fs.StringVar(&r.SHA256, "sha256", "", "the object's sha256, if known")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if args[0] == "place" {
		return placeRestored(*dir)
	}
	store, err := s3.New(r.S3.Endpoint, r.S3.Bucket, r.S3.Region, os.Getenv("S3_ACCESS_KEY_ID"), os.Getenv("S3_SECRET_ACCESS_KEY"))
	if err != nil {
		return err
	}
	var key []byte
	if r.encrypted() {
		if key, err = encryption.ParseKey([]byte(os.Getenv("BACKUP_ENCRYPTION_KEY"))); err != nil {
			return fmt.Errorf("BACKUP_ENCRYPTION_KEY: %w", err)
		}
	}
	return fetchSnapshot(ctx, store, &r, key, *dir, stderr)
}

// fetchSnapshot writes the checked snapshot to dir/restore/snapshot.db,
// with an empty dir/restore/data for etcdutl to restore into.
func fetchSnapshot(ctx context.Context, store *s3.Client, r *restoreSpec, key []byte, dir string, log io.Writer) error {
	restore := filepath.Join(dir, "restore")
	if err := os.RemoveAll(restore); err != nil {
		return err
	}
	if err := os.MkdirAll(restore, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(restore, "snapshot.db.part")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer f.Close()
	rec, err := fetchBackup(ctx, store, r, key, f)
	if err != nil {
		return fmt.Errorf("%s: %w", r.where(), err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(restore, "snapshot.db")); err != nil {
		return err
	}
	fmt.Fprintf(log, "fetched %s: %d bytes of snapshot, object sha256 %s\n", r.where(), rec.Size, rec.SHA256)
	return nil
}

// placeRestored moves what etcdutl restored into dir, unless dir holds a
// member's data already (the Pod was made again on a restored volume).
func placeRestored(dir string) error {
	member, restored := filepath.Join(dir, "member"), filepath.Join(dir, "restore", "data", "member")
	_, err := os.Stat(member)
	switch {
	case err == nil:
		fmt.Fprintf(os.Stderr, "%s holds a member's data already: kept\n", member)
	case errors.Is(err, os.ErrNotExist):
		if err := os.Rename(restored, member); err != nil {
			return fmt.Errorf("place the restored data: %w", err)
		}
		fmt.Fprintf(os.Stderr, "restored data placed in %s\n", member)
	default:
		return err
	}
	return os.RemoveAll(filepath.Join(dir, "restore"))
}
