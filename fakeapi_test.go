// A fake Kubernetes API server for the unit tests. It answers the way the
// real one does for the requests the operator makes: lists with a
// resourceVersion and continue tokens, chunked watch streams flushed event by
// event that replay history from a resourceVersion, 410 Expired for a
// position older than its compaction floor, metav1.Status bodies with reason
// and code, 409 AlreadyExists, 404 NotFound, JSON merge patches on /status
// (which do not bump metadata.generation). The e2e tests check the same
// behaviour against a real kube-apiserver.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeAPI struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every request or change
	rv       int
	uids     int
	clusters map[string]map[string]any // ns/name -> object
	history  []watchEvent              // every cluster event, for watch replay
	floor    int                       // watches from below this rv get 410
	objects  map[string]map[string]any // "services/ns/name" -> object
	events   []map[string]any
	requests []request
	streams  []chan []byte // open watch streams
	held     [][]byte      // events not yet sent while lagging
	lagging  bool          // hold events back, as a slow watch does
	// The fake node (fakeetcd_test.go): Pods run when node is set.
	node    bool
	procs   map[string]*fakeProc // ns/pod -> its etcd process
	etcds   map[string]*fakeEtcd // ns/base -> etcd cluster
	etcdLog []string             // membership changes, in order
	// lagLearners keeps learners from catching up: etcd refuses to
	// promote them.
	lagLearners bool
	podHistory  []watchEvent
	podStreams  []chan []byte
	svcHistory  []watchEvent
	svcStreams  []chan []byte
	pvcHistory  []watchEvent
	pvcStreams  []chan []byte
	// ownedLag holds the Pod and Service events back, as a watch that
	// falls behind does: the operator's cache then lags its own writes.
	ownedLag  bool
	ownedHeld []heldLine
	// claimLag holds the PVC events back alone: the PVC watch is a stream
	// of its own, and may fall behind the Pod watch.
	claimLag bool
	// svcLag holds the Service events back alone.
	svcLag bool
	// fault, when set, may answer a request instead of the fake: it returns
	// the HTTP code (0: no fault), a Retry-After value and a Status message.
	fault func(r request) (code int, retryAfter, message string)
}

type request struct {
	Ctx          context.Context // ends when the client gives up
	Method, Path string
	Query        url.Values
	ContentType  string
	Body         string
	At           time.Time
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{
		t: t, changed: make(chan struct{}), rv: 100,
		clusters: map[string]map[string]any{}, objects: map[string]map[string]any{},
		procs: map[string]*fakeProc{}, etcds: map[string]*fakeEtcd{}, node: true,
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.closeStreams()
		f.mu.Lock()
		for _, s := range slices.Concat(f.podStreams, f.svcStreams, f.pvcStreams) {
			close(s)
		}
		f.podStreams, f.svcStreams, f.pvcStreams = nil, nil, nil
		f.mu.Unlock()
		f.srv.Close()
	})
	return f
}

// notify wakes everyone in waitFor. Callers hold f.mu.
func (f *fakeAPI) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// wake wakes everyone in waitFor, for a condition that is not the fake's
// own state.
func (f *fakeAPI) wake() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notify()
}

// waitFor blocks until cond (called with f.mu held) is true, waking on every
// request the fake sees; it fails the test after a generous bound.
func (f *fakeAPI) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok, ch := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			f.t.Fatalf("timed out waiting for %s; requests seen:\n%s", what, f.requestLog())
		}
	}
}

func (f *fakeAPI) requestLog() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, r := range f.requests {
		fmt.Fprintf(&b, "  %s %s?%s\n", r.Method, r.Path, r.Query.Encode())
	}
	return b.String()
}

// count returns how many requests match method and a path prefix.
func (f *fakeAPI) count(method, pathPrefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.countLocked(method, pathPrefix)
}

func (f *fakeAPI) countLocked(method, pathPrefix string) int {
	return f.countMatchingLocked(method, func(path string) bool { return strings.HasPrefix(path, pathPrefix) })
}

