"""The package version, in a module of its own so that code generation can stamp it without
importing the package root (which imports the API, which imports code generation)."""

__version__ = "0.1.0"
