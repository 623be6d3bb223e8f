"""accelify: migrate single-GPU PyTorch training scripts to distributed training, and run them.

Importing this package is cheap: it must stay free of torch, libcst, click and rich, because
``accelify.runtime`` (imported by every converted training script) lives under it.
"""

__version__ = "0.1.0"