// setFault sets f.fault while the operator runs.
func (f *fakeAPI) setFault(fault func(r request) (int, string, string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fault
}

// countExact returns how many requests match method and path exactly.
func (f *fakeAPI) countExact(method, path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.countExactLocked(method, path)
}

func (f *fakeAPI) countExactLocked(method, path string) int {
	return f.countMatchingLocked(method, func(p string) bool { return p == path })
}

func (f *fakeAPI) countMatching(method string, match func(path string) bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.countMatchingLocked(method, match)
}

func (f *fakeAPI) countMatchingLocked(method string, match func(path string) bool) int {
	n := 0
	for _, r := range f.requests {
		if r.Method == method && match(r.Path) {
			n++
		}
	}
	return n
}

func (f *fakeAPI) nextRV() string {
	f.rv++
	return strconv.Itoa(f.rv)
}

// putCluster creates or updates an EtcdCluster as a user would, bumping
// metadata.generation when the spec changes, and tells the watchers.
func (f *fakeAPI) putCluster(ns, name string, spec any) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := ns + "/" + name
	obj, ok := f.clusters[key]
	typ := "MODIFIED"
	if !ok {
		f.uids++
		obj = map[string]any{
			"apiVersion": apiVersion, "kind": kind,
			"metadata": map[string]any{
				"name": name, "namespace": ns, "generation": 0,
				"uid": fmt.Sprintf("0000000%d-aaaa-bbbb-cccc-%012d", f.uids%10, f.uids),
			},
		}
		f.clusters[key] = obj
		typ = "ADDED"
	}
	meta := obj["metadata"].(map[string]any)
	if !ok || !jsonEqual(obj["spec"], spec) {
		meta["generation"] = toInt(meta["generation"]) + 1
	}
	if spec == nil {
		delete(obj, "spec")
	} else {
		obj["spec"] = spec
	}
	meta["resourceVersion"] = f.nextRV()
	f.emitLocked(typ, obj)
	return clone(obj)
}

func (f *fakeAPI) deleteCluster(ns, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := ns + "/" + name
	obj := f.clusters[key]
	delete(f.clusters, key)
	obj["metadata"].(map[string]any)["resourceVersion"] = f.nextRV()
	f.emitLocked("DELETED", obj)
}

// putSecret stores a Secret, which the operator may only read.
func (f *fakeAPI) putSecret(ns, name string, data map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	enc := map[string]any{}
	for k, v := range data {
		enc[k] = []byte(v) // JSON's base64, as the real server sends it
	}
	f.objects["secrets/"+ns+"/"+name] = map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": name, "namespace": ns}, "data": enc}
}

func (f *fakeAPI) cluster(ns, name string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return clone(f.clusters[ns+"/"+name])
}

// emitLocked records an event and writes it to every open watch.
func (f *fakeAPI) emitLocked(typ string, obj map[string]any) {
	ev := watchEvent{Type: typ, Object: mustJSON(obj)}
	f.history = append(f.history, ev)
	line := append(mustJSON(ev), '\n')
	if f.lagging {
		f.held = append(f.held, line)
	} else {
		for _, s := range f.streams {
			s <- line
		}
	}
	f.notify()
}

// lag holds watch events back until catchUp, as a watch that falls behind
// a busy API server does: the operator then sees its own writes late.
func (f *fakeAPI) lag() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lagging = true
}

func (f *fakeAPI) catchUp() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lagging = false
	for _, line := range f.held {
		for _, s := range f.streams {
			s <- line
		}
	}
	f.held = nil
	f.notify()
}

// sendRaw writes raw bytes to every open watch stream: a bookmark, an ERROR
// event, or half an event.
func (f *fakeAPI) sendRaw(b string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.streams {
		s <- []byte(b)
	}
}

// bookmark is other objects changing (the resourceVersion moves on) and
// the server sending a BOOKMARK with the new position to every open watch
// of clusters, as it does for a watch with allowWatchBookmarks. It
// returns that resourceVersion.
func (f *fakeAPI) bookmark() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	rv := f.nextRV()
	line := append(mustJSON(map[string]any{"type": "BOOKMARK", "object": map[string]any{
		"kind": kind, "apiVersion": apiVersion, "metadata": map[string]any{"resourceVersion": rv}}}), '\n')
	for _, s := range f.streams {
		s <- line
	}
	return rv
}

