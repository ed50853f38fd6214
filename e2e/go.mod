// Module e2e proves the operator against a real Kubernetes control plane,
// built from the Go module proxy (see components/). It is a module of its
// own so that the operator's module stays standard library + uuid.
module etcd-operator/e2e

go 1.26

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
