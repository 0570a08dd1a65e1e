"""normbench: a benchmark framework for normalization layers in deep networks."""

__version__ = "0.1.0"
