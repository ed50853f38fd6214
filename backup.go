// Backup: one snapshot of a cluster, streamed into an S3 object.
//
// A backup is a pipeline of readers, each holding one chunk at a time, so
// that the operator's memory does not grow with the database:
//
//	member's JSON gateway -> snapshot.Reader (decode, check sha256)
//	  -> gzip (optional) -> AES-256-GCM (optional) -> sha256 and size
//	  -> S3 (a multipart upload, in parts of 64 MiB)
//
// Everything it needs is read through the API server when the backup
// starts: the Secrets (S3 credentials, the encryption key) and the member
// Pods; etcd answers through the Pod proxy, as for every other question.
// A failure anywhere aborts the upload, so an object exists only when its
// snapshot was complete and verified. Retention then deletes the oldest
// objects beyond spec.backup.keep, never the one just written.
//
// Objects are named BUCKET/PREFIX/NAMESPACE/NAME/TIMESTAMP-REVISION.db, with
// .gz and .enc appended when compressed and encrypted: listed in order of
// their names, they are in order of time.
package main

import (
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/encryption"
	"github.com/etcd-operator/etcd-operator/internal/s3"
	"github.com/etcd-operator/etcd-operator/internal/snapshot"
)

// backupIdle cancels a backup whose stream has not moved for this long: a
// member or an S3 endpoint that hangs must not hold the backup for ever.
const backupIdle = time.Minute

// s3Spec is where backups are: spec.backup.s3, and spec.restore.s3.
type s3Spec struct {
	Endpoint          string `json:"endpoint"`
	Bucket            string `json:"bucket"`
	Prefix            string `json:"prefix"`
	Region            string `json:"region"`
	CredentialsSecret string `json:"credentialsSecret"`
}

// check validates s3 (field, for errors: "spec.backup.s3") and fills in
// the defaults.
func (s *s3Spec) check(field string) error {
	if _, err := s3.ParseEndpoint(s.Endpoint); err != nil {
		return fmt.Errorf("%s.endpoint: %w", field, err)
	}
	if !bucketName.MatchString(s.Bucket) {
		return fmt.Errorf("%s.bucket %q is not a valid bucket name", field, s.Bucket)
	}
	if s.CredentialsSecret == "" {
		return fmt.Errorf("%s.credentialsSecret is missing", field)
	}
	s.Prefix = strings.Trim(s.Prefix, "/")
	s.Region = cmp.Or(s.Region, "us-east-1")
	return nil
}

// backupSpec is spec.backup.
type backupSpec struct {
	S3 s3Spec `json:"s3"`
	// Schedule is the time between backups, a Go duration ("30s", "6h");
	// empty: only on demand.
	Schedule string `json:"schedule"`
	// Keep is how many backups retention keeps (default 3).
	Keep                *int   `json:"keep"`
	Gzip                bool   `json:"gzip"`
	EncryptionKeySecret string `json:"encryptionKeySecret"`
	// Now asks for a backup: each new value, one backup.
	Now string `json:"now"`

	interval time.Duration
	keep     int
}

var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// parseBackup reads spec.backup (parseSpec); nil when there is none. Its
// errors name the field, as they end up in the status.
func parseBackup(raw json.RawMessage) (*backupSpec, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	b := &backupSpec{}
	if err := json.Unmarshal(raw, b); err != nil {
		return nil, fmt.Errorf("spec.backup: %w", err)
	}
	if err := b.S3.check("spec.backup.s3"); err != nil {
		return nil, err
	}
	if b.Schedule != "" {
		d, err := time.ParseDuration(b.Schedule)
		if err != nil || d < 10*time.Second {
			return nil, fmt.Errorf("spec.backup.schedule %q must be a duration of at least 10s, such as 30m or 6h", b.Schedule)
		}
		b.interval = d
	}
	b.keep = 3
	if b.Keep != nil {
		if *b.Keep < 1 {
			return nil, fmt.Errorf("spec.backup.keep must be at least 1, not %d", *b.Keep)
		}
		b.keep = *b.Keep
	}
	return b, nil
}

