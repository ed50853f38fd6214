package e2e

// The loaders: what the operator is measured against. The objects loader
// POSTs the Pods and Services the operator made, taken back from the API
// server and retargeted to a new namespace; the requests loader sends, per
// cluster, exactly the requests the operator sends for a new one (the
// EtcdCluster, two lists, the 7 objects, a status write). Both go through
// the same kubectl proxy and counting proxy as the operator.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// loadBare POSTs the operator's objects into ns, p at a time, owned by
// EtcdClusters of the same names made beforehand (no operator watches ns).
func (b *bench) loadBare(ns string, p int) (time.Duration, error) {
	owners, err := ownersIn(b.cp, ns, b.names)
	if err != nil {
		return 0, err
	}
	reqs := retarget(b.objects, ns, owners)
	return timeObjects(b.cp, ns, len(reqs), func() error {
		return parallel(p, len(reqs), func(i int) error { return post(b.proxy.url, reqs[i]) })
	})
}

// loadSame sends, for each cluster, p clusters at a time, what the
// operator sends for a new one: the EtcdCluster (the harness's POST in
// the operator's case), a list of its Pods and of its Services, its 7
// objects, then a status write.
func (b *bench) loadSame(ns string, p int) (time.Duration, error) {
	byCluster := map[string][]map[string]any{}
	for _, o := range b.objects {
		c := o["metadata"].(map[string]any)["labels"].(map[string]any)["etcd.coreos.com/cluster"].(string)
		byCluster[c] = append(byCluster[c], o)
	}
	return timeObjects(b.cp, ns, b.r.Objects, func() error {
		return parallel(p, len(b.names), func(i int) error {
			return sameRequests(b.cp, b.proxy.url, ns, b.names[i], byCluster[b.names[i]], true)
		})
	})
}

// sameRequests sends what the operator sends for a new cluster named
// name: its objects, and with status its status write. No read: the
// operator observes from its watches' cache.
func sameRequests(cp *ControlPlane, base, ns, name string, objects []map[string]any, status bool) error {
	uid, err := cp.ApplyCluster(Cluster{Namespace: ns, Name: name, Size: 3, EmptyDir: true, Via: cp.ProxyURL})
	if err != nil {
		return err
	}
	for _, req := range retarget(objects, ns, map[string]string{name: uid}) {
		if err := post(base, req); err != nil {
			return err
		}
	}
	if !status {
		return nil
	}
	return DoJSON(proxyClient, "PATCH", base+"/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/"+name+"/status", []byte(createdStatus(name)), 200, nil)
}

// createdStatus is a status that needs no pass: it waits for members to
// start and lists none (a status that listed members whose Pods do not
// exist would rightly send the operator to look).
func createdStatus(name string) string {
	return fmt.Sprintf(`{"status":{"phase":"Creating","message":"benchmark %s","ready":"0/3","readyMembers":0,"members":[],`+
		`"conditions":[{"type":"Available","status":"False","reason":"NotStarted","message":"benchmark","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1},`+
		`{"type":"Progressing","status":"True","reason":"WaitingForMembers","message":"benchmark","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1}],`+
		`"observedGeneration":1}}`, name)
}

// createCreatedCluster makes a cluster whose status says nothing is to be
// done but wait, as after a restart; the operator must leave it alone.
func createCreatedCluster(cp *ControlPlane, ns, name string) error {
	if _, err := cp.ApplyCluster(Cluster{Namespace: ns, Name: name, Size: 3, EmptyDir: true, Via: cp.ProxyURL}); err != nil {
		return err
	}
	return DoJSON(proxyClient, "PATCH", cp.ProxyURL+"/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters/"+name+"/status", []byte(createdStatus(name)), 200, nil)
}

// objectsOf returns the Pods and Services of ns (of one cluster when
// cluster is set), as the server stores them.
func objectsOf(cp *ControlPlane, ns, cluster string) ([]map[string]any, error) {
	sel := ""
	if cluster != "" {
		sel = "?labelSelector=etcd.coreos.com%2Fcluster%3D" + cluster
	}
	var all []map[string]any
	for _, res := range []string{"services", "pods"} {
		var l struct{ Items []map[string]any }
		if err := cp.Get("/api/v1/namespaces/"+ns+"/"+res+sel, &l); err != nil {
			return nil, err
		}
		for _, item := range l.Items {
			item["kind"] = map[string]string{"services": "Service", "pods": "Pod"}[res]
			item["apiVersion"] = "v1"
		}
		all = append(all, l.Items...)
	}
	return all, nil
}

