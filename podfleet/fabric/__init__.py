"""Fabrics: how chips are found, watched and given work (the I/O boundary)."""
