package e2e

// The one way the e2e module makes an EtcdCluster, or changes one: as
// kubectl apply does, it declares the object, created when it is missing
// and its spec set when it exists. The operator is level-based, so
// whoever makes the object, and how, must not matter to it; one maker
// keeps that true of the tests too. (The quick-start test and cmd/local
// still apply examples/etcd-cluster.yaml with kubectl: there the file
// itself is what they show.)

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Cluster is an EtcdCluster to make or change.
type Cluster struct {
	Namespace, Name string
	Size            int
	// Version is spec.version; "" is the CRD's default for a new cluster
	// and leaves an existing one's as it is.
	Version string
	// EmptyDir keeps the members' data on emptyDir (spec.storage.emptyDir),
	// lost with a Pod; unset, each member has a PersistentVolumeClaim.
	EmptyDir bool
	// TLS is spec.tls: nil for none, an empty map for the defaults.
	TLS map[string]any
	// Via is where the request goes: "" straight to the API server as
	// admin, as kubectl goes (it works while kubectl proxy is down); a
	// kubectl proxy URL sends it through the proxy, as the benchmark's
	// loaders send theirs.
	Via string
}

// proxyClient is for requests through kubectl proxy: enough idle
// connections for the benchmark's 16 workers.
var proxyClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}

// ApplyCluster creates c, one POST, or, when an EtcdCluster of that name
// exists (409), sets its spec.size and spec.version with a merge patch. It
// returns the object's uid.
func (cp *ControlPlane) ApplyCluster(c Cluster) (string, error) {
	spec := map[string]any{"size": c.Size}
	if c.Version != "" {
		spec["version"] = c.Version
	}
	if c.EmptyDir {
		spec["storage"] = map[string]any{"emptyDir": true}
	}
	if c.TLS != nil {
		spec["tls"] = c.TLS
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": "coreos.com/v1", "kind": "EtcdCluster",
		"metadata": map[string]any{"name": c.Name},
		"spec":     spec,
	})
	if err != nil {
		return "", err
	}
	path := "/apis/coreos.com/v1/namespaces/" + c.Namespace + "/etcdclusters"
	code, b, err := cp.send(c.Via, "POST", path, body, "application/json")
	if err == nil && code == http.StatusConflict {
		patch, _ := json.Marshal(map[string]any{"spec": spec})
		code, b, err = cp.send(c.Via, "PATCH", path+"/"+c.Name, patch, "application/merge-patch+json")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d: %.500s", code, b)
		}
	} else if err == nil && code != http.StatusCreated {
		err = fmt.Errorf("%d: %.500s", code, b)
	}
	var o struct{ Metadata struct{ UID string } }
	if err == nil {
		err = json.Unmarshal(b, &o)
	}
	if err != nil {
		return "", fmt.Errorf("apply etcdcluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	return o.Metadata.UID, nil
}

// send is cp.Do, or with via set the same request through kubectl proxy.
func (cp *ControlPlane) send(via, method, path string, body []byte, contentType string) (int, []byte, error) {
	if via == "" {
		return cp.Do(method, path, body, contentType)
	}
	req, err := http.NewRequest(method, via+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := proxyClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
