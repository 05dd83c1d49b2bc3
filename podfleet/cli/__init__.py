"""The ``podfleet`` command line (Typer)."""
