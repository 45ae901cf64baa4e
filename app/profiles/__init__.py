"""Measured profiles of GPUs under serving engines: the bundled ones, uploads, the import."""