// closeStreams ends every open watch, as the API server does after its
// timeout.
func (f *fakeAPI) closeStreams() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.streams {
		close(s)
	}
	f.streams = nil
}

// compact is other writes happening, then history being compacted: a
// watch from any resourceVersion seen so far gets 410 Expired.
func (f *fakeAPI) compact() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	f.floor = f.rv
}

func (f *fakeAPI) objectNames(resource string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for k := range f.objects {
		if r, rest, _ := strings.Cut(k, "/"); r == resource {
			_, name, _ := strings.Cut(rest, "/")
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func (f *fakeAPI) object(resource, ns, name string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return clone(f.objects[resource+"/"+ns+"/"+name])
}

func (f *fakeAPI) postedEvents() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := request{Ctx: r.Context(), Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), ContentType: r.Header.Get("Content-Type"), Body: string(body), At: time.Now()}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.notify()
	fault := f.fault
	f.mu.Unlock()
	if fault != nil {
		code, retryAfter, msg := fault(req)
		if code == answerLost {
			// Served, but the answer never reaches the client: a request
			// that timed out and succeeded all the same.
			f.serveRequest(httptest.NewRecorder(), r, req)
			<-r.Context().Done()
			return
		}
		if code != 0 {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			writeStatus(w, code, strings.ReplaceAll(http.StatusText(code), " ", ""), msg)
			return
		}
	}
	f.serveRequest(w, r, req)
}

// answerLost, returned by a fault as the code, serves the request and
// never answers it.
const answerLost = -1

func (f *fakeAPI) serveRequest(w http.ResponseWriter, r *http.Request, req request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	owned := ""
	switch {
	case r.URL.Path == "/api/v1/pods" || len(parts) == 5 && parts[0] == "api" && parts[4] == "pods":
		owned = "pods"
	case r.URL.Path == "/api/v1/services" || len(parts) == 5 && parts[0] == "api" && parts[4] == "services":
		owned = "services"
	case r.URL.Path == "/api/v1/persistentvolumeclaims" || len(parts) == 5 && parts[0] == "api" && parts[4] == "persistentvolumeclaims":
		owned = "persistentvolumeclaims"
	}
	switch {
	case owned != "" && r.Method == "GET" && req.Query.Get("watch") != "":
		f.serveWatch(w, r, owned, req.Query.Get("resourceVersion"), req.Query.Get("labelSelector"))
	case r.URL.Path == "/api/v1/"+owned && r.Method == "GET":
		f.serveCoreList(w, "", owned, req.Query.Get("labelSelector"))
	case strings.HasPrefix(r.URL.Path, "/apis/coreos.com/v1/"):
		f.serveClusters(w, r, req, parts[3:])
	case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/") && len(parts) >= 5:
		f.serveCore(w, r, req, parts[3], parts[4], parts[5:])
	default:
		writeStatus(w, 404, "NotFound", "the server could not find the requested resource")
	}
}

// serveClusters handles .../etcdclusters[/NAME[/status]] in one namespace
// (parts: namespaces NS etcdclusters ...) or in all (parts: etcdclusters).
func (f *fakeAPI) serveClusters(w http.ResponseWriter, r *http.Request, req request, parts []string) {
	ns := ""
	if len(parts) >= 2 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || parts[0] != "etcdclusters" {
		writeStatus(w, 404, "NotFound", "the server could not find the requested resource")
		return
	}
	switch {
	case len(parts) == 1 && r.Method == "GET" && req.Query.Get("watch") != "":
		f.serveWatch(w, r, "etcdclusters", req.Query.Get("resourceVersion"), "")
	case len(parts) == 1 && r.Method == "GET":
		f.serveList(w, ns, req.Query)
	case len(parts) == 2 && r.Method == "GET":
		f.mu.Lock()
		obj, ok := f.clusters[ns+"/"+parts[1]]
		b := mustJSON(obj)
		f.mu.Unlock()
		if !ok {
			writeStatus(w, 404, "NotFound", fmt.Sprintf("etcdclusters.coreos.com %q not found", parts[1]))
			return
		}
		w.Write(b)
	case (len(parts) == 3 && parts[2] == "status" || len(parts) == 2) && r.Method == "PATCH":
		if req.ContentType != "application/merge-patch+json" {
			writeStatus(w, 415, "UnsupportedMediaType", "the body of the request was in an unknown format")
			return
		}
		var patch map[string]any
		if err := json.Unmarshal([]byte(req.Body), &patch); err != nil {
			writeStatus(w, 400, "BadRequest", err.Error())
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		obj, ok := f.clusters[ns+"/"+parts[1]]
		if !ok {
			writeStatus(w, 404, "NotFound", fmt.Sprintf("etcdclusters.coreos.com %q not found", parts[1]))
			return
		}
		// The status subresource applies only the status part; the
		// object itself only its metadata's labels and annotations here
		// (a spec change would also move metadata.generation).
		part := "status"
		if len(parts) == 2 {
			part = "metadata"
			patch = map[string]any{"metadata": map[string]any{"annotations": patch["metadata"].(map[string]any)["annotations"]}}
		}
		st, _ := obj[part].(map[string]any)
		merged := mergePatch(clone(st), patch[part])
		if jsonEqual(merged, st) {
			// A patch that changes nothing is not written: same
			// resourceVersion, no watch event.
			w.Write(mustJSON(obj))
			return
		}
		obj[part] = merged
		obj["metadata"].(map[string]any)["resourceVersion"] = f.nextRV()
		f.emitLocked("MODIFIED", obj)
		w.Write(mustJSON(obj))
	default:
		writeStatus(w, 405, "MethodNotAllowed", "method not allowed")
	}
}

func (f *fakeAPI) serveList(w http.ResponseWriter, ns string, q url.Values) {
	f.mu.Lock()
	var keys []string
	for k := range f.clusters {
		if ns == "" || strings.HasPrefix(k, ns+"/") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	// A continue token carries the first page's resourceVersion: every page
	// of one list reports the same snapshot, as with the real server.
	startText, snapshot, _ := strings.Cut(q.Get("continue"), ":")
	start, _ := strconv.Atoi(startText)
	if snapshot == "" {
		snapshot = strconv.Itoa(f.rv)
	}
	end := len(keys)
	if limit, _ := strconv.Atoi(q.Get("limit")); limit > 0 && start+limit < end {
		end = start + limit
	}
	items := []map[string]any{}
	for _, k := range keys[min(start, end):end] {
		items = append(items, f.clusters[k])
	}
	meta := map[string]any{"resourceVersion": snapshot}
	if end < len(keys) {
		meta["continue"] = strconv.Itoa(end) + ":" + snapshot
	}
	b := mustJSON(map[string]any{"apiVersion": apiVersion, "kind": "EtcdClusterList", "metadata": meta, "items": items})
	f.mu.Unlock()
	w.Write(b)
}

// serveWatch replays the history after rv, then streams live events, each
// flushed on its own: chunked transfer encoding, as the real server does.
func (f *fakeAPI) serveWatch(w http.ResponseWriter, r *http.Request, resource, rv, selector string) {
	from, _ := strconv.Atoi(rv)
	ch := make(chan []byte, 1024)
	f.mu.Lock()
	history, streams := &f.history, &f.streams
	switch resource {
	case "pods":
		history, streams = &f.podHistory, &f.podStreams
	case "services":
		history, streams = &f.svcHistory, &f.svcStreams
	case "persistentvolumeclaims":
		history, streams = &f.pvcHistory, &f.pvcStreams
	}
	if from < f.floor {
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		st := map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
			"message": fmt.Sprintf("too old resource version: %d (%d)", from, f.floor), "reason": "Expired", "code": 410}
		w.Write(append(mustJSON(map[string]any{"type": "ERROR", "object": st}), '\n'))
		return
	}
	for _, ev := range *history {
		var obj EtcdCluster
		_ = json.Unmarshal(ev.Object, &obj)
		if n, _ := strconv.Atoi(obj.Metadata.ResourceVersion); n > from {
			ch <- append(mustJSON(ev), '\n')
		}
	}
	// The fake's Pod and Service watchers all use the operator's one
	// selector; the lists filter by it (serveCoreList).
	_ = selector
	*streams = append(*streams, ch)
	f.notify()
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	w.(http.Flusher).Flush()
	defer f.dropStream(streams, ch)
	for {
		select {
		case b, ok := <-ch:
			if !ok {
				return
			}
			w.Write(b)
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		}
	}
}

func (f *fakeAPI) dropStream(streams *[]chan []byte, ch chan []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := slices.Index(*streams, ch); i >= 0 {
		*streams = slices.Delete(*streams, i, i+1)
	}
	f.notify()
}

// serveCore handles services, pods and events in namespace ns.
func (f *fakeAPI) serveCore(w http.ResponseWriter, r *http.Request, req request, ns, resource string, rest []string) {
	if !slices.Contains([]string{"services", "pods", "events", "persistentvolumeclaims", "secrets"}, resource) {
		writeStatus(w, 404, "NotFound", "the server could not find the requested resource")
		return
	}
	if r.Method == "GET" && len(rest) == 0 {
		f.serveCoreList(w, ns, resource, req.Query.Get("labelSelector"))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case resource == "pods" && len(rest) >= 2 && strings.HasSuffix(rest[0], fmt.Sprintf(":%d", clientPort)) && rest[1] == "proxy" && (r.Method == "POST" || r.Method == "GET"):
		name, https := strings.CutPrefix(strings.TrimSuffix(rest[0], fmt.Sprintf(":%d", clientPort)), "https:")
		f.serveEtcdLocked(w, ns, name, https, "/"+strings.Join(rest[2:], "/"), req.Body, r.Header.Get("Grpc-Metadata-Token"))
	case r.Method == "PATCH" && len(rest) == 1 && resource == "secrets":
		if req.ContentType != "application/merge-patch+json" {
			writeStatus(w, 415, "UnsupportedMediaType", "the body of the request was in an unknown format")
			return
		}
		obj, ok := f.objects["secrets/"+ns+"/"+rest[0]]
		if !ok {
			writeStatus(w, 404, "NotFound", fmt.Sprintf("secrets %q not found", rest[0]))
			return
		}
		var p any
		_ = json.Unmarshal([]byte(req.Body), &p)
		obj = mergePatch(obj, p)
		obj["metadata"].(map[string]any)["resourceVersion"] = f.nextRV()
		f.objects["secrets/"+ns+"/"+rest[0]] = obj
		w.Write(mustJSON(obj))
	case r.Method == "DELETE" && len(rest) == 1 && resource != "events":
		key := resource + "/" + ns + "/" + rest[0]
		obj, ok := f.objects[key]
		if !ok {
			writeStatus(w, 404, "NotFound", fmt.Sprintf("%s %q not found", resource, rest[0]))
			return
		}
		switch resource {
		case "pods":
			f.deletePodLocked(ns, rest[0])
		case "persistentvolumeclaims":
			f.deleteClaimLocked(ns, rest[0])
		case "secrets":
			delete(f.objects, key)
		default:
			f.deleteServiceLocked(key)
		}
		w.Write(mustJSON(obj))
	case r.Method == "PATCH" && len(rest) == 1 && resource == "persistentvolumeclaims":
		if req.ContentType != "application/merge-patch+json" {
			writeStatus(w, 415, "UnsupportedMediaType", "the body of the request was in an unknown format")
			return
		}
		obj, ok := f.objects["persistentvolumeclaims/"+ns+"/"+rest[0]]
		if !ok {
			writeStatus(w, 404, "NotFound", fmt.Sprintf("persistentvolumeclaims %q not found", rest[0]))
			return
		}
		var p any
		_ = json.Unmarshal([]byte(req.Body), &p)
		obj = mergePatch(obj, p)
		canonicalStorage(obj)
		obj["metadata"].(map[string]any)["resourceVersion"] = f.nextRV()
		f.objects["persistentvolumeclaims/"+ns+"/"+rest[0]] = obj
		f.emitOwnedLocked(&f.pvcHistory, &f.pvcStreams, "MODIFIED", obj)
		w.Write(mustJSON(obj))
	case r.Method == "PATCH" && len(rest) == 1 && resource == "pods":
		if req.ContentType != "application/strategic-merge-patch+json" {
			writeStatus(w, 415, "UnsupportedMediaType", "the body of the request was in an unknown format")
			return
		}
		obj, ok := f.objects["pods/"+ns+"/"+rest[0]]
		if !ok {
			writeStatus(w, 404, "NotFound", fmt.Sprintf("pods %q not found", rest[0]))
			return
		}
		var patch struct {
			Spec struct {
				Containers []struct{ Name, Image string }
			}
		}
		_ = json.Unmarshal([]byte(req.Body), &patch)
		for _, pc := range patch.Spec.Containers {
			c := obj["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			if pc.Name != c["name"] {
				writeStatus(w, 422, "Invalid", "no container "+pc.Name)
				return
			}
			c["image"] = pc.Image
			// The kubelet restarts the container with the new image, in
			// the same Pod, with the same data.
			if p := f.procs[podKey(ns, rest[0])]; p != nil {
				p.Version = strings.TrimPrefix(pc.Image[strings.LastIndex(pc.Image, ":")+1:], "v")
				p.Down = unpullable(pc.Image)
			}
		}
		obj["metadata"].(map[string]any)["resourceVersion"] = f.nextRV()
		f.emitPodLocked("MODIFIED", obj)
		f.syncPodsLocked(ns, obj["metadata"].(map[string]any)["labels"].(map[string]any)[labelCluster].(string))
		w.Write(mustJSON(obj))
	case r.Method == "POST" && len(rest) == 0:
		var obj map[string]any
		if err := json.Unmarshal([]byte(req.Body), &obj); err != nil {
			writeStatus(w, 400, "BadRequest", err.Error())
			return
		}
		meta, _ := obj["metadata"].(map[string]any)
		if meta == nil {
			writeStatus(w, 422, "Invalid", "metadata is required")
			return
		}
		if resource == "events" {
			f.events = append(f.events, obj)
			f.notify()
			w.WriteHeader(201)
			w.Write(mustJSON(obj))
			return
		}
		name, _ := meta["name"].(string)
		key := resource + "/" + ns + "/" + name
		if _, ok := f.objects[key]; ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(409)
			w.Write(mustJSON(map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
				"message": fmt.Sprintf("%s %q already exists", resource, name), "reason": "AlreadyExists",
				"details": map[string]any{"name": name, "kind": resource}, "code": 409}))
			return
		}
		f.uids++
		meta["uid"] = fmt.Sprintf("obj-%d", f.uids)
		meta["resourceVersion"] = f.nextRV()
		f.objects[key] = obj
		f.notify()
		if resource == "pods" {
			// The API server makes every new Pod Pending; the kubelet
			// says more once it has it.
			obj["status"] = map[string]any{"phase": "Pending"}
			unbound := f.unboundClaimLocked(ns, obj)
			if unbound != "" {
				// The scheduler keeps a Pod whose PVC is missing or being
				// deleted Pending.
				obj["status"] = map[string]any{"phase": "Pending", "conditions": []any{map[string]any{"type": "PodScheduled", "status": "False",
					"reason": "Unschedulable", "message": unbound}}}
			}
			f.emitPodLocked("ADDED", obj)
			if f.node && unbound == "" {
				f.startPodLocked(ns, obj)
			}
		} else if resource == "persistentvolumeclaims" {
			// Bound at once, as with a provisioner that binds on creation.
			obj["status"] = map[string]any{"phase": "Bound"}
			canonicalStorage(obj)
			f.emitOwnedLocked(&f.pvcHistory, &f.pvcStreams, "ADDED", obj)
		} else if resource == "services" {
			f.emitOwnedLocked(&f.svcHistory, &f.svcStreams, "ADDED", obj)
		}
		w.WriteHeader(201)
		w.Write(mustJSON(obj))
	case r.Method == "GET" && len(rest) == 1:
		obj, ok := f.objects[resource+"/"+ns+"/"+rest[0]]
		if !ok {
			writeStatus(w, 404, "NotFound", fmt.Sprintf("%s %q not found", resource, rest[0]))
			return
		}
		w.Write(mustJSON(obj))
	default:
		writeStatus(w, 405, "MethodNotAllowed", "method not allowed")
	}
}

