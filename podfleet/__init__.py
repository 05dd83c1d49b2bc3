"""podfleet: a control plane for AI-training pods, with a built-in digital twin."""

__version__ = "0.1.0"
