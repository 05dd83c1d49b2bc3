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
        if m.startswith(FABRIC_IMPLS) or m.startswith("podfleet.rehearsal")
    }
    assert not bad, sorted(bad)


def test_only_the_surfaces_import_operations_intelligence() -> None:
    # advisor/ sits above the control plane and the rehearsal package; api/, cli/ use it.
    below = ("control", "recovery", "health", "scheduler", "fabric", "rehearsal", "engine", "hardware", "perf",
             "planner", "store", "training", "checkpoint", "security")
    bad = {
        f"{p.relative_to(ROOT)} imports {m}"
        for p in [*modules(*below), ROOT / "compose.py"]
        for m in imports(p)
        if m.startswith("podfleet.advisor")
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
        for p in modules(*CONTROL_PLANE, "advisor")
        if p.name != "specs.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not bad, bad


def test_one_writer_of_checkpoint_records_and_of_chip_ownership() -> None:
    ckpt = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
            if "CheckpointRecord(" in p.read_text() and p.parts[-2] not in ("store", "rehearsal")]
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


# --- import circles ------------------------------------------------------------------------------
#
# Every import counts: at module level, inside a function (a lazy import hides a runtime
# circle, it does not remove it) and under ``if TYPE_CHECKING:`` (a type-level circle
# still means the two modules can only be understood together). Where a type must cross
# back up, the module below declares the Protocol it needs (``control.ports``,
# ``fabric.sim.context.StepModel``, ``security.retention.ArchivableStore``, ...) and the
# module above satisfies it structurally. Not counted: the implicit import of a package's
# ``__init__`` by its submodules (a package re-exporting its parts is no circle);
# ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
# ``pkg`` itself.

def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """Module -> the podfleet modules it imports anywhere in its body (see above)."""
    graph: dict[str, set[str]] = {}
    for mod, path in MODULES.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up ``level - 1``
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
            for name in names:
                while name and name not in MODULES:  # ``podfleet.x.y.Name`` -> its module
                    name = name.rpartition(".")[0]
                if name and name != mod:
                    out.add(name)
        graph[mod] = out
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_circle_finder_finds_circles() -> None:
    # The rule below cannot pass by a finder that never finds anything.
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    graph = import_graph()
    assert "podfleet.control.runtime" in graph["podfleet.control.plane"]  # edges are found
    assert "podfleet.fabric.sim.perfstep" in graph["podfleet.fabric.sim.workload"]  # lazy ones too


def test_no_import_circle_inside_podfleet() -> None:
    found = circles(import_graph())
    assert not found, found


def test_no_import_circle_between_packages() -> None:
    # podfleet.<package> -> podfleet.<package>: arrows between packages point one way.
    def top(mod: str) -> str:
        return mod.split(".")[1] if mod.count(".") else mod

    graph: dict[str, set[str]] = {}
    for mod, deps in import_graph().items():
        graph.setdefault(top(mod), set()).update(top(d) for d in deps if top(d) != top(mod))
    found = circles(graph)
    assert not found, found


# --- the composition root --------------------------------------------------------------------------

def test_only_the_composition_root_builds_and_wires_the_parts() -> None:
    # The plane builds no fabric of its own (it is given a FabricFactory) and does not
    # even import the factory that names them; the services are built in compose.py only.
    built = re.compile(r"\b(ControlPlane|HealthService|RecoveryService|FirmwareService|PlannerAdapter)\(")
    bad = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in ROOT.rglob("*.py") if p.name != "compose.py"
           for n, line in enumerate(p.read_text().splitlines(), 1)
           if built.search(line) and not line.lstrip().startswith(("#", "``", "class ")) and "``" not in line]
    assert not bad, bad
    factory = {f"{p.relative_to(ROOT)}" for p in modules(*CONTROL_PLANE) if "podfleet.fabric.factory" in imports(p)}
    assert not factory, sorted(factory)


def test_health_is_health_only() -> None:
    # Recovery and firmware rollouts are their own services (podfleet.recovery): the health
    # service reaches recovery only through the DrainPort compose hands it.
    from podfleet.health.service import HealthService

    bad = {f"{p.relative_to(ROOT)} imports {m}" for p in modules("health") for m in imports(p)
           if m.startswith("podfleet.recovery")}
    assert not bad, sorted(bad)
    assert not {"recoveries", "start_firmware", "firmware", "firmware_rollouts"} & set(dir(HealthService))
    # Nobody reaches into the recovery service's orchestrators but recovery itself.
    reach = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in ROOT.rglob("*.py") if p.parts[-2] != "recovery"
             for line in p.read_text().splitlines() if re.search(r"\.recovery\.orch\b", line)]
    assert not reach, reach


