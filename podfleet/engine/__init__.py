"""The one timeline: SimPy in virtual or paced real time, a thread-safe command inbox,
one seeded RNG and the event log."""

from podfleet.engine.timeline import Timeline

__all__ = ["Timeline"]
