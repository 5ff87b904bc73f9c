"""The tools under perf/: the load generators, the relay, the soak."""
