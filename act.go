// Act: one step, as ordinary API requests.
//
// decide (decide.go) has already said everything: which objects to create
// with which JSON, which member to add, promote or remove, which Pod to
// delete or give a new image. act only sends it, and treats "already done"
// as done: a step repeated after a crash finds its object created (409
// AlreadyExists, and this EtcdCluster is its controller) or etcd's member
// already added or removed, and moves on. That is what makes every step
// safe to repeat.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/kube"
)

// outcome says how a step went when it did not fail.
type outcome int

const (
	stepDone   outcome = iota // the step happened now
	stepNoop                  // an earlier pass had done it already
	stepNotYet                // etcd refused for now (a learner not caught up): look again later
)

// act sends one step's requests.
func (c *controller) act(ctx context.Context, s step) (outcome, error) {
	log := c.log.With("cluster", s.Namespace+"/"+s.Cluster)
	switch {
	case len(s.Create) > 0:
		return c.createAll(ctx, log, s)
	case s.Etcd != nil:
		out, err := c.changeMembers(ctx, log, s)
		if err != nil || s.Patch == nil {
			return out, err
		}
		return c.patch(ctx, log, s) // then, for RetireUser, the Secret
	case s.Delete != "":
		if err := c.delete(ctx, log, s.Namespace, s.Delete, s.Member); err != nil {
			return stepDone, err
		}
		c.cache.awaitWrite(s.Namespace, s.Cluster, s.Delete, s.Member, pendingWrite{gone: true})
		return stepDone, nil
	case s.Renew != nil:
		return c.renewSecret(ctx, log, s)
	case s.Patch != nil:
		return c.patch(ctx, log, s)
	}
	return stepDone, fmt.Errorf("step %q sends nothing", s.Action)
}

// patch sends the step's PATCH.
func (c *controller) patch(ctx context.Context, log *slog.Logger, s step) (outcome, error) {
	if _, err := c.client.Do(ctx, http.MethodPatch, s.Patch.Path, s.Patch.Body, s.Patch.ContentType); err != nil {
		return stepDone, fmt.Errorf("%s %s: %w", patchFailed[s.Action], s.Member, err)
	}
	switch s.Action {
	case actUpgrade:
		c.cache.awaitWrite(s.Namespace, s.Cluster, "pods", s.Member, pendingWrite{uid: s.Owner, image: s.Image})
	case actExpandVolume:
		c.cache.awaitWrite(s.Namespace, s.Cluster, "persistentvolumeclaims", s.Member, pendingWrite{uid: s.Owner, size: s.Size})
	}
	log.Info(patched[s.Action], "member", s.Member, "image", s.Image)
	return stepDone, nil
}

// createAll creates the step's objects in order (Services before Pods). It
// is done if it created anything, a no-op if every object existed.
func (c *controller) createAll(ctx context.Context, log *slog.Logger, s step) (outcome, error) {
	out := stepNoop
	for _, o := range s.Create {
		if o.Secret != nil {
			var err error
			if o.Body, err = o.Secret.body(time.Now()); err != nil {
				return stepDone, err
			}
		}
		created, err := c.create(ctx, log, s.Namespace, s.Owner, o)
		if err != nil {
			return stepDone, err
		}
		if o.Resource == "secrets" {
			continue // read with a LIST each pass (observeTLS), not watched
		}
		c.cache.awaitWrite(s.Namespace, s.Cluster, o.Resource, o.Name, pendingWrite{uid: s.Owner})
		if created {
			out = stepDone
		}
	}
	return out, nil
}

// changeMembers sends a membership request to the leader's JSON gateway.
// etcd's own refusals tell a step already taken from one not possible yet.
func (c *controller) changeMembers(ctx context.Context, log *slog.Logger, s step) (outcome, error) {
	body := s.Etcd.Body
	if s.Etcd.RandomPassword {
		pw, err := newPassword()
		if err != nil {
			return stepDone, err
		}
		b := maps.Clone(s.Etcd.Body.(map[string]string))
		b["password"] = pw
		body = b
	}
	err := c.etcd(ctx, s.Namespace, s.Etcd.Pod, s.Etcd.Path, body, nil)
	switch {
	case s.Action == actAddMember && etcdRefused(err, "already exists"),
		(s.Action == actAddRootUser || s.Action == actAddUser) && etcdRefused(err, "user name already exists"),
		s.Action == actRetireUser && etcdRefused(err, "user name not found"),
		s.Action == actPromote && etcdRefused(err, "can only promote a learner member"),
		s.Action == actRemoveMember && etcdRefused(err, "member not found"):
		return stepNoop, nil // an earlier pass did it: the next look sees it
	case s.Action == actPromote && etcdRefused(err, "in sync with leader"):
		log.Info("learner not caught up yet; trying again", "member", s.Member)
		return stepNotYet, nil
	case err != nil:
		return stepDone, fmt.Errorf("%s: %w", fmt.Sprintf(membershipChange[s.Action].failed, s.Member), err)
	}
	log.Info(membershipChange[s.Action].done, "member", s.Member)
	return stepDone, nil
}

