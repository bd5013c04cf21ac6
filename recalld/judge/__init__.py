"""The background judge and re-ranker."""
