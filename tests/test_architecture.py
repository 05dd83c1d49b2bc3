"""The arrows docs/architecture.md promises, checked against the imports and the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[1] / "podfleet"
CONTROL_PLANE = ("control", "recovery", "health", "scheduler")
FABRIC_IMPLS = ("podfleet.fabric.sim", "podfleet.fabric.local", "podfleet.fabric.ray", "podfleet.fabric.neuron")


def modules(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_the_control_plane_imports_no_fabric_implementation_and_no_rehearsal_code() -> None:
    bad = {
        f"{p.relative_to(ROOT)} imports {m}"
        for p in [*modules(*CONTROL_PLANE), ROOT / "compose.py"]
        for m in imports(p)
        if m.startswith(FABRIC_IMPLS) or m.startswith("podfleet.twin")
    }
    assert not bad, sorted(bad)


def test_only_the_surfaces_import_operations_intelligence() -> None:
    # ops/ sits above the control plane and the rehearsal package; api/, cli/ use it.
    below = ("control", "recovery", "health", "scheduler", "fabric", "twin", "engine", "hardware", "perf",
             "planner", "store", "training", "checkpoint", "security")
    bad = {
        f"{p.relative_to(ROOT)} imports {m}"
        for p in [*modules(*below), ROOT / "compose.py"]
        for m in imports(p)
        if m.startswith("podfleet.ops")
    }
    assert not bad, sorted(bad)


def test_models_import_nothing_above_them() -> None:
    allowed = {
        "hardware": ("podfleet.hardware", "podfleet.errors", "podfleet.states"),
        "perf": ("podfleet.perf", "podfleet.hardware", "podfleet.errors"),
        "planner": ("podfleet.planner", "podfleet.perf", "podfleet.hardware", "podfleet.errors"),
    }
    bad = {
        f"{p.relative_to(ROOT)} imports {m}"
        for pkg, ok in allowed.items()
        for p in modules(pkg)
        for m in imports(p)
        if m.startswith("podfleet") and not m.startswith(ok)
    }
    assert not bad, sorted(bad)


def test_fabrics_are_asked_by_capability_never_by_name() -> None:
    # Only the fabric factory maps names to classes; the spec validates names it accepts.
    pattern = re.compile(r"(spec\.fabric|fabric\.kind|\.kind)\s*(==|!=|in)\s*[\"'(](sim|local|ray|neuron)|is_real|"
                         r"REAL_FABRICS|(getattr|hasattr)\([^)]*fabric")
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in modules(*CONTROL_PLANE, "ops")
        if p.name != "specs.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not bad, bad


def test_one_writer_of_checkpoint_records_and_of_chip_ownership() -> None:
    ckpt = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
            if "CheckpointRecord(" in p.read_text() and p.parts[-2] not in ("store", "twin")]
    assert ckpt == ["control/jobtable.py"]
    owner_writes = re.compile(r"\bowner\[[^\]]+\]\s*=|del\s+\S*owner\[|\bowner\.pop\(")
    bad = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in modules("control", "recovery")
           for line in p.read_text().splitlines()
           # ``pod.owner``: the scheduler's own arrays, derived from ChipOwners in ``sync``
           if owner_writes.search(line) and "pod.owner" not in line]
    assert not bad, bad


def test_the_console_is_a_surface_mounted_only_by_the_server() -> None:
    # Nothing below the surfaces imports it; of the API, only ``podfleet up``'s server mounts it.
    users = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
             if p.parts[-2] != "console" and any(m.startswith("podfleet.console") for m in imports(p))}
    assert users <= {"api/server.py"}, sorted(users)
