"""kubetrain: take a distributed PyTorch training job from a laptop to a GPU cluster."""

__version__ = "0.1.0"
