"""kubetrain.cluster: preflight, doctor and fit, pure and against the real control plane."""
