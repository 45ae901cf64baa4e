"""The benchmark job: measures prefill and decode times of a Llama-style stack on one device.

Run it as `python -m app.bench` or `ridgeline-bench`. PyTorch is needed only to measure (the
`.[bench]` extra) and is imported lazily: the service imports `app.formats.run_document` to validate
uploaded runs without it, so neither this package nor the schema may import torch.
"""