def test_the_scheduler_reaches_the_planner_only_through_its_port() -> None:
    # ``ShapePlanner`` (scheduler.extension) is declared by the scheduler and implemented by
    # ``planner.adapter.PlannerAdapter``; nothing in the scheduler loads or imports a planner.
    bad = {f"{p.relative_to(ROOT)} imports {m}" for p in modules("scheduler") for m in imports(p)
           if m.startswith("podfleet.planner") or m == "importlib"}
    assert not bad, sorted(bad)


def test_shared_helpers_sit_below_their_users() -> None:
    # The balancer and the health scan share their sample helpers from the scheduler
    # (scheduler.samples); verification takes its collective model from perf, not the twin;
    # security never imports the store (the store imports security's audit chain);
    # the console meets the API only through the auth port the server hands it.
    rules = {
        "control": ("podfleet.health", "podfleet.recovery", "podfleet.advisor", "podfleet.api"),
        "advisor/verify.py": ("podfleet.fabric.sim",),
        "security": ("podfleet.store", "podfleet.control", "podfleet.api"),
        "console": ("podfleet.api",),
        "scheduler": ("podfleet.control", "podfleet.health", "podfleet.recovery"),
    }
    bad = {f"{p.relative_to(ROOT)} imports {m}"
           for where, banned in rules.items()
           for p in ([ROOT / where] if where.endswith(".py") else modules(where))
           for m in imports(p) if m.startswith(banned)}
    assert not bad, sorted(bad)


def test_no_helper_of_the_plane_imports_the_plane() -> None:
    # Helpers get ``control.ports.PlaneCore``/``PlanePort``, never the whole ``ControlPlane``.
    bad = {str(p.relative_to(ROOT)) for p in modules("control", "recovery", "health", "scheduler")
           if "podfleet.control.plane" in imports(p) and p.name not in ("__init__.py", "plane.py")}
    assert not bad, sorted(bad)


# --- one writer of a job's status --------------------------------------------------------------------

_MUTATORS = frozenset({"append", "extend", "update", "pop", "clear", "insert", "remove", "setdefault"})


def _reaches_status(node: ast.AST) -> bool:
    """``x.status.y...`` or ``x.status``: an attribute chain through a ``status`` attribute.
    A cluster record's ``rec.status`` (``ClusterStatus``) is left to
    ``record_writes`` below, so only a job's typed ``JobStatus`` is seen here."""
    while isinstance(node, ast.Attribute):
        if node.attr == "status":
            # ``rec.status`` is a cluster record's (``ClusterStatus``), not a job's.
            return not (isinstance(node.value, ast.Attribute) and node.value.attr == "rec")
        node = node.value
    return False


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def status_writes(source: str) -> list[int]:
    """Lines that write a job's status outside the job table: an assignment or augmented
    assignment to an attribute reached through ``.status``, a mutating call on one, or
    either through a name bound to such a chain or to a job's run counts."""
    tree = ast.parse(source)

    def counts_call(v: ast.AST) -> bool:  # ``self.counts(job)``, ``table.run_counts(job)``
        return isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute | ast.Name) and \
            (v.func.attr if isinstance(v.func, ast.Attribute) else v.func.id) in ("counts", "run_counts")

    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and (_reaches_status(node.value) or counts_call(node.value)):
            aliases.add(node.targets[0].id)

    def through(obj: ast.AST) -> bool:  # ``obj`` is a job's status, its run counts, or part of them
        root = _root(obj)
        return _reaches_status(obj) or counts_call(root) or (isinstance(root, ast.Name) and root.id in aliases)

    def written(target: ast.AST) -> bool:
        return isinstance(target, ast.Attribute) and through(target.value)

    bad = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        if any(written(t) for t in targets):
            bad.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            obj = node.func.value
            if isinstance(obj, ast.Attribute) and through(obj):
                bad.append(node.lineno)
    return bad


