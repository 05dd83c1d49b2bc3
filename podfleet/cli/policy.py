"""``podfleet policy list`` / ``podfleet policy simulate WHO ACTION RESOURCE``: IAM-style
policies and what they decide, evaluated here (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.errors import InvalidInputError

app = typer.Typer(help="IAM-style policies: list the built-ins, simulate a decision.", no_args_is_help=True)


@app.command("list")
def list_(output: OutputFormat = OutputOpt) -> None:
    """The built-in policies and the role policies existing tokens map onto."""
    from podfleet.api.auth import role_policies
    from podfleet.security.policy import BUILTIN

    rows = [{"policy": p.name, "statements": len(p.statements),
             "effects": " ".join(f"{s.effect}:{','.join(s.actions)[:60]}" for s in p.statements)}
            for p in [*BUILTIN.values(), *role_policies().values()]]
    emit(rows, output, columns=["policy", "statements", "effects"])


@app.command("simulate")
def simulate(
    who: str = typer.Argument(..., help="a role (viewer, operator, admin) or a built-in policy name"),
    action: str = typer.Argument(..., help="an operationId, e.g. DeleteCluster"),
    resource: str = typer.Argument("*", help="e.g. cluster/pod-0, job/job-1, * (default)"),
    policy_file: list[Path] = typer.Option([], "--policy-file", help="extra policy JSON files to evaluate too"),
    mfa: bool = typer.Option(False, "--mfa", help="the caller signed in with a second factor"),
    require_mfa: bool = typer.Option(False, "--require-mfa", help="add the MFARequired policy"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Whether WHO may do ACTION on RESOURCE, and which statement decides (explicit deny >
    allow > implicit deny)."""
    from podfleet.api.auth import role_policies
    from podfleet.security.policy import MFA_KEY, builtin, evaluate, parse_policy
    from podfleet.security.tokens import Role

    with errors():
        roles = {r.value: r for r in Role}
        policies = [role_policies()[roles[who]]] if who in roles else [builtin(who)]
        for f in policy_file:
            try:
                doc = json.loads(f.read_text())
            except (OSError, ValueError) as exc:
                raise InvalidInputError(f"cannot read policy file {f}: {exc}", field="policy_file") from None
            policies.append(parse_policy(f.stem, doc))
        if require_mfa:
            policies.append(builtin("MFARequired"))
        d = evaluate(policies, action, resource, {MFA_KEY: "true" if mfa else "false"})
        emit({"who": who, "action": action, "resource": resource, "allowed": d.allowed, "reason": d.reason,
              "policy": d.policy, "statement": d.sid, "decision": d.describe()}, output, title="decision")
        if not d.allowed:
            raise typer.Exit(1)
