"""`recalld bench`: the benchmark runner."""
