"""The CLI's start stays light: ``podfleet --help`` and every client command load neither
the frameworks a fabric or command may need (torch, ray) nor the control plane."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "ray", "pandas", "schemathesis", "podfleet.control.plane", "podfleet.api.server")


def _loaded_after(module: str) -> list[str]:
    code = (f"import sys, json, {module}; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return list(json.loads(out.stdout))


def test_importing_the_cli_loads_no_framework_and_no_control_plane() -> None:
    assert _loaded_after("podfleet.cli.main") == []


def test_importing_the_server_module_loads_neither_torch_nor_ray() -> None:
    assert [m for m in _loaded_after("podfleet.api.server") if m in ("torch", "ray", "pandas", "schemathesis")] == []
