"""Modules of perf/perf, tern's benchmark driver (standard library only)."""
