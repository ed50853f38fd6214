// Backup schedule: when to back up, kept apart from the control loop.
//
// A backup can take minutes, and the control loop's workers must stay
// free to repair a cluster meanwhile. So each cluster with spec.backup gets
// a goroutine of its own that sleeps until a backup is due, makes it, and
// records it in the status. The control loop only hands it the cluster's
// newest object (update, for every watch event; no request, never
// blocking), and the goroutine learns from it the spec and, after a
// restart, the last backup from the status: the status is the only state.
//
// A backup is due when spec.backup.now holds a value that no backup has
// answered yet (on demand), or when the last backup is spec.backup.schedule
// old. A failure is retried with backoff (10 s, doubling up to 5 min),
// whatever asked for the backup, until the spec changes: a fixed
// spec.backup, or a new spec.backup.now, is tried at once. The status
// says what happened: status.lastBackup is the last success,
// status.backupFailure the last failure until the next success; each
// also makes an Event. The goroutine writes only those two fields, with
// a merge patch, and the control loop's status writes leave them alone.
//
// A backup stopped midway (the operator killed, the cluster deleted)
// leaves at most an unfinished multipart upload, which is no object; the
// next backup of the cluster aborts it first.
package main

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// backupSlots bounds the backups that run at once: each holds a
// connection to a member and one to S3, and a little memory.
const backupSlots = 2

// backups runs each cluster's backup schedule.
type backups struct {
	c     *controller
	ctx   context.Context
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	jobs  map[string]*backupJob // by cluster key
}

type backupJob struct {
	uid    string
	latest chan *EtcdCluster // the newest object; an unread older one is replaced
	cancel context.CancelFunc
}

func newBackups(ctx context.Context, c *controller) *backups {
	return &backups{c: c, ctx: ctx, slots: make(chan struct{}, backupSlots), jobs: map[string]*backupJob{}}
}

// update hands a cluster's newest object to its schedule, which starts
// when spec.backup appears and stops when it goes or the cluster is
// deleted. The control loop calls it for every cluster event.
func (b *backups) update(ec *EtcdCluster) {
	if spec, _ := parseSpec(ec.Spec); ec.Metadata.DeletionTimestamp != "" || spec.Backup == nil && spec.BackupErr == nil {
		b.remove(ec)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	j := b.jobs[ec.key()]
	if j != nil && j.uid != ec.Metadata.UID { // a new cluster under the old name
		j.cancel()
		j = nil
	}
	if j == nil {
		ctx, cancel := context.WithCancel(b.ctx)
		j = &backupJob{uid: ec.Metadata.UID, latest: make(chan *EtcdCluster, 1), cancel: cancel}
		b.jobs[ec.key()] = j
		b.wg.Go(func() { b.run(ctx, j) })
	}
	select {
	case <-j.latest:
	default:
	}
	j.latest <- ec
}

// remove stops a cluster's schedule; a backup under way is aborted.
func (b *backups) remove(ec *EtcdCluster) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if j := b.jobs[ec.key()]; j != nil {
		j.cancel()
		delete(b.jobs, ec.key())
	}
}

// stop stops every schedule and waits until their uploads are aborted.
func (b *backups) stop() {
	b.mu.Lock()
	for key, j := range b.jobs {
		j.cancel()
		delete(b.jobs, key)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// merge takes from a status what is newer than what the schedule knows:
// the watch may deliver an object older than the schedule's own writes.
func (s *backupStatus) merge(st backupStatus) {
	if st.Last != nil && (s.Last == nil || parseTime(st.Last.Time).After(parseTime(s.Last.Time))) {
		s.Last = st.Last
	}
	if st.Failure != nil && (s.Failure == nil || parseTime(st.Failure.Time).After(parseTime(s.Failure.Time))) {
		s.Failure = st.Failure
	}
}

// failing reports the failure that is newer than the last success, if any.
func (s *backupStatus) failing() *backupFailure {
	if s.Failure == nil || s.Last != nil && !parseTime(s.Failure.Time).After(parseTime(s.Last.Time)) {
		return nil
	}
	return s.Failure
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339, s)
	return t
}

// backupRetryDelay is the wait after attempts failures in a row.
func backupRetryDelay(attempts int) time.Duration {
	return min(10*time.Second<<min(max(attempts-1, 0), 10), 5*time.Minute)
}

// backupDue says whether a backup is due at now for the spec of the
// given generation, and if not how long until one is (0: none is asked
// for). A failure under the same generation delays the next try.
func backupDue(spec *backupSpec, st *backupStatus, generation int64, now time.Time) (bool, time.Duration) {
	var at time.Time // zero: at once
	asked := spec.Now != "" && (st.Last == nil || st.Last.Now != spec.Now)
	if spec.interval > 0 {
		next := time.Time{}
		if st.Last != nil {
			next = parseTime(st.Last.Time).Add(spec.interval)
		}
		if !asked {
			at = next
		}
		asked = true
	}
	if !asked {
		return false, 0
	}
	if f := st.failing(); f != nil && f.Generation == generation {
		if retry := parseTime(f.Time).Add(backupRetryDelay(f.Attempts)); retry.After(at) {
			at = retry
		}
	}
	if !at.After(now) {
		return true, 0
	}
	return false, at.Sub(now)
}

// run is one cluster's schedule: wait for news or for the next backup.
func (b *backups) run(ctx context.Context, j *backupJob) {
	var ec *EtcdCluster
	var st backupStatus
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ec = <-j.latest:
			_, latest := readStatus(ec.Status)
			st.merge(latest)
		case <-timer.C:
		}
		if wait, ok := b.step(ctx, ec, &st); ok {
			timer.Reset(wait)
		}
	}
}

