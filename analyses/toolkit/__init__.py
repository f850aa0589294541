"""Shared helpers of the topic modules: linear algebra and statistics with one definition each
(`linalg`), subspaces and their random-subspace nulls (`subspaces`), and the report's one figure
style (`plotting`)."""
