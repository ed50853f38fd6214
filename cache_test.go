// Tests of the cache and its expectations: when a pass may read what the
// watches delivered, and when it must wait or list instead.
package main

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// A pass reads the cache only when both watches have listed and every
// change the operator sent for its cluster shows; a step that failed sends
// the next pass to a list of its own.
func TestCacheExpectations(t *testing.T) {
	const owner = "uid-example"
	uid := uidKey(owner)
	pod := func(name string) cachedPod { return memberPod("example", name, true).Pod }
	deleting := pod("example-1")
	deleting.view.Deleting = true
	upgraded := pod("example-1")
	upgraded.view.Image = repo + ":v3.7.3"
	listedWith := func(c *cache, pods []cachedPod, svcs ...string) {
		c.listing("pods")
		c.listing("services")
		for _, p := range pods {
			c.setPod("ADDED", uid, p)
		}
		for _, s := range svcs {
			c.setService("ADDED", uid, s)
		}
		c.listed("pods")
		c.listed("services")
	}
	listed := func(c *cache) {
		listedWith(c, []cachedPod{pod("example-0"), pod("example-1")}, "example-0", "example-1")
	}
	create := step{Create: []object{{"services", "example-2", nil}, {"pods", "example-2", nil}}}
	deletePod := step{Member: "example-1", Delete: "pods"}
	deleteSvc := step{Member: "example-1", Delete: "services"}
	upgrade := step{Action: actUpgrade, Member: "example-1", Image: repo + ":v3.7.3", Patch: &patch{}}
	for _, tc := range []struct {
		name string
		do   func(c *cache)
		want error
	}{
		{"nothing listed", func(c *cache) {}, errNotListed},
		{"only the Pods listed", func(c *cache) { c.listing("pods"); c.listed("pods") }, errNotListed},
		{"a relist under way", func(c *cache) { listed(c); c.listing("services") }, errNotListed},
		{"both listed", listed, nil},
		{"a create not shown yet", func(c *cache) { listed(c); c.expect(uid, create) }, errLagging},
		{"a create shown in part", func(c *cache) {
			listed(c)
			c.expect(uid, create)
			c.setService("ADDED", uid, "example-2")
		}, errLagging},
		{"a create shown", func(c *cache) {
			listed(c)
			c.expect(uid, create)
			c.setService("ADDED", uid, "example-2")
			c.setPod("ADDED", uid, pod("example-2"))
		}, nil},
		{"a create shown, then deleted by someone else", func(c *cache) {
			listed(c)
			c.expect(uid, create)
			c.setService("ADDED", uid, "example-2")
			c.setPod("ADDED", uid, pod("example-2"))
			c.setPod("DELETED", uid, pod("example-2"))
		}, nil},
		{"a create of objects the cache holds", func(c *cache) {
			listedWith(c, []cachedPod{pod("example-2")}, "example-2")
			c.expect(uid, create)
		}, nil},
		{"a create shown by a relist", func(c *cache) {
			listed(c)
			c.expect(uid, create)
			listedWith(c, []cachedPod{pod("example-2")}, "example-2")
		}, nil},
		{"a Pod delete not shown yet", func(c *cache) { listed(c); c.expect(uid, deletePod) }, errLagging},
		{"a Pod delete shown by its deletionTimestamp", func(c *cache) {
			listed(c)
			c.expect(uid, deletePod)
			c.setPod("MODIFIED", uid, deleting)
		}, nil},
		{"a Pod delete shown by DELETED", func(c *cache) {
			listed(c)
			c.expect(uid, deletePod)
			c.setPod("DELETED", uid, pod("example-1"))
		}, nil},
		{"a Service delete not shown yet", func(c *cache) { listed(c); c.expect(uid, deleteSvc) }, errLagging},
		{"a Service delete shown", func(c *cache) {
			listed(c)
			c.expect(uid, deleteSvc)
			c.setService("DELETED", uid, "example-1")
		}, nil},
		{"a Service delete shown by a relist", func(c *cache) {
			listed(c)
			c.expect(uid, deleteSvc)
			listedWith(c, nil, "example-0")
		}, nil},
		{"a delete of an object already gone", func(c *cache) {
			listedWith(c, nil)
			c.expect(uid, deletePod)
			c.expect(uid, deleteSvc)
		}, nil},
		{"a new image not shown yet", func(c *cache) { listed(c); c.expect(uid, upgrade) }, errLagging},
		{"a new image shown", func(c *cache) {
			listed(c)
			c.expect(uid, upgrade)
			c.setPod("MODIFIED", uid, upgraded)
		}, nil},
		{"another cluster's create", func(c *cache) { listed(c); c.expect(uidKey("uid-other"), create) }, nil},
		{"a step failed", func(c *cache) { listed(c); c.expect(uid, create); c.distrust(uid) }, errDistrust},
		{"a step failed, and the pass's own list shows its create", func(c *cache) {
			listed(c)
			c.expect(uid, create)
			c.distrust(uid)
			c.checked(uid, []cachedPod{pod("example-2")}, []string{"example-2"})
		}, errLagging},
		{"a step failed, and the pass's own list shows nothing created", func(c *cache) {
			listed(c)
			c.expect(uid, create)
			c.distrust(uid)
			c.checked(uid, []cachedPod{pod("example-0")}, []string{"example-0"})
		}, nil},
		{"the cluster deleted", func(c *cache) { listed(c); c.expect(uid, create); c.forget(uid) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache()
			tc.do(c)
			_, _, err := c.read(context.Background(), uid, 0, func(error) {})
			if !errors.Is(err, tc.want) {
				t.Errorf("read: %v, want %v", err, tc.want)
			}
		})
	}
}

// A read returns the cluster's own objects, sorted, as copies; a relist
// drops what the new list does not hold, and a cluster that holds nothing
// leaves no entry behind.
func TestCacheRead(t *testing.T) {
	c := newCache()
	uid, other := uidKey("uid-example"), uidKey("uid-other")
	c.listing("pods")
	c.listing("services")
	for _, name := range []string{"example-1", "example-0"} {
		c.setPod("ADDED", uid, memberPod("example", name, true).Pod)
		c.setService("ADDED", uid, name)
	}
	c.setPod("ADDED", other, memberPod("other", "other-0", true).Pod)
	c.listed("pods")
	c.listed("services")
	names := func(pods []cachedPod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.view.Name)
		}
		return out
	}
	pods, svcs, err := c.read(context.Background(), uid, 0, func(error) {})
	if want := []string{"example-0", "example-1"}; err != nil || !slices.Equal(names(pods), want) || !slices.Equal(svcs, want) {
		t.Fatalf("read = %v, %v, %v; want Pods and Services %v", names(pods), svcs, err, want)
	}
	pods[0].view.Ready = false
	if ready, seen := c.ready(uid, "example-0"); !ready || !seen {
		t.Error("changing what read returned changed the cache")
	}

	c.listing("pods")
	c.setPod("ADDED", uid, memberPod("example", "example-1", false).Pod)
	c.listed("pods")
	if _, seen := c.ready(uid, "example-0"); seen {
		t.Error("a Pod the relist did not hold is still in the cache")
	}
	if ready, seen := c.ready(uid, "example-1"); ready || !seen {
		t.Errorf("example-1 after the relist: ready %v, seen %v; want seen, not ready", ready, seen)
	}
	if _, ok := c.owners[other]; ok {
		t.Error("a cluster with nothing left in the cache keeps an entry")
	}
}
