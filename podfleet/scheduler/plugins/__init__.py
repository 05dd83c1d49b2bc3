"""One module per plugin, each with a ``NAME`` and a ``factory(handle, args)``."""
