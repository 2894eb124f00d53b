"""Local development and test infrastructure: real processes (etcd, kube-apiserver, redis-server)."""