def test_the_status_write_finder_finds_writes() -> None:
    assert status_writes("job.status.reason = 'x'\n") == [1]
    assert status_writes("st = job.status\nst.plan = {}\n") == [2]
    assert status_writes("c = self.counts(job)\nc.launches += 1\nc.recoveries.append(1)\n") == [2, 3]
    assert status_writes("self.counts(job).recoveries.append(rec)\n") == [1]
    assert status_writes("job.status.scheduling.preemptions += 1\n") == [1]
    assert status_writes("rt.rec.status['reason'] = 'x'\nx = job.status.reason\n") == []


def test_only_the_job_table_writes_a_jobs_status() -> None:
    # ``JobTable`` (transition, end, progress, amend, scheduled, count_run, ...) is the one
    # writer of ``job.status``; everyone else in podfleet/ (the store and the fabrics too)
    # reads it.
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in sorted(ROOT.rglob("*.py"))
           if str(p.relative_to(ROOT)) != "control/jobtable.py" for n in status_writes(p.read_text())]
    assert not bad, bad


# --- one writer of a cluster's record, and of a job's other fields -------------------------------

_RECORD_FIELDS = frozenset({"state", "updated_at", "spec", "status"})
_RECORD_NAMES = frozenset({"job", "j", "rec", "record"})


def _a_record(node: ast.AST) -> bool:
    """``rec``/``job``/``j`` or ``x.rec``: a cluster's record or a job, by the names the code
    gives them."""
    return (isinstance(node, ast.Name) and node.id in _RECORD_NAMES) or \
        (isinstance(node, ast.Attribute) and node.attr == "rec")


def _through_record_status(node: ast.AST) -> bool:
    """``rec.status`` or ``x.rec.status``, or anything reached through it."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute) and node.attr == "status" and _a_record(node.value) \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("job", "j")):
            return True
        node = node.value
    return False


def record_writes(source: str) -> list[int]:
    """Lines that write a record's own fields (``rec.state = ...``, ``job.updated_at = ...``),
    a cluster record's status (``rt.rec.status.reason = ...``, ``rec.status["x"] = ...``,
    ``rec.status.deployment.update(...)``)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        for t in targets:
            if (isinstance(t, ast.Attribute) and t.attr in _RECORD_FIELDS and _a_record(t.value)) or \
                    (isinstance(t, ast.Attribute | ast.Subscript) and _through_record_status(t.value)):
                bad.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS \
                and _through_record_status(node.func.value):
            bad.append(node.lineno)
        if isinstance(node, ast.Delete) and any(isinstance(t, ast.Subscript) and _through_record_status(t.value)
                                                for t in node.targets):
            bad.append(node.lineno)
    return sorted(set(bad))


def test_the_record_write_finder_finds_writes() -> None:
    assert record_writes("rt.rec.state = 'active'\n") == [1]
    assert record_writes("rec.status.reason = 'x'\n") == [1]
    assert record_writes("rt.rec.status['reason'] = 'x'\n") == [1]
    assert record_writes("pending.rec.status.deployment.update(x)\n") == [1]
    assert record_writes("rec.updated_at = now\njob.state = s\n") == [1, 2]
    assert record_writes("x = rt.rec.status.reason\nself.state = 1\nrun.state = 2\nrt.set_reason('x')\n") == []


def test_only_the_owners_write_a_cluster_record_or_a_jobs_fields() -> None:
    # A cluster's record changes through ``ClusterRecordOwner`` (``control.clusterrecord``:
    # ``ClusterRuntime`` and ``ConnectingCluster`` are owners); a job's state and timestamps
    # through ``JobTable``. The store only persists them.
    owners = {"control/clusterrecord.py", "control/jobtable.py"}
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in sorted(ROOT.rglob("*.py"))
           if str(p.relative_to(ROOT)) not in owners for n in record_writes(p.read_text())]
    assert not bad, bad


def test_the_agent_is_a_fabric_part_and_its_seam_stays_narrow() -> None:
    # The agent (fabric/local/agent) runs without a control plane: it imports nothing of
    # one, nor the fabric that talks to it. The fabric reaches who parents its workers only
    # through ``spawner.Spawner`` and the agent's client; nothing else in the local fabric
    # imports the agent's server.
    above = ("podfleet.control", "podfleet.recovery", "podfleet.health", "podfleet.scheduler", "podfleet.api",
             "podfleet.cli", "podfleet.fabric.local.fabric", "podfleet.fabric.local.recovery")
    agent = modules("fabric/local/agent")
    bad = {f"{p.relative_to(ROOT)} imports {m}" for p in agent for m in imports(p) if m.startswith(above)}
    bad |= {f"{p.relative_to(ROOT)} imports {m}" for p in modules("fabric/local") if p not in agent
            for m in imports(p) if m.startswith("podfleet.fabric.local.agent.server")}
    assert not bad, sorted(bad)