// step makes a backup if one is due, and says when to look again (ok
// false: only when the object changes).
func (b *backups) step(ctx context.Context, ec *EtcdCluster, st *backupStatus) (time.Duration, bool) {
	all, _ := parseSpec(ec.Spec)
	spec, err := all.Backup, all.BackupErr
	if spec == nil && err == nil {
		return 0, false // spec.backup is gone; update stops this schedule
	}
	if err != nil {
		if err.Error() != st.specError {
			st.specError = err.Error()
			b.failed(ctx, ec, st, err)
		}
		return 0, false
	}
	st.specError = ""
	due, wait := backupDue(spec, st, ec.Metadata.Generation, time.Now())
	if !due {
		return wait, wait > 0
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	rec, err := b.c.backupCluster(ctx, ec, spec)
	<-b.slots
	switch {
	case ctx.Err() != nil: // stopped: the next operator starts again
	case err != nil:
		b.failed(ctx, ec, st, err)
	default:
		b.succeeded(ctx, ec, spec, st, rec)
	}
	return 0, true // look again at once: another may be due
}

func (b *backups) succeeded(ctx context.Context, ec *EtcdCluster, spec *backupSpec, st *backupStatus, rec backupRecord) {
	st.Last, st.Failure = &rec, nil
	b.c.log.Info("backup made", "cluster", ec.key(), "key", rec.Key, "size", rec.Size, "revision", rec.Revision, "duration", rec.Duration)
	b.c.events.record(ec, eventNormal, "BackedUp", "backup "+spec.S3.Bucket+"/"+rec.Key+" of revision "+strconv.FormatInt(rec.Revision, 10)+": "+strconv.FormatInt(rec.Size, 10)+" bytes in "+rec.Duration)
	b.writeStatus(ctx, ec, map[string]any{"lastBackup": rec, "backupFailure": nil})
	store, err := b.c.s3For(ctx, ec.Metadata.Namespace, spec.S3)
	if err == nil {
		var deleted []string
		deleted, err = prune(ctx, store, backupPrefix(spec, ec.Metadata.Namespace, ec.Metadata.Name), spec.keep, rec.Key)
		for _, k := range deleted {
			b.c.log.Info("old backup deleted", "cluster", ec.key(), "key", k)
		}
	}
	if err != nil && ctx.Err() == nil {
		b.c.log.Warn("retention failed", "cluster", ec.key(), "err", err)
		b.c.events.record(ec, eventWarning, "BackupRetentionFailed", "deleting old backups: "+err.Error())
	}
}

func (b *backups) failed(ctx context.Context, ec *EtcdCluster, st *backupStatus, err error) {
	attempts := 1
	if f := st.failing(); f != nil && f.Generation == ec.Metadata.Generation {
		attempts = f.Attempts + 1
	}
	st.Failure = &backupFailure{Time: time.Now().UTC().Format(time.RFC3339), Message: err.Error(), Attempts: attempts, Generation: ec.Metadata.Generation}
	b.c.log.Warn("backup failed", "cluster", ec.key(), "attempts", attempts, "retryIn", backupRetryDelay(attempts), "err", err)
	b.c.events.record(ec, eventWarning, "BackupFailed", err.Error())
	b.writeStatus(ctx, ec, map[string]any{"backupFailure": st.Failure})
}

// writeStatus records the backup's fields in the status (patchStatus).
func (b *backups) writeStatus(ctx context.Context, ec *EtcdCluster, fields map[string]any) {
	if err := b.c.patchStatus(ctx, ec, fields); err != nil {
		b.c.log.Warn("recording the backup in the status failed", "cluster", ec.key(), "err", err)
	}
}
