"""quality benchmarks."""