// objectsOfCluster takes the objects of cluster from objs and renames them
// (names, labels, owners, --initial-cluster) for a cluster named name.
func objectsOfCluster(objs []map[string]any, cluster, name string) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o["metadata"].(map[string]any)["labels"].(map[string]any)["etcd.coreos.com/cluster"] != cluster {
			continue
		}
		b, _ := json.Marshal(o)
		s := strings.ReplaceAll(string(b), `"`+cluster, `"`+name)
		s = strings.ReplaceAll(s, "="+cluster, "="+name)
		s = strings.ReplaceAll(s, ","+cluster, ","+name)
		s = strings.ReplaceAll(s, "//"+cluster, "//"+name)
		s = strings.ReplaceAll(s, "."+cluster, "."+name)
		var c map[string]any
		_ = json.Unmarshal([]byte(s), &c)
		out = append(out, c)
	}
	return out
}

// ownersIn creates EtcdClusters of the same names in ns (which no operator
// watches) and returns their uids, so that the loader's objects carry the
// same kind of ownerReferences as the operator's.
func ownersIn(cp *ControlPlane, ns string, names []string) (map[string]string, error) {
	uids := map[string]string{}
	var mu sync.Mutex
	err := parallel(workers, len(names), func(i int) error {
		uid, err := cp.ApplyCluster(Cluster{Namespace: ns, Name: names[i], Size: 3, EmptyDir: true, Via: cp.ProxyURL})
		mu.Lock()
		uids[names[i]] = uid
		mu.Unlock()
		return err
	})
	return uids, err
}

type postReq struct {
	path string
	body []byte
}

// retarget turns stored objects back into create requests for ns: only what
// the operator sent (name, labels, ownerReferences, spec), owners remapped.
func retarget(objs []map[string]any, ns string, owners map[string]string) []postReq {
	var reqs []postReq
	for _, o := range objs {
		meta := o["metadata"].(map[string]any)
		var refs []any
		for _, ref := range meta["ownerReferences"].([]any) {
			ref := shallow(ref)
			ref["uid"] = owners[ref["name"].(string)]
			refs = append(refs, ref)
		}
		spec := shallow(o["spec"])
		delete(spec, "clusterIP")
		delete(spec, "clusterIPs")
		delete(spec, "nodeName")
		body, _ := json.Marshal(map[string]any{
			"apiVersion": "v1", "kind": o["kind"],
			"metadata": map[string]any{"name": meta["name"], "labels": meta["labels"], "ownerReferences": refs},
			"spec":     spec,
		})
		res := map[any]string{"Service": "services", "Pod": "pods"}[o["kind"]]
		reqs = append(reqs, postReq{path: "/api/v1/namespaces/" + ns + "/" + res, body: body})
	}
	// Services first, as the operator does.
	slices.SortStableFunc(reqs, func(a, b postReq) int {
		return strings.Compare(b.path[strings.LastIndex(b.path, "/"):], a.path[strings.LastIndex(a.path, "/"):])
	})
	return reqs
}

// shallow copies a decoded JSON object one level deep, so that retarget
// never changes the objects it is given.
func shallow(v any) map[string]any {
	m := map[string]any{}
	for k, x := range v.(map[string]any) {
		m[k] = x
	}
	return m
}

// post sends one object. A connection cut before the answer was read
// (kubectl proxy under a burst sometimes ends one mid-answer) is tried
// once more: a 409 then says the first POST made it.
func post(base string, r postReq) error {
	err := DoJSON(proxyClient, "POST", base+r.path, r.body, 201, nil)
	var uerr *url.Error
	if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &uerr) {
		return err
	}
	if err := DoJSON(proxyClient, "POST", base+r.path, r.body, 201, nil); err != nil && !strings.Contains(err.Error(), ": 409: ") {
		return err
	}
	return nil
}
