"""The click CLI: a thin layer over the library."""
