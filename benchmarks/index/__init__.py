"""index benchmarks."""
