"""Cluster readiness: doctor, preflight, fit, admission webhooks, cloud detection."""
