"""Thin click commands, one module per verb; they parse flags and call the library."""
