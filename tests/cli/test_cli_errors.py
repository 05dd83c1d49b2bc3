"""Every CLI command, with bad values of each option: one line on stderr, a non-zero exit,
never a traceback; and every option described in --help.

The commands are found by walking the Typer app, so a new command or option is covered
(or, for an option without help, refused) without a line added here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from podfleet.cli.main import app
from tests.api.conftest import Live

runner = CliRunner()
ROOT = typer.main.get_command(app)


def leaves(cmd: Any = ROOT, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in sorted(subs.items()):
            yield from leaves(sub, (*path, name))
    else:
        yield path, cmd


COMMANDS = dict(leaves())


def _kind(p: Any) -> str:
    return type(p.type).__name__


def test_every_option_and_argument_is_described() -> None:
    missing = [f"podfleet {' '.join(path)} {p.opts[0] if p.param_type_name == 'option' else p.name}"
               for path, cmd in COMMANDS.items() for p in cmd.params
               if p.name != "help" and not (getattr(p, "help", None) or "").strip()]
    assert not missing, missing


def test_top_level_help_is_grouped_sorted_and_whole() -> None:
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    out = r.stdout
    panels = ["Clusters:", "Jobs:", "Chips:", "Health:", "Security:", "Tools:"]
    at = [out.index(p) for p in panels]
    assert at == sorted(at), "panels in their order"
    for i, p in enumerate(panels):
        block = out[at[i]: at[i + 1] if i + 1 < len(at) else len(out)]
        names = [ln.split()[0] for ln in block.splitlines()[1:] if ln.startswith("  ") and not ln.startswith("    ")]
        assert names == sorted(names) and names, (p, names)
    listed = " ".join(out[at[0]:].split())
    for name, cmd in ROOT.commands.items():  # every summary is its whole first sentence
        summary = cmd.get_short_help_str(limit=1000)
        assert summary.endswith(".") and " ".join(summary.split()) in listed, (name, summary)
    assert "..." not in listed


def test_no_command_without_a_panel() -> None:
    top = ROOT.commands
    assert all(getattr(c, "rich_help_panel", None) for c in top.values()), \
        [n for n, c in top.items() if not getattr(c, "rich_help_panel", None)]


# --- type errors: refused by the parser, before a command runs -------------------------------

def _placeholder(p: Any, tmp: Path) -> list[str]:
    """A well-formed value for a required parameter, so the bad one is what is refused."""
    kind = _kind(p)
    if kind in ("IntParamType", "IntRange"):
        value = "1"
    elif kind in ("FloatParamType", "FloatRange"):
        value = "1.0"
    elif kind == "TyperPath":
        f = tmp / "file.yaml"
        f.write_text("{}\n")
        value = str(f)
    elif kind == "TyperChoice":
        value = str(p.type.choices[0])
    else:
        value = "x1"
    return [value] if p.param_type_name == "argument" else [p.opts[0], value]


GARBAGE = {"IntParamType": "abc", "IntRange": "abc", "FloatParamType": "abc", "FloatRange": "abc",
           "TyperChoice": "nope"}
TYPED = [(path, p.name) for path, cmd in COMMANDS.items() for p in cmd.params if _kind(p) in GARBAGE]


@pytest.mark.parametrize(("path", "param"), TYPED, ids=[f"{' '.join(p)}:{n}" for p, n in TYPED])
def test_typed_option_refuses_garbage_in_one_line(path: tuple[str, ...], param: str, tmp_path: Path) -> None:
    cmd = COMMANDS[path]
    args: list[str] = []
    for p in cmd.params:
        if p.name == param:
            args += [GARBAGE[_kind(p)]] if p.param_type_name == "argument" else [p.opts[0], GARBAGE[_kind(p)]]
        elif p.required:
            args += _placeholder(p, tmp_path)
    r = runner.invoke(app, [*path, *args], env={"PODFLEET_URL": "http://127.0.0.1:9", "PODFLEET_TOKEN": "x"})
    err = r.stderr.strip()
    assert r.exit_code == 2, (args, r.exit_code, r.output)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("error: ") and f"podfleet {' '.join(path)} -h" in err, err
    target = next(p for p in cmd.params if p.name == param)
    named = target.opts if target.param_type_name == "option" else [target.human_readable_name]
    assert any(n in err for n in named), err


def test_usage_errors_are_one_line() -> None:
    for args in (["chip", "isolate"], ["job", "submit"], ["job", "submit", "c"], ["nosuch"],
                 ["cluster", "create", "x", "--nosuch"]):
        r = runner.invoke(app, args)
        err = r.stderr.strip()
        assert r.exit_code == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), (args, r.output)


# --- against a server: every string option, and the refusals operators meet ---------------------

# Commands that do not talk to a server, or run long or change this machine (served,
# benchmarked, rehearsed, key files): their bad values are covered by the table below.
LOCAL = {("up",), ("bench", "run"), ("bench", "list"), ("sim",), ("token", "reset-admin"), ("keys", "rewrap"),
         ("keys", "retire"), ("keys", "rotate"), ("audit", "verify"), ("topology", "show"), ("docs",), ("plan",),
         ("policy", "simulate"), ("policy", "list"),
         # rehearsals and acceptance runs (many seconds each): bad values in the table below
         ("advise",), ("verify",)}
BAD = "%bad value%"


def run(live: Live, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    e = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["admin"], **(env or {})}
    r = runner.invoke(app, list(args), env=e)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def fixtures(live: Live) -> dict[str, str]:
    code, out, err = run(live, "cluster", "create", "err-pod", "--type", "trn2-node", "--spares", "1", "-o", "json")
    assert code == 0, err
    code, out, err = run(live, "job", "submit", "err-pod", "--model", "debug", "--chips", "4", "--steps", "10000000",
                         "-o", "json")
    assert code == 0, err
    return {"cluster": "err-pod", "job": json.loads(out)["id"]}


def _valid(p: Any, fx: dict[str, str], tmp: Path) -> list[str]:
    name = p.name
    if name in ("cluster", "target"):
        value = fx["cluster"]
    elif name in ("job_id", "job"):
        value = fx["job"]
    elif name in ("chip",):
        value = "1"
    elif name == "directory":
        value = str(tmp)
    else:
        return _placeholder(p, tmp)
    return [value] if p.param_type_name == "argument" else [p.opts[0], value]


STRINGS = [(path, p.name) for path, cmd in COMMANDS.items() if path not in LOCAL for p in cmd.params
           if _kind(p) in ("StringParamType", "TyperPath") and p.name not in ("url", "token")]


@pytest.mark.parametrize(("path", "param"), STRINGS, ids=[f"{' '.join(p)}:{n}" for p, n in STRINGS])
def test_string_option_with_a_bad_value_is_one_line(live: Live, fixtures: dict[str, str], path: tuple[str, ...],
                                                    param: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a value taken as a file name (report --out) lands here
    cmd = COMMANDS[path]
    args: list[str] = []
    for p in cmd.params:
        if p.name == param:
            args += [BAD] if p.param_type_name == "argument" else [p.opts[0], BAD]
        elif p.required:
            args += _valid(p, fixtures, tmp_path)
    code, out, err = run(live, *path, *args, "-o", "json")
    assert "Traceback" not in err and "Traceback" not in out, err
    # Free text (a name, a reason) may be accepted; a refusal is one line and says why.
    if code != 0:
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), (args, err)
        assert out == "", out


def test_the_string_walk_covers_the_server_commands() -> None:
    assert len(STRINGS) > 50 and {("job", "submit"), ("cluster", "create"), ("fault", "inject")} <= {s[0] for s in STRINGS}


REFUSALS = [
    # (args, exit code, words the one line must hold)
    (["cluster", "create", "bad", "--spares", "9"], 2, ["--spares: 9 is too large", "0-4"]),
    (["cluster", "create", "pod-O"], 2, ["names are lowercase", "try 'pod-o'"]),
    (["cluster", "create", "bad", "--fabric", "rey"], 2, ["--fabric: 'rey'", "did you mean 'ray'?", "neuron"]),
    (["cluster", "create", "bad", "--type", "tpu-pod"], 2, ["trn2-ultraserver"]),
    (["cluster", "describe", "err-pdo"], 3, ["not found", "did you mean 'err-pod'?", "clusters: "]),
    (["job", "submit", "err-pod", "--model", "debug", "--chips", "0"], 2, ["--chips: 0 is too small", "1-65536"]),
    (["job", "submit", "err-pod", "--model", "debug", "--chips", "4", "--steps", "-5"], 2, ["--steps: -5", "1-1000000000"]),
    (["job", "submit", "err-pod", "--model", "debug", "--chips", "4", "--priority", "500"], 2,
     ["--priority: 500 is too large", "0-100"]),
    (["job", "submit", "err-pod", "--model", "lama3-8b", "--chips", "4"], 2, ["did you mean 'llama3-8b'?"]),
    (["job", "submit", "err-pod", "--model", "debug", "--chips", "99"], 2, ["exceeds what cluster err-pod can place"]),
    (["job", "submit", "err-pod", "--chips", "4", "--entrypoint", "code:abc/train.py"], 2, ["code:<sha256>/<script>"]),
    (["job", "submit", "err-pod", "--chips", "4", "--entrypoint", "nope.py"], 2, ["neither a file here"]),
    (["token", "create", "x", "--role", "superuser"], 2, ["--role: 'superuser'", "admin, operator, viewer"]),
    (["fault", "inject", "err-pod", "--kind", "chip-fial", "--chip", "1"], 2,
     ["did you mean 'chip-failure'?", "kill-worker"]),
    (["fault", "inject", "err-pod", "--slow-worker", "1x2"], 2, ["--slow-worker must look like RANK:FACTOR"]),
    (["fault", "inject", "err-pod", "--slow-worker", "1:0.5"], 2, ["FACTOR in [1, 100]"]),
    (["fault", "inject", "err-pod", "--slow-worker", "1:2"], 2, ["slow-worker needs a cluster of worker processes"]),
    (["job", "list", "--state", "nope"], 2, ["RUNNING"]),
    (["alerts", "list", "err-pod", "--state", "nope"], 2, ["firing"]),
    (["verify", "err-pod", "--max-size", "huge"], 2, ["--max-size"]),
    (["verify", "err-pod", "--ops", "all-gossip"], 2, ["all-gossip"]),
    (["advise", "err-pdo"], 3, ["did you mean 'err-pod'?"]),
    (["advise", "apply", "adv-nope"], 2, ["'adv-nope' is not valid", "^adv-[0-9a-f]+$"]),
]


@pytest.mark.parametrize(("args", "code", "words"), REFUSALS, ids=[" ".join(a) for a, _, _ in REFUSALS])
def test_refusals_name_field_value_allowed_and_fix(live: Live, fixtures: dict[str, str], args: list[str], code: int,
                                                   words: list[str]) -> None:
    rc, out, err = run(live, *args, "-o", "json")
    assert rc == code, (rc, out, err)
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    assert "(1 more)" not in err and "Input should" not in err and err.count("allowed") <= 1, err


def test_validation_never_lists_the_valid_names_twice(live: Live, fixtures: dict[str, str]) -> None:
    _, _, err = run(live, "job", "submit", "err-pod", "--model", "lama3-8b", "--chips", "4")
    assert err.count("megatron-1t") == 1, err


ENV_REFUSALS = [
    ({"PODFLEET_URL": "http://127.0.0.1:8470/v1"}, ["cluster", "list"], 2, ["drop /v1", "http://127.0.0.1:8470"]),
    ({"PODFLEET_URL": "127.0.0.1:8470"}, ["cluster", "list"], 2, ["http://HOST:PORT"]),
    ({"PODFLEET_URL": "http://127.0.0.1:9"}, ["cluster", "list"], 1, ["cannot reach podfleet", "podfleet up"]),
    ({"PODFLEET_TOKEN": ""}, ["cluster", "list"], 5, ["PODFLEET_TOKEN"]),
    ({"PODFLEET_PROFILE": "nope", "PODFLEET_TOKEN": ""}, ["cluster", "list"], 3, ["profile 'nope'"]),
]


@pytest.mark.parametrize(("env", "args", "code", "words"), ENV_REFUSALS, ids=[str(e) for e, *_ in ENV_REFUSALS])
def test_environment_refusals_are_one_line(live: Live, tmp_path: Path, env: dict[str, str], args: list[str],
                                           code: int, words: list[str]) -> None:
    rc, out, err = run(live, *args, env={"PODFLEET_CONFIG": str(tmp_path / "none.toml"), **env})
    assert rc == code, (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


def test_https_against_a_plain_server_says_so(live: Live) -> None:
    rc, _, err = run(live, "cluster", "list", env={"PODFLEET_URL": live.url.replace("http://", "https://")})
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert "does not answer TLS" in err and live.url in err, err


@pytest.mark.parametrize(("args", "env", "words"), [
    (["up", "--speed", "0"], {}, ["--speed: 0.0 is too small", "> 0"]),
    (["up", "--speed", "-3"], {}, ["--speed: -3.0 is too small"]),
    (["up", "--port", "99999"], {}, ["--port: 99999 is too large", "0-65535"]),
    (["up", "--fabric", "rey"], {}, ["did you mean 'ray'?", "neuron"]),
    (["up"], {"PODFLEET_SPEED": "abc"}, ["PODFLEET_SPEED: 'abc' is not a number"]),
    (["up"], {"PODFLEET_PORT": "x"}, ["PODFLEET_PORT: 'x' is not an integer"]),
    (["up"], {"PODFLEET_MAX_BODY_BYTES": "1"}, ["PODFLEET_MAX_BODY_BYTES: '1' is too small", ">= 1024"]),
])
def test_up_refuses_bad_settings_in_one_line(args: list[str], env: dict[str, str], words: list[str]) -> None:
    r = runner.invoke(app, args, env=env)
    err = r.stderr.strip()
    assert r.exit_code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, r.output
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize(("args", "words"), [
    (["plan", "--model", "lama3-8b", "--chips", "8"], ["did you mean 'llama3-8b'?"]),
    (["plan", "--model", "llama3-8b", "--chips", "0"], ["chips"]),
    (["plan", "--model", "llama3-8b", "--chips", "8", "--topology", "nope"], ["trn2-ultraserver"]),
    (["plan", "--model", "llama3-8b", "--chips", "8", "--chip-type", "tpu"], ["trn2"]),
    (["plan", "--model", "llama3-8b", "--chips", "8", "--grad-compression", "zip"], ["powersgd:RANK"]),
    (["plan", "--model", "llama3-8b", "--chips", "8", "--tp", "3"], ["tp (3) does not divide chips (8)"]),
    (["plan", "--model", "llama3-8b", "--chips", "8", "--zero-stage", "9"], ["0, 1, 2 or 3"]),
    (["topology", "show", "nope"], ["trn2-ultraserver"]),
    (["docs", "nope"], ["guides: "]),
    (["bench", "run", "nope"], ["api-latency"]),
    (["bench", "run", "twin-pod", "--fleet"], ["twin-pod has no --fleet variant", "trace-replay"]),
    (["policy", "simulate", "nobody", "Nope"], ["ReadOnly"]),
    (["keys", "rotate", "--key-file", "/nonexistent/k"], ["no key file"]),
    (["sim", "/nonexistent.yaml"], ["does not exist"]),
    (["up", "--tls-cert", "/nonexistent"], ["--tls-key"]),
    (["up", "--host", "no such host"], ["--host no such host"]),
])
def test_local_commands_refuse_in_one_line(args: list[str], words: list[str], tmp_path: Path) -> None:
    r = runner.invoke(app, args, env={"HOME": str(tmp_path)})
    err = r.stderr.strip()
    assert r.exit_code != 0 and len(err.splitlines()) == 1 and "Traceback" not in r.output, r.output
    for w in words:
        assert w in err, (w, err)
