"""invoseq central repository: receives, stores and rebuilds invocation sequences."""
