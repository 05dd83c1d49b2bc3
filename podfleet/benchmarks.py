"""Benchmark registry: every ``bench/*.py`` in the repository defines one benchmark.

A benchmark module defines ``NAME`` (str), ``DESCRIPTION`` (str) and
``run(quick: bool = False) -> dict`` returning named figures (JSON-serialisable). One
that declares ``VARIANTS = ("fleet",)`` also takes ``fleet=True`` (``bench run NAME --fleet``);
one that declares ``FABRICS`` (the first its default) takes ``fabric=`` one of them
(``bench run NAME --fabric ray``).
The runner adds ``benchmark``, ``quick``, ``machine`` and ``date`` so every figure can
be traced to where and when it was measured.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from podfleet.errors import InvalidInputError, UnknownNameError


def bench_dir() -> Path:
    env = os.environ.get("PODFLEET_BENCH_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "bench"


@dataclass(frozen=True)
class Benchmark:
    name: str
    description: str
    module: ModuleType


def discover() -> dict[str, Benchmark]:
    out: dict[str, Benchmark] = {}
    for path in sorted(bench_dir().glob("*.py")):
        if path.name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"podfleet_bench_{path.stem}", path)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        # Registered before executing so dataclasses and pickling inside a bench module work.
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        out[mod.NAME] = Benchmark(mod.NAME, getattr(mod, "DESCRIPTION", ""), mod)
    return out


def run(name: str, quick: bool = False, fleet: bool = False, fabric: str | None = None) -> dict[str, Any]:
    benches = discover()
    if name not in benches:
        raise UnknownNameError("benchmark", name, benches, field="name")
    mod = benches[name].module
    with_fleet = [n for n, b in benches.items() if "fleet" in getattr(b.module, "VARIANTS", ())]
    if fleet and name not in with_fleet:
        raise InvalidInputError(f"benchmark {name} has no --fleet variant (those with one: "
                                f"{', '.join(with_fleet) or 'none'})", field="fleet", allowed=with_fleet)
    kwargs: dict[str, Any] = {"fleet": True} if fleet else {}
    if fabric is not None:
        fabrics = tuple(getattr(mod, "FABRICS", ()))
        if fabric not in fabrics:
            with_fabric = [n for n, b in benches.items() if getattr(b.module, "FABRICS", ())]
            why = (f"runs on {', '.join(fabrics)}" if fabrics else
                   f"has no --fabric choice (those with one: {', '.join(with_fabric) or 'none'})")
            raise InvalidInputError(f"benchmark {name} {why}, not --fabric {fabric}", field="fabric",
                                    allowed=list(fabrics) or with_fabric)
        kwargs["fabric"] = fabric
    t0 = time.perf_counter()
    figures = mod.run(quick=quick, **kwargs)
    return {
        "benchmark": name,
        "quick": quick,
        **({"fleet": True} if fleet else {}),
        **figures,
        "bench_wall_s": round(time.perf_counter() - t0, 3),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_implementation()} {platform.python_version()}",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
