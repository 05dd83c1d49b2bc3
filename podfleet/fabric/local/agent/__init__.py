"""The local worker supervisor (``podfleet agent``): a per-host process that owns the
workers of this data directory's local clusters, so they outlive the control plane.

``protocol`` (wire format, version, where the socket and token live), ``server`` (the
agent), ``client`` (what a ``LocalFabric`` talks to it through: an ``AgentSpawner`` and
its ``RemoteWorker`` handles), ``launch`` (find or start the agent for a directory).
"""