// backupPrefix is where a cluster's backups go: PREFIX/NAMESPACE/NAME/.
func backupPrefix(spec *backupSpec, ns, name string) string {
	return path.Join(spec.S3.Prefix, ns, name) + "/"
}

// objectKey names a backup by its time (to the millisecond: two backups
// asked for within a second, with no write between them, are two objects)
// and revision.
func objectKey(prefix string, t time.Time, revision int64, spec *backupSpec) string {
	k := prefix + t.UTC().Format("20060102T150405.000Z") + "-" + strconv.FormatInt(revision, 10) + ".db"
	if spec.Gzip {
		k += ".gz"
	}
	if spec.EncryptionKeySecret != "" {
		k += ".enc"
	}
	return k
}

// backupName matches the names objectKey makes, below the prefix, and
// those of earlier versions, to the second.
var backupName = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}(\.[0-9]{3})?Z-[0-9]+\.db(\.gz)?(\.enc)?$`)

// toPrune lists the backups (sorted keys under prefix) that retention
// deletes: the oldest beyond keep, never latest, the one just written.
func toPrune(keys []string, prefix string, keep int, latest string) []string {
	var ours []string
	for _, k := range keys {
		if backupName.MatchString(strings.TrimPrefix(k, prefix)) && strings.HasPrefix(k, prefix) {
			ours = append(ours, k)
		}
	}
	var out []string
	for _, k := range ours[:max(len(ours)-max(keep, 1), 0)] {
		if k != latest {
			out = append(out, k)
		}
	}
	return out
}

// prune deletes the backups retention does not keep.
func prune(ctx context.Context, store *s3.Client, prefix string, keep int, latest string) ([]string, error) {
	objs, err := store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	var deleted []string
	for _, k := range toPrune(keys, prefix, keep, latest) {
		if err := store.Delete(ctx, k); err != nil {
			return deleted, err
		}
		deleted = append(deleted, k)
	}
	return deleted, nil
}

// readSecret returns a Secret's data (decoded: JSON's base64 is []byte's).
func (c *controller) readSecret(ctx context.Context, ns, name string) (map[string][]byte, error) {
	var s struct {
		Data map[string][]byte `json:"data"`
	}
	if err := c.getJSON(ctx, "/api/v1/namespaces/"+url.PathEscape(ns)+"/secrets/"+url.PathEscape(name), &s); err != nil {
		return nil, fmt.Errorf("read Secret %s/%s: %w", ns, name, err)
	}
	return s.Data, nil
}

// s3For makes the S3 client of s, with the credentials of its Secret.
func (c *controller) s3For(ctx context.Context, ns string, s s3Spec) (*s3.Client, error) {
	data, err := c.readSecret(ctx, ns, s.CredentialsSecret)
	if err != nil {
		return nil, err
	}
	access, secret := strings.TrimSpace(string(data["accessKeyID"])), strings.TrimSpace(string(data["secretAccessKey"]))
	if access == "" || secret == "" {
		return nil, fmt.Errorf("Secret %s/%s needs the keys accessKeyID and secretAccessKey", ns, s.CredentialsSecret)
	}
	return s3.New(s.Endpoint, s.Bucket, s.Region, access, secret)
}

// encryptionKey reads the key of spec.backup.encryptionKeySecret (key "key").
func (c *controller) encryptionKey(ctx context.Context, ns, name string) ([]byte, error) {
	data, err := c.readSecret(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	k, err := encryption.ParseKey(data["key"])
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s, key \"key\": %w", ns, name, err)
	}
	return k, nil
}

// memberRevision is what a member's /v3/maintenance/status says of its data.
type memberRevision struct {
	Header struct {
		MemberID string      `json:"member_id"`
		Revision json.Number `json:"revision"` // a string, as the gateway writes int64s
	} `json:"header"`
	Leader string `json:"leader"`
}

// snapshotMember picks the member to snapshot: of the cluster's running
// and ready member Pods, the one whose etcd has the highest revision (the
// most recent data), a follower before the leader, which is busiest.
func (c *controller) snapshotMember(ctx context.Context, ec *EtcdCluster) (string, int64, error) {
	ns := ec.Metadata.Namespace
	var pods struct{ Items []pod }
	sel := "?" + url.Values{"labelSelector": {labelCluster + "=" + baseName(ec.Metadata.Name)}}.Encode()
	if err := c.getJSON(ctx, corePath(ns, "pods")+sel, &pods); err != nil {
		return "", 0, fmt.Errorf("list the member Pods of %s: %w", ec.key(), err)
	}
	best, bestRev, bestLeader := "", int64(-1), true
	for _, p := range pods.Items {
		if _, uid := p.owner(); uid != ec.Metadata.UID || p.Status.Phase != "Running" || !p.ready() || p.Metadata.DeletionTimestamp != "" {
			continue
		}
		if err := c.knowLogin(ctx, ec, &p); err != nil {
			return "", 0, err
		}
		var st memberRevision
		err := c.etcd(ctx, ns, p.Metadata.Name, "/v3/maintenance/status", struct{}{}, &st)
		if authFailed(err) {
			return "", 0, fmt.Errorf("snapshot of %s: etcd refuses the root password in Secret %s: %w", ec.key(), rootSecret(baseName(ec.Metadata.Name)), err)
		}
		if err != nil {
			c.log.Debug("member did not answer; not snapshotting it", "pod", ns+"/"+p.Metadata.Name, "err", err)
			continue
		}
		rev, err := st.Header.Revision.Int64()
		if err != nil && st.Header.Revision != "" {
			c.log.Debug("member answered no revision; not snapshotting it", "pod", ns+"/"+p.Metadata.Name, "revision", st.Header.Revision)
			continue
		}
		leader := st.Leader == st.Header.MemberID
		if rev > bestRev || rev == bestRev && bestLeader && !leader {
			best, bestRev, bestLeader = p.Metadata.Name, rev, leader
		}
	}
	if best == "" {
		return "", 0, fmt.Errorf("no ready member of %s answered", ec.key())
	}
	return best, bestRev, nil
}

// errBackupStalled is why a backup was cancelled when its stream stopped moving.
var errBackupStalled = fmt.Errorf("no progress for %s", backupIdle)

// backupCluster makes one backup of ec as spec says and returns its record.
func (c *controller) backupCluster(ctx context.Context, ec *EtcdCluster, spec *backupSpec) (backupRecord, error) {
	start := time.Now()
	ns := ec.Metadata.Namespace
	store, key, err := c.backupTargets(ctx, ns, spec)
	if err != nil {
		return backupRecord{}, err
	}
	member, rev, err := c.snapshotMember(ctx, ec)
	if err != nil {
		return backupRecord{}, err
	}
	prefix := backupPrefix(spec, ns, ec.Metadata.Name)
	// Also the first request to S3: wrong credentials or a missing bucket
	// fail here, before etcd is asked for anything.
	if err := store.AbortUploads(ctx, prefix); err != nil {
		return backupRecord{}, fmt.Errorf("clear unfinished uploads: %w", err)
	}
	objKey := objectKey(prefix, start, rev, spec)
	sum, size, err := c.upload(ctx, ns, member, store, objKey, spec.Gzip, key)
	if err != nil {
		return backupRecord{}, fmt.Errorf("back up %s from %s to %s/%s: %w", ec.key(), member, spec.S3.Bucket, objKey, err)
	}
	return backupRecord{Time: start.UTC().Format(time.RFC3339), Key: objKey, Revision: rev, Size: size, SHA256: sum,
		Duration: time.Since(start).Round(time.Millisecond).String(), Member: member, Now: spec.Now}, nil
}

// backupTargets reads the Secrets: the S3 client, and the encryption key
// (nil without encryption).
func (c *controller) backupTargets(ctx context.Context, ns string, spec *backupSpec) (*s3.Client, []byte, error) {
	store, err := c.s3For(ctx, ns, spec.S3)
	if err != nil {
		return nil, nil, err
	}
	if spec.EncryptionKeySecret == "" {
		return store, nil, nil
	}
	key, err := c.encryptionKey(ctx, ns, spec.EncryptionKeySecret)
	return store, key, err
}

// upload streams a snapshot of member through the pipeline into objKey
// and returns the object's sha256 and size, checked against S3's.
func (c *controller) upload(ctx context.Context, ns, member string, store *s3.Client, objKey string, gz bool, key []byte) (string, int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(backupIdle, func() { cancel(errBackupStalled) })
	defer idle.Stop()
	snap, err := c.openSnapshot(ctx, ns, member)
	if err != nil {
		return "", 0, cmp.Or(context.Cause(ctx), err)
	}
	defer snap.Close()
	body, size, done, err := sealed(&progressReader{r: snap, idle: idle}, snap.Size(), gz, key)
	if err != nil {
		return "", 0, err
	}
	defer done()
	h := &hashingReader{r: body, h: sha256.New()}
	if err := store.Put(ctx, objKey, h, size); err != nil {
		if cause := context.Cause(ctx); cause == errBackupStalled {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		return "", 0, err
	}
	if got, err := store.Head(ctx, objKey); err != nil || got != h.n {
		return "", 0, fmt.Errorf("uploaded %d bytes, S3 holds %d: %v", h.n, got, err)
	}
	return hex.EncodeToString(h.h.Sum(nil)), h.n, nil
}

// sealed is what is uploaded: the snapshot, compressed and encrypted as
// asked. Its size is -1 when not known in advance (compressed); done
// stops the compressor.
func sealed(snap io.Reader, size int64, gz bool, key []byte) (io.Reader, int64, func(), error) {
	r, done := snap, func() {}
	if gz {
		z := gzipReader(r)
		r, size, done = z, -1, func() { z.Close() }
	}
	if key != nil {
		e, err := encryption.Encrypt(r, key)
		if err != nil {
			done()
			return nil, 0, nil, err
		}
		r = e
		if size >= 0 {
			size = encryption.SealedSize(size)
		}
	}
	return r, size, done, nil
}

// progressReader pushes back the idle deadline whenever bytes move, and
// stops it at the end: completing a large upload may take S3 a while.
type progressReader struct {
	r    io.Reader
	idle *time.Timer
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	switch {
	case err == io.EOF:
		p.idle.Stop()
	case n > 0:
		p.idle.Reset(backupIdle)
	}
	return n, err
}

// hashingReader hashes and counts what passes through it.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashingReader) Read(b []byte) (int, error) {
	n, err := h.r.Read(b)
	h.h.Write(b[:n])
	h.n += int64(n)
	return n, err
}

// openSnapshot asks a member for a snapshot through the API server's Pod
// proxy, the path every other question to etcd takes (observe.go), and
// reads the stream's first message, which gives its size. The caller
// closes the reader.
func (c *controller) openSnapshot(ctx context.Context, ns, podName string) (*snapshot.Reader, error) {
	p := etcdPath(ns, podName, c.logins.get(ns, podName).https) + "/v3/maintenance/snapshot"
	actx, err := c.authenticated(ctx, ns, podName, c.logins.token(ns, podName) == "")
	if err != nil {
		return nil, err
	}
	body, err := c.client.Stream(actx, http.MethodPost, p, []byte("{}"), "application/json")
	if err != nil {
		return nil, err
	}
	s, err := snapshot.NewReader(body)
	if err != nil {
		body.Close()
		return nil, fmt.Errorf("snapshot of %s/%s: %w", ns, podName, err)
	}
	return s, nil
}

// gzipReader compresses src as it is read. Closing it stops the
// goroutine that compresses, whether or not everything was read.
func gzipReader(src io.Reader) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		zw, _ := gzip.NewWriterLevel(pw, gzip.BestSpeed)
		_, err := io.Copy(zw, src)
		if err == nil {
			err = zw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}
