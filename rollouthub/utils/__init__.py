"""Shared utilities (ids, metrics, OTLP helpers, server launcher, system snapshots)."""
