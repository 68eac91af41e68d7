"""Talking to a cluster. The only package that imports the `kubernetes` client (lazily, from the CLI)."""
