"""Print the API's OpenAPI document, as ``/openapi.json`` serves it, without serving it.

    python -m podfleet.api.openapi_dump [--output FILE]

The console's TypeScript types are generated from this file (``console/src/generated``),
and a test compares the committed copy with the app's document, so a schema change that
is not regenerated fails CI instead of drifting from the console."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from podfleet import compose
from podfleet.api.main import create_app
from podfleet.engine.timeline import Timeline
from podfleet.store.memory import MemoryStore


def document() -> dict[str, Any]:
    """The app's OpenAPI document: the same routes ``podfleet up`` serves (the console's pages
    are left out of the schema), over an in-memory control plane that is never started."""
    parts = compose.build(MemoryStore(), Timeline(seed=0))
    app = create_app(parts.plane, parts.health, recovery=parts.recovery, firmware=parts.firmware,
                     maintenance=parts.maintenance)
    return app.openapi()


def render(doc: dict[str, Any]) -> str:
    """Stable text: sorted keys and a final newline, so a diff shows only real changes."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    text = render(document())
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
