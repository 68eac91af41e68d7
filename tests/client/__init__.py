"""Tier 2: kubetrain.client against the real control plane, plus pure unit tests with fakes at the client boundary."""
