"""Serve a control plane in this process for tests: uvicorn on a free port, in a thread.

    with serve_in_thread(plane) as url: PodfleetClient(url, token)...
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from podfleet.api.main import create_app
from podfleet.control.plane import ControlPlane


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(plane: ControlPlane, *, start_plane: bool = True) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(plane), host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False, lifespan="off"))
    if start_plane:
        plane.start()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        if start_plane:
            plane.stop()
