package e2e

// Dynamic volume provisioning on the node: a PersistentVolumeClaim of the
// default StorageClass gets a PersistentVolume made for it, as in any real
// cluster. The provisioner is Rancher's local-path-provisioner, the one kind
// and k3s run, built from the module proxy and run as a process against the
// API server (--kubeconfig), as its out-of-cluster mode allows. The idea:
// provisioning is a controller like any other. kube-controller-manager's
// PersistentVolume binder marks a claim for the provisioner its class
// names; the scheduler, for a WaitForFirstConsumer class, picks the node
// when the first Pod using the claim is scheduled; the provisioner then
// makes the directory on that node (with a helper Pod, through the kubelet)
// and the PersistentVolume that points at it. Reclaim policy Delete runs a
// helper Pod again to remove the directory once the claim is deleted.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The node's storage, as Pods and PersistentVolumeClaims name it.
const (
	// StorageClassName is the default StorageClass: a claim that names
	// no class gets it (the DefaultStorageClass admission plugin).
	StorageClassName = "local-path"
	// LocalPathProvisioner is the class's provisioner, the name the
	// provisioner watches for.
	LocalPathProvisioner = "rancher.io/local-path"
	// LocalPathNamespace holds the provisioner's ConfigMap and its helper
	// Pods (upstream's namespace).
	LocalPathNamespace = "local-path-storage"
	localPathConfigMap = "local-path-config"
	localPathProcess   = "local-path-provisioner"
)

// VolumesDir is where the provisioned volumes live on this machine, one
// directory each: inside NodeDir, so the node's sweep removes them with
// the rest, after a run that stopped and after one that was killed.
func VolumesDir() string { return filepath.Join(NodeDir(), "volumes") }

// applyStorageClass makes local-path the default StorageClass. The control
// plane has it with or without the node, so that the API server stores a
// claim the same way in both; without the node the claim stays Pending, as
// the Pods do. allowVolumeExpansion is false: local-path cannot grow a
// directory, and the API server then refuses a larger request outright.
func (cp *ControlPlane) applyStorageClass() error {
	sc := map[string]any{
		"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
		"metadata": map[string]any{
			"name":        StorageClassName,
			"annotations": map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		"provisioner": LocalPathProvisioner,
		// The volume is on one node: bind it where the Pod is scheduled.
		"volumeBindingMode":    "WaitForFirstConsumer",
		"reclaimPolicy":        "Delete",
		"allowVolumeExpansion": false,
	}
	return cp.applyJSON(sc)
}

func (cp *ControlPlane) applyJSON(obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = cp.Kubectl(string(b), "apply", "-f", "-")
	return err
}

// startProvisioner runs local-path-provisioner for the node's volumes and
// waits until its controller has synced. Its configuration is upstream's
// ConfigMap (deploy/local-path-storage.yaml) with two changes: the volumes
// go under VolumesDir, not /opt/local-path-provisioner, and the helper Pod
// uses the busybox image imported into containerd (HelperImageRef) with
// imagePullPolicy Never, so that nothing is pulled. The helper Pods run as
// the namespace's default ServiceAccount without a token: they only make
// and remove a directory.
func (n *Node) startProvisioner() error {
	cp := n.cp
	// The namespace lets its Pods onto the node (see CreateNodeNamespace):
	// a helper Pod names its node, and any other namespace's Pods get a node
	// selector that the kubelet would refuse.
	if err := cp.CreateNodeNamespace(LocalPathNamespace); err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"nodePathMap": []map[string]any{{"node": NodeName, "paths": []string{VolumesDir()}}},
	})
	if err != nil {
		return err
	}
	helperPod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  automountServiceAccountToken: false
  containers:
  - name: helper-pod
    image: %s
    imagePullPolicy: Never
`, HelperImageRef)
	cm := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": localPathConfigMap, "namespace": LocalPathNamespace},
		"data": map[string]string{
			"config.json": string(config),
			// Upstream's scripts, run by the helper Pod with the volume's
			// parent directory mounted.
			"setup":          "#!/bin/sh\nset -eu\nmkdir -m 0777 -p \"$VOL_DIR\"\n",
			"teardown":       "#!/bin/sh\nset -eu\nrm -rf \"$VOL_DIR\"\n",
			"helperPod.yaml": helperPod,
		},
	}
	if err := cp.applyJSON(cm); err != nil {
		return err
	}
	// Out of the cluster: it must not find an in-cluster configuration
	// (it tries one to copy the helper Pods' logs) should this machine
	// itself run in a Pod.
	outside := []string{"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT="}
	if _, err := cp.StartProcess(localPathProcess, outside, cp.Bin.LocalPathProvisioner, "start",
		"--kubeconfig="+cp.Kubeconfig,
		"--provisioner-name="+LocalPathProvisioner,
		"--namespace="+LocalPathNamespace,
		"--configmap-name="+localPathConfigMap,
		"--service-account-name=default",
		// Unused by v0.0.30 (the helper Pod's template names the image),
		// but required; the same image, so nothing says otherwise.
		"--helper-image="+HelperImageRef,
	); err != nil {
		return err
	}
	// The controller says this once its informers have synced: from then
	// on it acts on every claim, including those made before it started.
	return Eventually(60*time.Second, "local-path-provisioner to start", func() (bool, error) {
		if cp.exited(localPathProcess) {
			return false, fmt.Errorf("local-path-provisioner exited; see %s", cp.LogPath(localPathProcess))
		}
		b, _ := os.ReadFile(cp.LogPath(localPathProcess))
		return strings.Contains(string(b), "Started provisioner controller"), nil
	})
}
