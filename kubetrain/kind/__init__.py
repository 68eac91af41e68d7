"""`kubetrain cluster`: a local kind cluster with NVIDIA GPUs (or CPU only) and the training-operator."""

from kubetrain.kind.cluster import CreateOptions, Summary, create_cluster, delete_cluster, format_summary

__all__ = ["CreateOptions", "Summary", "create_cluster", "delete_cluster", "format_summary"]
