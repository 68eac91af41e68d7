"""The job verbs: find, apply, status, logs, gpu, delete of PyTorchJobs and TrainJobs."""
