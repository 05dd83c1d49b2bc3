"""The Ray fabric: a job's gang as Ray actors in a placement group, on any Ray cluster.

Ray is imported only when a ``RayFabric`` is created, so importing this package (and
the control plane) works without Ray installed.
"""

from podfleet.fabric.ray.fabric import RESOURCES, STRATEGIES, RayFabric
from podfleet.fabric.ray.factory import make_ray_fabric
from podfleet.fabric.ray.jobs import ExitCause
from podfleet.fabric.ray.telemetry import METRICS

__all__ = ["METRICS", "RESOURCES", "STRATEGIES", "ExitCause", "RayFabric", "make_ray_fabric"]