// patched says what each PATCH did.
var patched = map[string]string{
	actUpgrade:      "member image changed; the kubelet restarts it",
	actMarkFormed:   "cluster ID recorded in the EtcdCluster's annotations",
	actExpandVolume: "volume claim asked to grow; its StorageClass's provisioner resizes it",
	// Secret BASE-root (credentials.go):
	actSwitchCredentials: "root credentials switched to the new user",
	actRetireUser:        "previous root user forgotten",
	// Secret BASE-ca (carotation.go):
	actSwitchCA: "the new CA issues the members' certificates from now on",
	actRetireCA: "the previous CA retired",
	actTrustCA:  "the CAs to trust written into the root credentials' Secret",
}

// patchFailed names each PATCH in its error.
var patchFailed = map[string]string{
	actUpgrade:           "change the image of member",
	actMarkFormed:        "record in the EtcdCluster the cluster ID",
	actExpandVolume:      "grow volume claim",
	actSwitchCredentials: "switch the root credentials in their Secret",
	actRetireUser:        "forget the previous root user in the credentials' Secret",
	actSwitchCA:          "switch to the new CA in its Secret",
	actRetireCA:          "retire the previous CA in its Secret",
	actTrustCA:           "write the CAs to trust into the root credentials' Secret",
}

// membershipChange says what each etcd request did, or failed to do.
var membershipChange = map[string]struct{ done, failed string }{
	actAddMember:    {"member added to etcd as a learner", "add member %s to etcd"},
	actPromote:      {"learner promoted to a voting member", "promote member %s"},
	actRemoveMember: {"member removed from etcd", "remove member %s from etcd"},
	actMoveLeader:   {"leadership handed over", "hand leadership to %s"},
	actAddRootUser:  {"etcd's user root added", "add etcd's user root%s"},
	actGrantRoot:    {"etcd's user root granted the role root", "grant etcd's user root the role root%s"},
	actEnableAuth:   {"etcd's authentication turned on", "turn on etcd's authentication%s"},
	actAddUser:      {"etcd user added for the root credentials' rotation", "add etcd's user for the rotation%s"},
	actGrantUser:    {"etcd user granted the role root", "grant the rotation's user the role root%s"},
	actRetireUser:   {"previous root user retired in etcd", "retire the previous root user%s"},
}

// renewSecret writes new keys into a Secret (a member's certificate and
// key, or a rotation's next credentials): a JSON merge patch of its data,
// so that nothing else in it changes.
func (c *controller) renewSecret(ctx context.Context, log *slog.Logger, s step) (outcome, error) {
	_, data, err := s.Renew.data(time.Now())
	if err != nil {
		return stepDone, fmt.Errorf("make new keys for secret %s: %w", s.Renew.Name, err)
	}
	p := corePath(s.Namespace, "secrets") + "/" + url.PathEscape(s.Renew.Name)
	if _, err := c.client.Do(ctx, http.MethodPatch, p, mustJSON(map[string]any{"data": data}), "application/merge-patch+json"); err != nil {
		return stepDone, fmt.Errorf("write new keys into secret %s: %w", s.Renew.Name, err)
	}
	switch s.Renew.Kind {
	case secretNextRoot:
		log.Info("new root credentials prepared", "secret", s.Renew.Name, "user", s.Renew.User)
		return stepDone, nil
	case secretNextCA:
		log.Info("new CA prepared", "secret", s.Renew.Name)
		return stepDone, nil
	}
	log.Info("certificate renewed", "secret", s.Renew.Name)
	return stepDone, nil
}

// delete deletes one object; one already gone counts as deleted.
func (c *controller) delete(ctx context.Context, log *slog.Logger, ns, resource, name string) error {
	object := strings.TrimSuffix(resource, "s") + "/" + name
	_, err := c.client.Do(ctx, http.MethodDelete, "/api/v1/namespaces/"+url.PathEscape(ns)+"/"+resource+"/"+url.PathEscape(name), nil, "")
	if err != nil && !kube.IsStatus(err, http.StatusNotFound) {
		return fmt.Errorf("delete %s: %w", object, err)
	}
	log.Info("deleted", "object", object)
	return nil
}

// create POSTs one object. 409 AlreadyExists counts as done, but only once a
// GET shows that this EtcdCluster (uid owner) is the object's controller: a
// name taken by something else (or by a deleted cluster's objects that the
// garbage collector has not removed yet) is an error, retried later.
func (c *controller) create(ctx context.Context, log *slog.Logger, ns, owner string, o object) (bool, error) {
	collection := "/api/v1/namespaces/" + url.PathEscape(ns) + "/" + o.Resource
	name := strings.TrimSuffix(o.Resource, "s") + "/" + o.Name
	_, err := c.client.Do(ctx, http.MethodPost, collection, o.Body, "application/json")
	if err == nil {
		log.Info("created", "object", name)
		return true, nil
	}
	if !kube.IsStatus(err, http.StatusConflict) {
		return false, fmt.Errorf("create %s: %w", name, err)
	}
	existing, err := c.client.Do(ctx, http.MethodGet, collection+"/"+url.PathEscape(o.Name), nil, "")
	if err != nil {
		return false, fmt.Errorf("create %s: it exists, and reading it failed: %w", name, err)
	}
	var meta struct {
		Metadata struct {
			OwnerReferences []ownerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(existing, &meta)
	for _, ref := range meta.Metadata.OwnerReferences {
		if ref.Controller && ref.UID == owner {
			log.Info("already exists", "object", name)
			return false, nil
		}
	}
	return false, fmt.Errorf("create %s: %w", name, errNameTaken)
}

var errNameTaken = errors.New("the name is taken by an object this EtcdCluster does not own")
