module github.com/etcd-operator/etcd-operator

go 1.26

require github.com/google/uuid v1.6.0
