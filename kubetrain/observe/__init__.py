"""Seeing the training: progress tracking and rendering, metrics history, archives, timelines.

Torch- and kubernetes-free; rich and plotext are imported only where they draw.
"""
