"""Real pretrained models that install from PyPI (optional extras), loaded as transformers models."""
