"""Python SDK: ``PodfleetClient(url, token)``, one method per API operation."""

from podfleet.sdk.client import PodfleetClient

__all__ = ["PodfleetClient"]
