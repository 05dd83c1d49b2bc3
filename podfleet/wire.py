"""The JSON documents the control plane sends and takes.

``JsonObject`` is a JSON object as it crosses an edge: a rendered view (DescribeCluster,
DescribeTrainingJob, a listing's items), a request body before it is parsed, a journal
or a snapshot in its stored or served form. Records the control plane keeps and changes
are typed dataclasses (``docs/architecture.md``, "Typed records"); a ``JsonObject`` is
only ever their JSON form, built by their ``to_dict``/view functions or parsed by their
``from_dict``/``parse``, so the name says which of the two a signature deals in.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JsonObject: TypeAlias = dict[str, Any]
