"""``python -m podfleet.fabric.local.agent --dir DIR [--grace-s S] [--idle-exit-s S]``: run an agent."""

from __future__ import annotations

import argparse
from pathlib import Path

from podfleet.fabric.local.agent.server import run


def main() -> None:
    ap = argparse.ArgumentParser(prog="podfleet-agent")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--grace-s", type=float, default=None)
    ap.add_argument("--idle-exit-s", type=float, default=None)
    a = ap.parse_args()
    run(Path(a.dir), grace_s=a.grace_s, idle_exit_s=a.idle_exit_s)


if __name__ == "__main__":
    main()
