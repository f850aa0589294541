"""Shared helpers of the topic modules: linear algebra and statistics with one definition each
(`linalg`), and the report's one figure style (`plotting`)."""
