// Module components/pause is the program of the Pod sandbox image
// (registry.k8s.io/pause), built here since no registry can be reached.
module etcd-operator/e2e/components/pause

go 1.26
