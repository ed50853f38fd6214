// Module e2e proves the operator against a real Kubernetes control plane,
// built from the Go module proxy (see components/). It is a module of its
// own so that the operator's module stays standard library + uuid.
module etcd-operator/e2e

go 1.26
