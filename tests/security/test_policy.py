"""IAM-style evaluation: explicit deny > allow > implicit deny, independent of order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podfleet.errors import InvalidInputError, UnknownNameError
from podfleet.security.policy import (
    BUILTIN,
    MFA_KEY,
    Policy,
    Statement,
    builtin,
    evaluate,
    parse_policy,
    resource_of,
)

ACTIONS = ["DeleteCluster", "DescribeCluster", "SubmitTrainingJob", "ListAuditEvents", "CreateAccessToken"]
RESOURCES = ["cluster/pod-0", "cluster/pod-1", "job/job-1", "*"]
action_patterns = st.sampled_from(["*", "Describe*", "Delete*", "*Job", "DeleteCluster", "List?udit*", "Nope"])
resource_patterns = st.sampled_from(["*", "cluster/*", "cluster/pod-0", "job/*", "job/job-?"])
statements = st.builds(Statement, st.sampled_from(["Allow", "Deny"]),
                       st.lists(action_patterns, min_size=1, max_size=3).map(tuple),
                       st.lists(resource_patterns, min_size=1, max_size=2).map(tuple))
policies = st.lists(st.builds(Policy, st.sampled_from(["a", "b", "c"]),
                              st.lists(statements, min_size=1, max_size=4).map(tuple)), max_size=4)


@settings(max_examples=150, deadline=None)
@given(policies, st.sampled_from(ACTIONS), st.sampled_from(RESOURCES), st.randoms(use_true_random=False))
def test_the_decision_does_not_depend_on_order(ps: list[Policy], action: str, resource: str, rnd) -> None:
    want = evaluate(ps, action, resource)
    shuffled = [Policy(p.name, tuple(rnd.sample(p.statements, len(p.statements)))) for p in ps]
    rnd.shuffle(shuffled)
    got = evaluate(shuffled, action, resource)
    assert (got.allowed, got.reason) == (want.allowed, want.reason)


@settings(max_examples=150, deadline=None)
@given(policies, st.sampled_from(ACTIONS), st.sampled_from(RESOURCES))
def test_explicit_deny_beats_allow_beats_implicit_deny(ps: list[Policy], action: str, resource: str) -> None:
    matching = [s for p in ps for s in p.statements if s.matches(action, resource, {})]
    d = evaluate(ps, action, resource)
    if any(s.effect == "Deny" for s in matching):
        assert (d.allowed, d.reason) == (False, "explicit-deny")
    elif matching:
        assert (d.allowed, d.reason) == (True, "allowed")
    else:
        assert (d.allowed, d.reason) == (False, "implicit-deny")
    # Adding a matching Deny anywhere always denies; adding an Allow never turns a Deny around.
    deny = Policy("deny", (Statement("Deny", (action,), (resource,)),))
    allow = Policy("allow", (Statement("Allow", ("*",), ("*",)),))
    assert not evaluate([*ps, deny], action, resource).allowed
    assert evaluate([allow, *ps], action, resource).allowed == (d.reason != "explicit-deny")


def test_parse_and_conditions() -> None:
    p = parse_policy("ops", {"Statement": [
        {"Sid": "Pods", "Effect": "Allow", "Action": ["Describe*", "DeleteCluster"], "Resource": "cluster/pod-*"},
        {"Effect": "Deny", "Action": "DeleteCluster", "Resource": "*", "Condition": {"Bool": {MFA_KEY: "false"}}},
    ]})
    assert evaluate([p], "DescribeCluster", "cluster/pod-3").describe() == "allowed by ops (Pods)"
    assert not evaluate([p], "DescribeCluster", "cluster/other").allowed
    assert evaluate([p], "DeleteCluster", "cluster/pod-3", {MFA_KEY: "false"}).reason == "explicit-deny"
    assert evaluate([p], "DeleteCluster", "cluster/pod-3", {MFA_KEY: "true"}).allowed
    with pytest.raises(UnknownNameError):
        parse_policy("x", {"Statement": [{"Effect": "Permit", "Action": "*"}]})
    with pytest.raises(InvalidInputError, match="Action"):
        parse_policy("x", {"Statement": [{"Effect": "Allow", "Action": []}]})
    with pytest.raises(UnknownNameError, match="condition operator"):
        parse_policy("x", {"Statement": [{"Effect": "Allow", "Action": "*", "Condition": {"NumericLt": {}}}]})


def test_builtin_policies() -> None:
    assert set(BUILTIN) >= {"ClusterAdmin", "Scheduler", "StorageAccess", "ReadOnly", "Auditor"}
    ro, sched, aud = builtin("ReadOnly"), builtin("Scheduler"), builtin("Auditor")
    assert evaluate([ro], "DescribeCluster", "cluster/x").allowed and not evaluate([ro], "DeleteCluster", "*").allowed
    assert not evaluate([ro], "ListAuditEvents", "*").allowed and evaluate([aud], "ListAuditEvents", "*").allowed
    assert evaluate([sched], "SubmitTrainingJob", "cluster/x").allowed
    assert not evaluate([sched, aud], "ListAuditEvents", "*").allowed  # Scheduler's Deny wins
    mfa = builtin("MFARequired")
    admin = builtin("ClusterAdmin")
    assert not evaluate([admin, mfa], "DeleteCluster", "cluster/x").allowed  # no MFA in the context
    assert evaluate([admin, mfa], "DeleteCluster", "cluster/x", {MFA_KEY: "true"}).allowed
    with pytest.raises(UnknownNameError, match="ReadOnly"):
        builtin("Readonly")
    assert resource_of({"cluster": "pod-0"}) == "cluster/pod-0" and resource_of({"job": "job-1"}) == "job/job-1"
    assert resource_of({}) == "*"
    from typing import get_args

    from podfleet.api.routes.users import BuiltinPolicy
    assert set(get_args(BuiltinPolicy)) == set(BUILTIN)  # the API schema lists exactly the built-ins


def test_policy_simulate_cli(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from podfleet.cli.main import app

    run = CliRunner().invoke
    r = run(app, ["policy", "simulate", "viewer", "DeleteCluster", "cluster/pod-0", "--output", "json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["reason"] == "implicit-deny"
    r = run(app, ["policy", "simulate", "operator", "DeleteCluster", "cluster/pod-0", "--output", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["policy"] == "Role:operator"
    r = run(app, ["policy", "simulate", "admin", "DeleteCluster", "cluster/pod-0", "--require-mfa", "--output", "json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["policy"] == "MFARequired"
    assert run(app, ["policy", "simulate", "admin", "DeleteCluster", "--require-mfa", "--mfa"]).exit_code == 0
    deny = tmp_path / "protect.json"
    deny.write_text(json.dumps({"Statement": {"Effect": "Deny", "Action": "Delete*", "Resource": "cluster/prod-*"}}))
    r = run(app, ["policy", "simulate", "ClusterAdmin", "DeleteCluster", "cluster/prod-1", "--policy-file", str(deny),
                  "--output", "json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["policy"] == "protect"
    r = run(app, ["policy", "simulate", "Nobody", "DeleteCluster"])
    assert r.exit_code == 2 and "ReadOnly" in r.output
