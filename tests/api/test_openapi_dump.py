"""The console's generated API types match the app: ``console/src/generated/openapi.json``
is the document the app serves now, and ``api.d.ts`` is what openapi-typescript makes of
it. A schema change without ``make console-types`` fails here instead of drifting."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from podfleet.api import openapi_dump

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "console" / "src" / "generated"
GENERATOR = ROOT / "console" / "node_modules" / ".bin" / "openapi-typescript"
FIX = "regenerate with `make console-types` and commit console/src/generated/"


def test_the_committed_document_is_the_apps() -> None:
    committed = (GENERATED / "openapi.json").read_text()
    current = openapi_dump.render(openapi_dump.document())
    if committed != current:
        a, b = json.loads(committed), json.loads(current)
        changed = sorted(k for k in {*a["paths"], *b["paths"]} if a["paths"].get(k) != b["paths"].get(k))
        schemas = sorted(k for k in {*a["components"]["schemas"], *b["components"]["schemas"]}
                         if a["components"]["schemas"].get(k) != b["components"]["schemas"].get(k))
        pytest.fail(f"console/src/generated/openapi.json is stale (paths {changed}, schemas {schemas}): {FIX}")


def test_the_render_is_stable_and_a_change_shows() -> None:
    doc = openapi_dump.document()
    assert openapi_dump.render(doc) == openapi_dump.render(json.loads(openapi_dump.render(doc)))
    doc["components"]["schemas"]["Job"]["properties"]["extra_field"] = {"type": "string"}
    assert openapi_dump.render(doc) != (GENERATED / "openapi.json").read_text()


@pytest.mark.skipif(not GENERATOR.exists() or shutil.which("node") is None,
                    reason="console/node_modules not installed (make console)")
def test_the_committed_types_are_generated_from_the_committed_document(tmp_path: Path) -> None:
    out = tmp_path / "api.d.ts"
    subprocess.run([str(GENERATOR), str(GENERATED / "openapi.json"), "-o", str(out)],
                   check=True, capture_output=True, timeout=120)
    assert out.read_text() == (GENERATED / "api.d.ts").read_text(), f"console/src/generated/api.d.ts is stale: {FIX}"
