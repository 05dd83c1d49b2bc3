"""Stand-in for ``neuron-monitor``: replay recorded reports, one JSON document per line.

    python replay.py FILE [--delay S] [--then repeat|sleep|exit|garbage] [--exit-code N] [--host-env VAR]

FILE is JSON lines (a ``.json`` file holds one document). Each document is printed on
one line, ``--delay`` seconds apart; then ``--then`` decides: ``repeat`` the last
document every delay (a healthy monitor), ``sleep`` silently, ``exit`` with
``--exit-code`` (a crashed monitor; stderr says so), or print ``garbage`` every delay.
With ``--host-env VAR``, ``{host}`` in FILE is that variable's value: each Ray node
of a multi-host test replays its own host's documents. Standalone on purpose (no podfleet import): the fabric runs it as a command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def documents(path: Path) -> list[str]:
    text = path.read_text()
    if path.suffix == ".json":
        return [json.dumps(json.loads(text), separators=(",", ":"))]
    return [line for line in text.splitlines() if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", type=Path)
    ap.add_argument("--delay", type=float, default=0.1)
    ap.add_argument("--then", choices=("repeat", "sleep", "exit", "garbage"), default="repeat")
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--host-env", help="FILE's {host} is this environment variable's value (a host's own document)")
    args = ap.parse_args()
    if args.host_env:
        args.file = Path(str(args.file).replace("{host}", os.environ[args.host_env]))
    docs = documents(args.file)
    out = sys.stdout
    try:
        for doc in docs:
            out.write(doc + "\n")
            out.flush()
            time.sleep(args.delay)
        if args.then == "exit":
            print(f"replay: {args.file.name} done, exiting with code {args.exit_code}", file=sys.stderr, flush=True)
            return args.exit_code
        while True:
            if args.then == "repeat" and docs:
                out.write(docs[-1] + "\n")
            elif args.then == "garbage":
                out.write("this is not a neuron-monitor report\n")
            out.flush()
            time.sleep(max(args.delay, 0.01))
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main())
