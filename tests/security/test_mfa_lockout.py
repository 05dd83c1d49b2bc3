"""Finding 6 (TOTP brute force): wrong codes are counted per user, TOTP and recovery
codes apart, with exponential back-off and a lock after ten that only an admin lifts
(audited); the counts live in the store, so a restart does not reset them."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from typer.testing import CliRunner

from podfleet.cli.main import app as cli
from podfleet.control import users
from podfleet.control.plane import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.errors import AuthError
from podfleet.fabric.factory import make_fabric
from podfleet.security.mfa import (
    BACKOFF_CAP_S,
    FREE_FAILURES,
    MAX_FAILURES,
    STEP_S,
    Attempts,
    after_failure,
    backoff_s,
    code_at,
    gate,
)
from podfleet.store import open_store
from tests.security.conftest import Api

KEY = b"m" * 32
T0 = 1_900_000_000.0


def _secret(enrolment: dict) -> bytes:
    b32 = parse_qs(urlparse(enrolment["otpauth_uri"]).query)["secret"][0]
    return base64.b32decode(b32 + "=" * (-len(b32) % 8))


def _wrong(secret: bytes, now: float) -> str:
    """A six-digit code that is valid for no step around ``now``."""
    valid = {code_at(secret, now + k * STEP_S) for k in (-1, 0, 1)}
    return next(c for c in (f"{i:06d}" for i in range(1_000_000)) if c not in valid)


def test_back_off_doubles_then_locks() -> None:
    assert [backoff_s(n) for n in range(FREE_FAILURES + 1)] == [0.0] * (FREE_FAILURES + 1)
    assert [backoff_s(FREE_FAILURES + k) for k in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert backoff_s(60) == BACKOFF_CAP_S
    a, now = Attempts(), T0
    for i in range(1, MAX_FAILURES + 1):
        gate(a, now=now, user="u")  # each try waited out the back-off of the one before
        a = after_failure(a, recovery=False, now=now)
        assert a.totp_failures == i and a.locked == (i == MAX_FAILURES)
        now = a.blocked_until
    with pytest.raises(AuthError, match="locked after 10 wrong codes"):
        gate(a, now=now + 10 * BACKOFF_CAP_S, user="u")
    b = after_failure(after_failure(after_failure(Attempts(), recovery=True, now=T0), recovery=True, now=T0),
                      recovery=True, now=T0)
    assert (b.recovery_failures, b.totp_failures) == (3, 0)  # counted apart
    with pytest.raises(AuthError, match="retry in 1 s"):
        gate(b, now=T0 + 0.2, user="u")


def test_brute_force_locks_and_the_count_survives_a_restart(tmp_path: Path) -> None:
    """Ten wrong codes (each after its back-off) lock the second factor; then even the
    right code is refused, also after the store is reopened; an admin unlocks it."""
    url = f"sqlite:///{tmp_path / 'pf.db'}"
    store = open_store(url)
    plane = ControlPlane(store, Timeline(seed=1), fabric_factory=make_fabric)
    users.create(plane, "mallory-target", ["ClusterAdmin"], actor="tok-1:admin")
    secret = _secret(users.enable_mfa(plane, "mallory-target", KEY, actor="tok-1:admin"))
    now, checked, refused = T0, 0, 0
    for _ in range(10_000):  # an attacker trying twice a second, whatever the answer
        try:
            users.check_mfa(plane, "mallory-target", _wrong(secret, now), KEY, now=now)
        except AuthError as exc:
            if "retry in" in exc.message:
                refused += 1
                now += 0.5
                continue
            if "locked" in exc.message:
                break
            checked += 1
    assert checked == MAX_FAILURES and refused > 200  # only ten codes were ever compared
    u = store.get_user("mallory-target")
    assert u is not None and u.mfa_locked and u.mfa_failures == MAX_FAILURES
    # Back-offs alone (FREE_FAILURES free, then 1 s, 2 s, ...): 2**(10-2-1) - 1 = 127 s at least.
    assert now - T0 >= sum(backoff_s(n) for n in range(1, MAX_FAILURES))
    store.close()

    store = open_store(url)  # a restart
    plane = ControlPlane(store, Timeline(seed=1), fabric_factory=make_fabric)
    later = now + 3600
    with pytest.raises(AuthError, match="locked"):
        users.check_mfa(plane, "mallory-target", code_at(secret, later), KEY, now=later)
    assert users.describe(store, "mallory-target")["mfa_locked"] is True
    out = users.unlock(plane, "mallory-target", actor="tok-1:admin")
    assert out["was_locked"] and not out["mfa_locked"] and out["mfa_failures"] == 0
    users.check_mfa(plane, "mallory-target", code_at(secret, later), KEY, now=later)
    actions = [(r.action, r.actor, r.result) for r in store.iter_audit()]
    assert ("LockMfa", "system", "ok") in actions and ("UnlockUser", "tok-1:admin", "ok") in actions
    assert store.verify_audit()[0]
    store.close()


def test_recovery_codes_lock_too(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'pf.db'}")
    plane = ControlPlane(store, Timeline(seed=1), fabric_factory=make_fabric)
    users.create(plane, "rita", [], actor="a")
    enrol = users.enable_mfa(plane, "rita", KEY, actor="a")
    now = T0
    for i in range(MAX_FAILURES):
        with pytest.raises(AuthError):
            users.check_mfa(plane, "rita", f"dead{i:04d}-beefbeef", KEY, now=now)
        now += BACKOFF_CAP_S
    with pytest.raises(AuthError, match="locked"):
        users.check_mfa(plane, "rita", enrol["recovery_codes"][0], KEY, now=now)
    u = store.get_user("rita")
    assert u is not None and u.recovery_failures == MAX_FAILURES and u.mfa_failures == 0
    assert len(u.recovery or []) == 10  # nothing was spent while locked
    store.close()


def test_over_the_api_wrong_codes_back_off_and_an_admin_unlocks(api: Api) -> None:
    api.app.state.mfa_key = KEY
    with api.client("admin") as c:
        assert c.post("/v1/users", json={"name": "lena", "policies": ["ReadOnly"]}).status_code == 201
        secret = _secret(c.post("/v1/users/lena/mfa").json())
    _, tok = api.add_token("viewer", "lena")
    answers = []
    with httpx.Client(base_url=api.url, timeout=30) as c:
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:  # a burst of wrong codes, as fast as answered
            r = c.get("/v1/clusters", headers={"Authorization": f"Bearer {tok}",
                                               "X-Podfleet-MFA": _wrong(secret, time.time())})
            answers.append((r.status_code, r.json()["detail"]))
    # How many answers a second brings depends on the machine (8 on a loaded 2-core CI);
    # enough to see past the free mistakes is what the checks below need.
    assert len(answers) >= FREE_FAILURES + 4 and all(status == 401 for status, _ in answers)
    assert sum("retry in" in d for _, d in answers) >= len(answers) - FREE_FAILURES - 2
    u = api.store.get_user("lena")
    assert u is not None and FREE_FAILURES < u.mfa_failures <= FREE_FAILURES + 2  # a second: 1 s of back-off
    # Locked (as ten failures leave it): the right code is refused until an admin unlocks.
    u.mfa_locked = True
    api.store.save_user(u)
    headers = {"Authorization": f"Bearer {tok}"}
    with httpx.Client(base_url=api.url, headers=headers, timeout=30) as c:
        r = c.get("/v1/clusters", headers={"X-Podfleet-MFA": code_at(secret, time.time())})
        assert r.status_code == 401 and "podfleet user unlock lena" in r.json()["detail"]
    with api.client("viewer") as v:
        assert v.post("/v1/users/lena/unlock").status_code == 403
    out = CliRunner().invoke(cli, ["user", "unlock", "lena", "--url", api.url, "--token", api.tokens["admin"],
                                   "--output", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["was_locked"] is True
    with httpx.Client(base_url=api.url, headers=headers, timeout=30) as c:
        code = code_at(secret, time.time() + STEP_S)  # a step not used yet
        assert c.get("/v1/clusters", headers={"X-Podfleet-MFA": code}).status_code == 200
    assert any(r.action == "UnlockUser" and r.target == "lena" for r in api.store.iter_audit())
