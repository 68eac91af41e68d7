"""Kueue: Workloads and the quota a LocalQueue leads to."""
