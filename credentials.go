// Credentials: the root password rotates on request, and no client that
// holds the old one is cut off.
//
// etcd checks a password only when a client logs in, and every client logs
// in again now and then: when its token expires, and after any change to
// etcd's users, which makes etcd refuse the tokens it gave before
// ("revision of auth store is old"). So a rotation does not change the
// password under the clients. It adds a second user with the root role and
// a new password, points Secret BASE-root at that user, and retires the
// old user only spec.tls.credentialsOverlap later (15m by default): time
// for the kubelet to rewrite the Secret in the Pods that mount it, and for
// clients to read it again. The first user is root, later ones root-HASH
// (of the rotation's value); etcd keeps the user root while authentication
// is on, so retiring root gives it a random password nobody keeps.
//
// A rotation is asked for by setting spec.tls.credentialsRotation to any new
// value (a date, say); the Secret's key rotation records the value its
// credentials answer. The steps, each decided from what the Secret and etcd
// say, so each safe to repeat after a crash (rotateCredentials):
//
//  1. PrepareCredentials: the new user's name and a random password into the
//     Secret's next-username and next-password, before etcd hears of them,
//     so that no crash loses a password etcd has.
//  2. AddUser, then GrantUser: the user in etcd, with the root role.
//  3. SwitchCredentials: the Secret's username and password become the new
//     ones; previous-username and rotated-at say what to retire, and when.
//  4. RetireUser, once the overlap is over: the old user deleted (root: a
//     new random password), and previous-username dropped from the Secret.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"
)

const defaultCredentialsOverlap = 15 * time.Minute

// The keys of Secret BASE-root beyond username, password and ca.crt.
const (
	keyRotation     = "rotation"
	keyNextUser     = "next-username"
	keyNextPassword = "next-password"
	keyPreviousUser = "previous-username"
	keyRotatedAt    = "rotated-at"
)

// credentialsView is what Secret BASE-root says of the root credentials.
type credentialsView struct {
	User     string // whose password the Secret holds: root until a rotation
	Rotation string // the spec.tls.credentialsRotation they answer
	// NextUser and NextPassword: a rotation under way, before its switch.
	NextUser, NextPassword string
	// PreviousUser: the user to retire, RotatedAgo after the switch.
	PreviousUser string
	RotatedAgo   time.Duration
}

func credentialsOf(data map[string][]byte, now time.Time) credentialsView {
	c := credentialsView{User: string(data["username"]), Rotation: string(data[keyRotation]),
		NextUser: string(data[keyNextUser]), NextPassword: string(data[keyNextPassword]), PreviousUser: string(data[keyPreviousUser])}
	if c.User == "" {
		c.User = rootUser
	}
	if at, err := time.Parse(time.RFC3339, string(data[keyRotatedAt])); err == nil {
		c.RotatedAgo = now.Sub(at)
	}
	return c
}

// rotationUser is the user a rotation to value signs in as.
func rotationUser(value string) string {
	sum := sha256.Sum256([]byte(value))
	return rootUser + "-" + hex.EncodeToString(sum[:5])
}

// rotateCredentials takes a TLS cluster with authentication on through a
// rotation, one step a pass (the list above). A new request waits for the
// last rotation's old user to be retired: two users at most.
func (d *decision) rotateCredentials() (step, bool) {
	t, a, v := d.in.Spec.TLS, d.obs.Etcd.Auth, d.tlsView()
	if t == nil || d.tls() == nil || a == nil || !a.Enabled || !v.HasRoot || !d.quorumOK() {
		return step{}, false
	}
	c, sec := v.Creds, rootSecret(d.in.Base)
	var s step
	var msg string
	switch {
	case c.NextUser != "" && !a.NextUser:
		msg = fmt.Sprintf("adding etcd's user %s with the new password in Secret %s (key %s)", c.NextUser, sec, keyNextPassword)
		s = d.etcdStep(actAddUser, "", "", "/v3/auth/user/add", map[string]string{"name": c.NextUser, "password": c.NextPassword})
	case c.NextUser != "" && !a.NextRole:
		msg = fmt.Sprintf("granting etcd's user %s the role root", c.NextUser)
		s = d.etcdStep(actGrantUser, "", "", "/v3/auth/user/grant", map[string]string{"user": c.NextUser, "role": rootUser})
	case c.NextUser != "":
		msg = fmt.Sprintf("switching Secret %s to user %s; %s keeps working for %s", sec, c.NextUser, c.User, t.CredentialsOverlap)
		s = step{Action: actSwitchCredentials, Patch: d.credentialsPatch(map[string]any{"username": c.NextUser, "password": c.NextPassword,
			keyRotation: t.CredentialsRotation, keyPreviousUser: c.User, keyRotatedAt: stamp(d.obs.Now), keyNextUser: nil, keyNextPassword: nil}),
			News: []notice{{eventNormal, reasonCredentialsRotated, fmt.Sprintf("Secret %s now holds user %s; the previous user %s is retired in %s", sec, c.NextUser, c.User, t.CredentialsOverlap)}}}
	case c.PreviousUser != "" && c.RotatedAgo < t.CredentialsOverlap:
		return step{}, false // steady comes back then (credentialsDue)
	case c.PreviousUser != "":
		msg = fmt.Sprintf("retiring etcd's user %s, replaced by %s %s ago", c.PreviousUser, c.User, c.RotatedAgo.Round(time.Second))
		s = d.etcdStep(actRetireUser, "", "", "/v3/auth/user/delete", map[string]string{"name": c.PreviousUser})
		if c.PreviousUser == rootUser {
			s = d.etcdStep(actRetireUser, "", "", "/v3/auth/user/changepw", map[string]string{"name": rootUser})
			s.Etcd.RandomPassword = true
		}
		s.Patch = d.credentialsPatch(map[string]any{keyPreviousUser: nil, keyRotatedAt: nil})
		s.News = []notice{{eventNormal, reasonCredentialsRetired, fmt.Sprintf("etcd's user %s can no longer sign in; Secret %s holds user %s", c.PreviousUser, sec, c.User)}}
	case c.Rotation != t.CredentialsRotation:
		msg = fmt.Sprintf("rotating the root credentials for spec.tls.credentialsRotation %q: a new user and password into Secret %s", t.CredentialsRotation, sec)
		next := rotationUser(t.CredentialsRotation)
		s = step{Action: actPrepareCredentials, Renew: &secretToMake{Kind: secretNextRoot, Name: sec, User: next}}
	default:
		return step{}, false
	}
	return d.progress(d.healthPhase(), reasonRotatingCredentials, msg, s), true
}

// credentialsPatch is a merge patch of Secret BASE-root's data.
func (d *decision) credentialsPatch(data map[string]any) *patch {
	return d.secretPatch(rootSecret(d.in.Base), data)
}

// secretPatch is a merge patch of a Secret's data: null removes a key.
func (d *decision) secretPatch(name string, data map[string]any) *patch {
	for k, v := range data {
		if s, ok := v.(string); ok {
			data[k] = []byte(s) // base64, as a Secret's data is
		}
	}
	return &patch{Path: corePath(d.in.Namespace, "secrets") + "/" + url.PathEscape(name),
		Body: mustJSON(map[string]any{"data": data}), ContentType: "application/merge-patch+json"}
}

// credentialsDue is how soon the previous user is to be retired, 0 if
// none waits.
func (d *decision) credentialsDue() time.Duration {
	t, c := d.in.Spec.TLS, d.tlsView().Creds
	if t == nil || c.PreviousUser == "" {
		return 0
	}
	return max(t.CredentialsOverlap-c.RotatedAgo, time.Second)
}
