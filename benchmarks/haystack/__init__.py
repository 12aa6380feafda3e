"""haystack benchmarks."""
