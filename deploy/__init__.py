"""Deployments of radixgate on existing cluster machinery: Ray Serve (`radixgate.deploy.ray`) and
Kubernetes manifests (`deploy/k8s/`)."""
