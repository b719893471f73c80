"""Reports for people and machines: the disclosure card of a served quantized configuration."""