# --- layers: every arrow between packages points down ----------------------------------------------
#
# The table of docs/architecture.md ("Packages, top to bottom"), finer: a package may import
# only packages of a later row, never one of its own row or of an earlier one. A new arrow up
# (the balancer reaching into the health scan, security into the store, the console into the
# API, ...) fails here by name, before it closes a circle.

LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli",),
    ("api",),
    ("console", "sdk"),
    ("advisor",),
    ("rehearsal",),
    ("compose",),
    ("health", "recovery"),
    ("control",),
    ("scheduler",),
    ("fabric",),
    ("store", "training"),
    ("security",),
    ("checkpoint", "planner"),
    ("perf",),
    ("hardware", "engine", "benchmarks", "settings"),
    ("states", "timespec", "validation", "wire"),
    ("errors", "podfleet"),
)


def _package(mod: str) -> str:
    return mod.split(".")[1] if mod.count(".") else mod


def back_up_arrows(graph: dict[str, set[str]]) -> list[str]:
    rank = {pkg: n for n, row in enumerate(LAYERS) for pkg in row}
    return sorted(f"{mod} imports {dep}" for mod, deps in graph.items() for dep in deps
                  if _package(dep) != _package(mod) and rank[_package(dep)] <= rank[_package(mod)])


def test_the_layer_check_finds_arrows_up() -> None:
    assert back_up_arrows({"podfleet.control.balancing": {"podfleet.health.scan"}}) == \
        ["podfleet.control.balancing imports podfleet.health.scan"]
    assert back_up_arrows({"podfleet.health.scan": {"podfleet.recovery.service"}}) != []  # one row: no arrow
    assert back_up_arrows({"podfleet.health.scan": {"podfleet.control.owners", "podfleet.health.x"}}) == []


def test_every_package_has_a_layer_and_imports_only_below_it() -> None:
    graph = import_graph()
    placed = {pkg for row in LAYERS for pkg in row}
    assert {_package(m) for m in graph} <= placed, sorted({_package(m) for m in graph} - placed)
    assert not back_up_arrows(graph), back_up_arrows(graph)


# --- surfaces read read models, not a fabric or the store ----------------------------------------------

def surface_reads(source: str) -> list[int]:
    """Lines where a surface reaches past the plane's read models: a cluster runtime's fabric
    (``rt.fabric``, ``plane.clusters[cid].fabric``) or the plane's store (``plane.store``,
    ``request.app.state.plane.store``)."""
    def named(node: ast.AST, names: set[str]) -> bool:
        return (isinstance(node, ast.Name) and node.id in names) or \
            (isinstance(node, ast.Attribute) and node.attr in names)

    bad = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        on = node.value
        runtime = named(on, {"rt", "runtime", "cluster"}) or \
            (isinstance(on, ast.Subscript) and named(on.value, {"clusters"}))
        if (node.attr == "fabric" and runtime) or (node.attr == "store" and named(on, {"plane"})):
            bad.append(node.lineno)
    return sorted(set(bad))


def test_the_surface_read_finder_finds_reads() -> None:
    assert surface_reads("m = rt.fabric.chip_metrics()\n") == [1]
    assert surface_reads("fab = plane.clusters[cid].fabric\n") == [1]
    assert surface_reads("x = request.app.state.plane.store.ping()\n") == [1]
    assert surface_reads("s = settings.fabric\nb = body.fabric\nplane.hardware(cid)\nself.store.get(1)\n") == []


