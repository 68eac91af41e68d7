"""The kubetrain operator: the TrainingJob CRD and `kubetrain controller run`, which reconciles it.

Modules: `crd` (the CRD, generated from the spec model), `statusmodel` (the status the controller writes),
`reconcile` (one TrainingJob → children + status, a pure-ish function of the cluster state), `loop`
(informers, work queue with per-object backoff), `leader` (Lease-based leader election), `install` (the
kustomize base under manifests/controller).
"""
