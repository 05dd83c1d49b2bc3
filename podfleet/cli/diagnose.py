"""``podfleet diagnose CLUSTER``: findings with root cause, repair steps and runbook."""

from __future__ import annotations

from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, emit, line
from podfleet.cli.remote import TokenOpt, UrlOpt, remote


def diagnose(
    cluster: str = ClusterArg,
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Name the faulty chips and links, with the documented repair and its runbook."""
    with remote(url, token) as c:
        result = c.diagnose_cluster(cluster)
    if output == OutputFormat.json:
        emit(result, output)
        return
    findings = result["findings"]
    if not findings:
        line(f"{cluster}: no findings ({result.get('hardware_errors_seen', 0)} hardware errors seen, none current)")
        return
    emit([{"id": f["id"], "kind": f["kind"], "chips": ",".join(map(str, f["chips"])),
           "links": ",".join(f["links"]), "confidence": f["confidence"], "action": f["action"],
           "root cause": f["root_cause"]} for f in findings], output, title=f"diagnosis of {cluster}")
    for f in findings:
        where = f"link {f['links'][0]}" if f["links"] else f"chip {','.join(map(str, f['chips']))}"
        line(f"\n{f['id']} {f['kind']} at {where}: {f['action']}  (podfleet docs {f['runbook']})")
        for i, step in enumerate(f["repair_steps"], 1):
            line(f"  {i}. {step}")
