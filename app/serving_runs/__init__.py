"""Serving-benchmark results users upload, and how the simulator compares with them."""