# The composition of the HTTP side hands the store to the caches and stores it serves from
# (tokens, users, reports, the audit routes' port, the leadership lease): wiring, not a read.
SURFACE_WIRING = {"api/main.py", "api/server.py"}
# The routes that read the store get it as a narrow port from that wiring (``deps.Audit``,
# ``deps.StorePing``, ``deps.Users`` for ListUsers/DescribeUser, handed to
# ``control.users.listing``/``describe`` in place of the plane); the Prometheus collectors
# read the fabric readouts the engine publishes for a scrape (``control.readout``). The
# check is textual, over the surface modules' own code: a control function a route hands
# the whole plane to could still read ``plane.store`` on the API thread, which is why the
# user reads take the ``UserReader`` port rather than the plane. No surface reads remain.


def test_surfaces_read_no_fabric_and_no_store() -> None:
    found = {str(p.relative_to(ROOT)): len(lines) for p in modules("api", "console", "cli")
             if str(p.relative_to(ROOT)) not in SURFACE_WIRING and (lines := surface_reads(p.read_text()))}
    assert not found, found


def test_surfaces_import_no_fabric_implementation() -> None:
    # A surface meets a fabric only through the engine's read models and the factory's
    # declared entry points; importing an implementation would let it read one directly.
    # ``podfleet agent`` is the exception by design: it is the entry point of the local
    # fabric's host agent (a process of that fabric), not a reader of a running fabric.
    agent_entry = {"cli/agent.py"}
    bad = {
        f"{p.relative_to(ROOT)} imports {m}"
        for p in modules("api", "console", "cli")
        if str(p.relative_to(ROOT)) not in agent_entry
        for m in imports(p)
        if m.startswith(FABRIC_IMPLS)
    }
    assert not bad, sorted(bad)


# --- the store: one module per noun, each on its backend's base only ----------------------------------
#
# ``store/sql/<noun>.py`` and ``store/memory/<noun>.py`` implement one ``store.protocol`` noun
# each on their backend's ``base``; the packages' ``__init__`` (and ``store/db.py``) compose
# them. A noun's module reaching into another noun's (or the other backend's) would put the
# one-interface-for-every-noun store back together by the side door.

STORE_BACKENDS = ("podfleet.store.sql", "podfleet.store.memory")


def cross_noun_imports(graph: dict[str, set[str]]) -> list[str]:
    def backend_part(mod: str) -> tuple[str, str] | None:
        pkg, _, name = mod.rpartition(".")
        return (pkg, name) if pkg in STORE_BACKENDS else None

    bad = []
    for mod, deps in graph.items():
        if (own := backend_part(mod)) is None or own[1] == "base":
            continue
        for dep in deps:
            if (dep in STORE_BACKENDS or backend_part(dep) is not None) and dep != f"{own[0]}.base":
                bad.append(f"{mod} imports {dep}")
    return sorted(bad)


def test_the_cross_noun_finder_finds_imports_between_nouns() -> None:
    graph = {
        "podfleet.store.sql.jobs": {"podfleet.store.sql.base", "podfleet.store.sql.clusters", "podfleet.store.models"},
        "podfleet.store.memory.jobs": {"podfleet.store.memory.base", "podfleet.store.sql.base"},
        "podfleet.store.memory.users": {"podfleet.store.memory"},  # the whole composition
        "podfleet.store.memory.base": {"podfleet.store.memory.jobs"},  # the base is not a noun
        "podfleet.store.sql": {"podfleet.store.sql.jobs"},  # the package composes its nouns
        "podfleet.store.sql.tokens": {"podfleet.store.sql.base", "podfleet.store.records"},
    }
    assert cross_noun_imports(graph) == [
        "podfleet.store.memory.jobs imports podfleet.store.sql.base",
        "podfleet.store.memory.users imports podfleet.store.memory",
        "podfleet.store.sql.jobs imports podfleet.store.sql.clusters",
    ]
    # The rule below walks real modules: the nouns are there, and their base is an edge.
    graph = import_graph()
    assert "podfleet.store.sql.base" in graph["podfleet.store.sql.jobs"]
    assert "podfleet.store.memory.base" in graph["podfleet.store.memory.jobs"]


def test_a_nouns_store_module_imports_no_other_nouns() -> None:
    found = cross_noun_imports(import_graph())
    assert not found, found
    # Both backends keep the same nouns: a noun implemented in one only is half a split.
    nouns = {pkg: {p.stem for p in (ROOT / pkg.split(".", 1)[1].replace(".", "/")).glob("*.py")} - {"__init__"}
             for pkg in STORE_BACKENDS}
    assert nouns["podfleet.store.sql"] == nouns["podfleet.store.memory"], nouns
