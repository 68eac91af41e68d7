"""`kubetrain build`: assemble the context, tag it by content hash, build, push or load into kind."""

from kubetrain.imagebuild.image import BuildResult, build, build_context, build_image

__all__ = ["BuildResult", "build", "build_context", "build_image"]
