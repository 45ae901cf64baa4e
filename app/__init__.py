"""Ridgeline: capacity planning for large-language-model inference."""

__version__ = "1.0.0"
