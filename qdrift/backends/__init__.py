"""Policy backends: a local transformers model now, endpoints through the same seam."""
