"""snfc: compile SNF transformer specs to readable PyTorch modules."""

__version__ = "0.1.0"
