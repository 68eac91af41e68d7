"""Kubernetes' own object and pod validation, offline: one module per rule family, each function naming the
upstream function it mirrors (k8s.io/kubernetes pkg/apis/core/validation, apps and batch validation,
apimachinery's name checks). Applied to built-in objects and to every pod template in any kind kubetrain knows
(Pod, Deployment, Job, CronJob, JobSet, PyTorchJob, TrainJob runtime patches, training runtimes)."""
