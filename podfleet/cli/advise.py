"""``podfleet advise CLUSTER`` / ``podfleet advise apply ID``: recommendations proven in
rehearsal, and carrying one out (audited). A cluster named ``apply`` is reached by its id."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, line
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError


def advise(
    target: str = typer.Argument(..., help="a cluster (id or name), or 'apply'"),
    rec_id: str | None = typer.Argument(None, help="with apply: the recommendation's id (adv-...)"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """List recommendations (only those a rehearsal predicts a gain of 2% or more for), or
    apply one: refused (exit 4) when the cluster changed since it was made."""
    with errors():
        if target == "apply":
            if rec_id is None:
                raise InvalidInputError("give the recommendation's id: podfleet advise apply ID", field="id")
            emit(client(url, token).apply_recommendation(rec_id), output, title="applied")
            return
        if rec_id is not None:
            raise InvalidInputError(f"unexpected {rec_id!r}: podfleet advise CLUSTER, or podfleet advise apply ID",
                                    field="id")
        result = client(url, token, timeout_s=900.0).get_recommendations(target)
    if output == OutputFormat.json:
        emit(result, output)
        return
    recs = result["recommendations"]
    if not recs:
        line(f"{target}: no advice ({result['candidates']} candidates rehearsed over {result['horizon_s']:g} s, "
             f"none with a gain of {result['min_gain']:.0%} or more)")
        return
    emit([{"id": r["id"], "kind": r.get("kind"), "title": r["title"], "predicted_gain": f"{r['predicted_gain']:.1%}",
           "confidence": r["confidence"], "action": r["action"]["op"]} for r in recs], output,
         title=f"advice for {target}")
    line("apply one with: podfleet advise apply ID", err=True)
