"""Tier 2: kubetrain.kube against the real control plane, plus pure unit tests with fakes at the client boundary."""
