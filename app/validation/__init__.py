"""Ridgeline's record against published serving runs (`app.validation.record`)."""
