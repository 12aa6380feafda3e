"""speed benchmarks."""
