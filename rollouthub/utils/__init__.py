"""Shared utilities (ids, metrics, OTLP helpers, server launcher, process lifetimes, system snapshots)."""
