"""training benchmarks."""
