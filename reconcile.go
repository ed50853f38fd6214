// Reconcile: one pass over one cluster, observe -> decide -> act -> report.
//
// A worker takes a cluster from the queue and runs a pass: it observes what
// exists (observe.go), asks decide (decide.go) for the status and the one
// next step, takes the step (act.go) and reports (report.go). While each
// step leads straight to the next (a member removed, then its Pod, then its
// Service), the pass goes on; a step that waits for something Kubernetes
// announces (Pods starting) ends it, and the watch brings the next event.
// A pass that dies after any request is simply followed by another that
// observes what the first left and decides again.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

// maxSteps bounds the steps of one pass; a pass that reaches it is
// followed by another soon.
const maxSteps = 8

// work is one worker: it takes clusters from the queue until it shuts down.
func (c *controller) work(ctx context.Context, q *queue) {
	for {
		it, ok := q.get()
		if !ok {
			return
		}
		ec, again, err := c.handle(ctx, it)
		failures, requeued := q.done(it, ec, err)
		switch {
		case requeued || ctx.Err() != nil:
		case err != nil:
			d := retryDelay(failures)
			c.log.Info("retrying later", "cluster", it.cluster.key(), "in", d, "failures", failures)
			q.addAfter(item{cluster: it.cluster, refresh: true}, d)
		case again > 0:
			q.addAfter(item{cluster: it.cluster, refresh: true}, again)
		}
	}
}

// handle reconciles one queued cluster, first reading it again if asked.
// It returns the object it acted on (nil if the cluster is gone) and when
// to look again without an event (0: not unless something changes).
func (c *controller) handle(ctx context.Context, it item) (*EtcdCluster, time.Duration, error) {
	ec := it.cluster
	if it.refresh {
		b, err := c.client.Do(ctx, http.MethodGet, clustersPath(ec.Metadata.Namespace)+"/"+url.PathEscape(ec.Metadata.Name), nil, "")
		if kube.IsStatus(err, http.StatusNotFound) {
			c.log.Debug("cluster is gone; nothing to do", "cluster", ec.key())
			return nil, 0, nil
		}
		if err != nil {
			return ec, 0, fmt.Errorf("read %s again: %w", ec.key(), err)
		}
		if ec, err = decodeCluster(b); err != nil {
			return nil, 0, fmt.Errorf("read %s again: %w", it.cluster.key(), err)
		}
	} else if settled(ec) {
		return ec, 0, nil
	}
	again, err := c.reconcile(ctx, ec)
	return ec, again, err
}

// reconcile is the pass. It writes the status only when it changed: a
// healthy cluster costs nothing but the observation.
func (c *controller) reconcile(ctx context.Context, ec *EtcdCluster) (time.Duration, error) {
	log := c.log.With("cluster", ec.key())
	in := newInput(ec, c.image)
	in.OperatorImage, in.SecretSync = c.operatorImage, c.secretSync
	var restore *restoreCheck
	if in.needsRestoreCheck() {
		restore = c.checkBackup(ctx, ec.Metadata.Namespace, in.Spec.Restore)
	}
	for range maxSteps {
		var obs observed
		if in.Invalid == "" {
			var err error
			if obs, err = c.observe(ctx, ec, in); err != nil {
				st, news := failed(in.Prev, "cannot look at the cluster", err)
				return 0, c.report(ctx, ec, in.Prev, st, news, err)
			}
		}
		obs.Restore = restore
		st, s := decide(in, obs)
		if s.Action == actNone {
			if st.Phase != in.Prev.Phase {
				log.Info("cluster is "+st.Phase, "ready", st.Ready, "message", st.Message)
			}
			return s.Again, c.report(ctx, ec, in.Prev, st, s.News, nil)
		}
		if c.gone(ec) {
			return 0, nil // deleted meanwhile: its objects go with it
		}
		again, more, err := c.carryOut(ctx, log, ec, &in, st, s)
		if !more || err != nil {
			return again, err
		}
	}
	return pollAgain, nil
}

// carryOut acts on one step and reports it; more says whether the pass
// goes on to look again. in.Prev becomes the status just written.
func (c *controller) carryOut(ctx context.Context, log *slog.Logger, ec *EtcdCluster, in *input, st clusterStatus, s step) (again time.Duration, more bool, err error) {
	log.Info("step", "action", s.Action, "member", s.Member, "why", st.Message)
	out, err := c.act(ctx, s)
	if err != nil {
		st, news := failed(st, st.Message, err)
		return 0, false, c.report(ctx, ec, in.Prev, st, news, err)
	}
	news := s.News
	if out != stepDone {
		news = nil
	}
	if err := c.report(ctx, ec, in.Prev, st, news, nil); err != nil {
		return 0, false, err
	}
	in.Prev = st
	if s.Action == actMarkFormed {
		in.FormedID = st.ClusterID
	}
	switch {
	case out == stepNotYet:
		return s.Again, false, nil
	case s.Last:
		return 0, false, nil
	}
	return 0, true, nil
}

// report is the one place that tells users: it records decide's Events and
// writes the status if it says something the last one did not. A failed
// observation or step (failure) is logged and returned after its report,
// for the queue to retry.
func (c *controller) report(ctx context.Context, ec *EtcdCluster, prev, st clusterStatus, news []notice, failure error) error {
	if failure != nil && ctx.Err() != nil || c.gone(ec) {
		return failure
	}
	if failure != nil {
		c.log.Error("step failed; will retry", "cluster", ec.key(), "err", failure)
	}
	for _, n := range news {
		if n.Type == eventWarning && failure == nil {
			c.log.Warn(n.Reason, "cluster", ec.key(), "message", n.Message)
		}
		c.events.record(ec, n.Type, n.Reason, n.Message)
	}
	st.stampTransitions(time.Now())
	var err error
	if !jsonEqual(prev, st) {
		err = c.patchStatus(ctx, ec, statusPatch(prev, st))
	}
	if failure != nil {
		return failure
	}
	return err
}

func jsonEqual(a, b any) bool { return string(mustJSON(a)) == string(mustJSON(b)) }

// statusPatch is the merge patch from prev to st. A merge patch keeps
// every field it does not name, so a field of prev that st leaves out
// (empty, with omitempty) is named as null, which removes it.
func statusPatch(prev, st clusterStatus) map[string]any {
	var p, s map[string]any
	_ = json.Unmarshal(mustJSON(prev), &p)
	_ = json.Unmarshal(mustJSON(st), &s)
	nullsFor(p, s)
	return s
}

// nullsFor sets to null in next each key of prev it lacks, in nested
// objects too; lists are replaced whole by a merge patch.
func nullsFor(prev, next map[string]any) {
	for k, pv := range prev {
		nv, ok := next[k]
		if !ok {
			next[k] = nil
			continue
		}
		pm, pok := pv.(map[string]any)
		nm, nok := nv.(map[string]any)
		if pok && nok {
			nullsFor(pm, nm)
		}
	}
}
