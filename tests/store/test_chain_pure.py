"""The chain rules themselves (no database), property-tested."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from podfleet.security.audit import GENESIS_HASH, audit_hash, canonical_json, verify_chain
from podfleet.store.records import AuditRecord

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
entries = st.lists(
    st.tuples(st.text(max_size=6), st.sampled_from(["ok", "denied"]),
              st.dictionaries(st.text(max_size=5), json_values, max_size=3)),
    min_size=1, max_size=8,
)


def build(items: list[tuple[str, str, dict]]) -> list[AuditRecord]:
    out, prev = [], GENESIS_HASH
    for i, (actor, result, detail) in enumerate(items, start=1):
        fields = dict(seq=i, time=1000.0 + i / 3, actor=actor, action="X", target="t",
                      result=result, detail=detail, prev_hash=prev)
        prev = audit_hash(**fields)
        out.append(AuditRecord(**fields, hash=prev))
    return out


def test_canonical_json_is_sorted_and_compact() -> None:
    assert canonical_json({"b": 1, "a": [1, 2], "é": "x"}) == '{"a":[1,2],"b":1,"é":"x"}'


@given(entries)
def test_intact_chain_verifies(items: list) -> None:
    chain = build(items)
    assert verify_chain(chain).as_tuple() == (
        True, None, f"audit chain intact: {len(chain)} record{'s' * (len(chain) != 1)}"
    )


@given(entries, st.data())
def test_any_changed_field_is_caught_at_that_record(items: list, data: st.DataObject) -> None:
    chain = build(items)
    k = data.draw(st.integers(0, len(chain) - 1))
    field = data.draw(st.sampled_from(["time", "actor", "action", "target", "result", "detail"]))
    new = {"time": chain[k].time + 1, "actor": chain[k].actor + "!", "action": "Y",
           "target": "u", "result": "error:x", "detail": {**chain[k].detail, "extra": 1}}[field]
    chain[k] = dataclasses.replace(chain[k], **{field: new})
    res = verify_chain(chain)
    assert (res.ok, res.first_bad_seq) == (False, k + 1)
    assert "hash mismatch" in res.message


@given(entries.filter(lambda e: len(e) >= 2), st.data())
def test_removed_record_is_a_gap(items: list, data: st.DataObject) -> None:
    chain = build(items)
    k = data.draw(st.integers(0, len(chain) - 2))
    del chain[k]
    res = verify_chain(chain)
    assert (res.ok, res.first_bad_seq) == (False, k + 2)
    assert "gap" in res.message


def test_relinked_forgery_is_a_broken_link() -> None:
    chain = build([("a", "ok", {}), ("b", "ok", {}), ("c", "ok", {})])
    forged = dataclasses.replace(chain[1], actor="mallory")
    forged.hash = audit_hash(**{f: getattr(forged, f) for f in (
        "seq", "time", "actor", "action", "target", "result", "detail", "prev_hash")})
    res = verify_chain([chain[0], forged, chain[2]])
    assert (res.ok, res.first_bad_seq) == (False, 3)
    assert "broken link" in res.message