// serveCoreList lists pods or services, filtered by a label selector, with
// the resourceVersion to watch from.
func (f *fakeAPI) serveCoreList(w http.ResponseWriter, ns, resource, selector string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.objects {
		if strings.HasPrefix(k, resource+"/"+ns) && matches(f.objects[k], selector) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	items := []map[string]any{}
	for _, k := range keys {
		items = append(items, f.objects[k])
	}
	w.Write(mustJSON(map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": strconv.Itoa(f.rv)}, "items": items}))
}

func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(mustJSON(map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code}))
}

// canonicalStorage writes a claim's requested size as the API server
// stores a quantity: in binary units, the largest that keeps it whole
// (10240Mi is 10Gi).
func canonicalStorage(claim map[string]any) {
	spec, _ := claim["spec"].(map[string]any)
	res, _ := spec["resources"].(map[string]any)
	req, _ := res["requests"].(map[string]any)
	q, _ := req["storage"].(string)
	n, ok := bytesOf(q)
	if !ok || !strings.HasSuffix(q, "i") || n == 0 {
		return
	}
	units := []string{"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	i := 0
	for ; i < len(units)-1 && n%1024 == 0; i++ {
		n /= 1024
	}
	req["storage"] = strconv.FormatInt(n, 10) + units[i]
}

// mergePatch applies an RFC 7386 JSON merge patch.
func mergePatch(target map[string]any, patch any) map[string]any {
	p, ok := patch.(map[string]any)
	if !ok {
		return nil
	}
	out := map[string]any{}
	for k, v := range target {
		out[k] = v
	}
	for k, v := range p {
		switch v := v.(type) {
		case nil:
			delete(out, k)
		case map[string]any:
			sub, _ := out[k].(map[string]any)
			out[k] = mergePatch(sub, v)
		default:
			out[k] = v
		}
	}
	return out
}

func clone(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	var c map[string]any
	_ = json.Unmarshal(mustJSON(obj), &c)
	return c
}

func toInt(v any) int {
	switch v := v.(type) {
	case int:
		return v
	case float64:
		return int(v)
	}
	return 0
}

// collectGarbage deletes the Pods and Services of the deleted EtcdCluster
// with the given uid, as Kubernetes' garbage collector does.
func (f *fakeAPI) collectGarbage(ns, uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, obj := range f.objects {
		resource, rest, _ := strings.Cut(key, "/")
		objNS, name, _ := strings.Cut(rest, "/")
		owners, _ := obj["metadata"].(map[string]any)["ownerReferences"].([]any)
		if objNS != ns || len(owners) == 0 || owners[0].(map[string]any)["uid"] != uid {
			continue
		}
		switch resource {
		case "pods":
			f.deletePodLocked(ns, name)
		case "persistentvolumeclaims":
			f.deleteClaimLocked(ns, name)
		case "secrets":
			delete(f.objects, key)
		default:
			f.deleteServiceLocked(key)
		}
	}
}

// deleteClaimLocked deletes a PVC as the API server does: one that a Pod
// still uses gets a deletionTimestamp and stays (the pvc-protection
// finalizer) until no Pod uses it.
func (f *fakeAPI) deleteClaimLocked(ns, name string) {
	key := "persistentvolumeclaims/" + ns + "/" + name
	obj := f.objects[key]
	if obj == nil {
		return
	}
	meta := obj["metadata"].(map[string]any)
	meta["resourceVersion"] = f.nextRV()
	if f.claimUsedLocked(ns, name) {
		meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		f.emitOwnedLocked(&f.pvcHistory, &f.pvcStreams, "MODIFIED", obj)
		return
	}
	delete(f.objects, key)
	f.emitOwnedLocked(&f.pvcHistory, &f.pvcStreams, "DELETED", obj)
	f.forgetDataLocked(ns, obj["metadata"].(map[string]any)["labels"].(map[string]any)[labelCluster].(string))
}

// unboundClaimLocked says why pod cannot be scheduled for its PVCs, if it
// cannot: one is missing or being deleted.
func (f *fakeAPI) unboundClaimLocked(ns string, pod map[string]any) string {
	vols, _ := pod["spec"].(map[string]any)["volumes"].([]any)
	for _, v := range vols {
		c, ok := v.(map[string]any)["persistentVolumeClaim"].(map[string]any)
		if !ok {
			continue
		}
		name := c["claimName"].(string)
		switch obj := f.objects["persistentvolumeclaims/"+ns+"/"+name]; {
		case obj == nil:
			return fmt.Sprintf("persistentvolumeclaim %q not found", name)
		case obj["metadata"].(map[string]any)["deletionTimestamp"] != nil:
			return fmt.Sprintf("persistentvolumeclaim %q is being deleted", name)
		}
	}
	return ""
}

// claimUsedLocked reports whether a Pod in ns mounts PVC name.
func (f *fakeAPI) claimUsedLocked(ns, name string) bool {
	for key, pod := range f.objects {
		if !strings.HasPrefix(key, "pods/"+ns+"/") {
			continue
		}
		vols, _ := pod["spec"].(map[string]any)["volumes"].([]any)
		for _, v := range vols {
			if c, ok := v.(map[string]any)["persistentVolumeClaim"].(map[string]any); ok && c["claimName"] == name {
				return true
			}
		}
	}
	return false
}

// deleteClaim deletes a PVC as a user would.
func (f *fakeAPI) deleteClaim(ns, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteClaimLocked(ns, name)
}

// deleteServiceLocked deletes a Service at once (Services have no
// finalizers here) and tells the Service watchers.
func (f *fakeAPI) deleteServiceLocked(key string) {
	obj := f.objects[key]
	delete(f.objects, key)
	obj["metadata"].(map[string]any)["resourceVersion"] = f.nextRV()
	f.emitOwnedLocked(&f.svcHistory, &f.svcStreams, "DELETED", obj)
}

// deleteService deletes a Service as a user would.
func (f *fakeAPI) deleteService(ns, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteServiceLocked("services/" + ns + "/" + name)
}

// heldLine is a Pod or Service watch event held back by lagOwned.
type heldLine struct {
	streams *[]chan []byte
	line    []byte
}

// emitOwnedLocked records a Pod or Service event and writes it to every
// watch of its kind, or holds it back while ownedLag is set.
func (f *fakeAPI) emitOwnedLocked(history *[]watchEvent, streams *[]chan []byte, typ string, obj map[string]any) {
	ev := watchEvent{Type: typ, Object: mustJSON(obj)}
	*history = append(*history, ev)
	line := append(mustJSON(ev), '\n')
	if f.ownedLag || f.claimLag && streams == &f.pvcStreams || f.svcLag && streams == &f.svcStreams {
		f.ownedHeld = append(f.ownedHeld, heldLine{streams, line})
	} else {
		for _, s := range *streams {
			s <- line
		}
	}
	f.notify()
}

// lagOwned holds the Pod and Service watch events back until
// catchUpOwned: the operator's cache falls behind its own writes.
func (f *fakeAPI) lagOwned() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ownedLag = true
}

// lagClaims holds the PVC watch events back until catchUpOwned.
func (f *fakeAPI) lagClaims() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claimLag = true
}

func (f *fakeAPI) catchUpOwned() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ownedLag, f.claimLag, f.svcLag = false, false, false
	for _, h := range f.ownedHeld {
		for _, s := range *h.streams {
			s <- h.line
		}
	}
	f.ownedHeld = nil
	f.notify()
}

func (f *fakeAPI) clusterUID(ns, name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clusters[ns+"/"+name]["metadata"].(map[string]any)["uid"].(string)
}
