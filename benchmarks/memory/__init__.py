"""memory benchmarks."""
