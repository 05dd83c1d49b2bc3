"""Stand-in for ``neuron-ls --json-output``: print a recorded document.

    python replay_ls.py FILE [--exit-code N] [--host-env VAR]

With ``--exit-code N`` (N != 0) it prints an error to stderr and exits with N instead;
with ``--host-env VAR``, ``{host}`` in FILE is that variable's value (a host's own document).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", type=Path)
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--host-env", help="FILE's {host} is this environment variable's value (a host's own document)")
    args = ap.parse_args()
    if args.host_env:
        args.file = Path(str(args.file).replace("{host}", os.environ[args.host_env]))
    if args.exit_code:
        print("neuron-ls: no Neuron driver loaded (replayed failure)", file=sys.stderr)
        return args.exit_code
    sys.stdout.write(args.file.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
