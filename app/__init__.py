"""Ridgeline: capacity planning for large-language-model inference."""
