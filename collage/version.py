"""collage's version (a leaf: the deploy path reads it without importing the package's lazy API)."""
__version__ = "0.1.0"
