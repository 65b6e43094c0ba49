"""Adapters between sessionlog and agent frameworks (each imports its framework lazily: install
the framework to use its adapter)."""
