"""Side-by-side benchmarks: every figure is measured beside a peer in the same run."""
