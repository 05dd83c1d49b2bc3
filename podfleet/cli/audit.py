"""``podfleet audit list`` / ``podfleet audit verify``."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, Record, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client, remote_command
from podfleet.errors import ChecksumError
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="The audit trail and its integrity.", no_args_is_help=True)


@app.command("list")
@remote_command
def list_(
    c: PodfleetClient,
    max_results: int = typer.Option(100, "--max-results", help="records per page"),
    all_: bool = typer.Option(False, "--all", help="every page"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Audit records: who did what to which target, with what result, when."""
    events, nxt = [], None
    while True:
        page = c.list_audit_events(next_token=nxt, max_results=max_results)
        events.extend(page["events"])
        nxt = page.get("next_token")
        if not (all_ and nxt):
            break
    emit(events, output, columns=["seq", "time", "actor", "action", "target", "result"])


@app.command("verify")
def verify(
    db: str | None = typer.Option(None, "--db", help="offline: verify this store directly (a stopped server's)"),
    digests: str | None = typer.Option(None, "--digests", help="offline: the signed digests' directory "
                                       "(default: beside a SQLite file)"),
    key_dir: str | None = typer.Option(None, "--key-dir", help="offline: the key directory (default "
                                       "$PODFLEET_KEY_DIR or ~/.podfleet/keys)"),
    public_key: str | None = typer.Option(None, "--public-key", help="offline: the digest signing key's "
                                          "public half (hex), when the key directory is not at hand"),
    copy: str | None = typer.Option(None, "--digests-copy", help="offline: the digests' second location "
                                    "(default $PODFLEET_AUDIT_DIGESTS)"),
    copy_command: str | None = typer.Option(None, "--digests-command", help="offline: the command that reads "
                                            "a URL --digests-copy (default $PODFLEET_AUDIT_DIGESTS_COMMAND)"),
    allow_missing: bool = typer.Option(False, "--allow-missing-digests", help="accept records newer than every "
                                       "signed digest, or no digest at all (after a crash; the chain is still checked)"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Check the chain (MACs, links, sequence) and its signed digests: exit 0 if intact,
    else name the first bad record (exit 6). With --db, no server is needed. Records that
    no signed digest covers, or no digest at all, fail unless --allow-missing-digests."""
    with errors():
        result: Record
        if db is not None:
            result = _verify_offline(db, digests, key_dir, public_key, copy, copy_command, allow_missing)
        else:
            result = client(url, token).verify_audit_chain(allow_missing_digests=allow_missing)
        emit(result, output, title="audit chain")
        if not result["ok"]:
            bad = result["first_bad_seq"]
            where = f"broken at record {bad}" if bad is not None else "not verified"
            raise ChecksumError(f"audit chain {where}: {result['message']}", field="seq")


def _verify_offline(db: str, digests: str | None, key_dir: str | None, public_key: str | None,
                    copy: str | None, copy_command: str | None, allow_missing: bool) -> dict[str, object]:
    from pathlib import Path

    from podfleet.errors import InvalidInputError
    from podfleet.security.audit import ChainResult, verify_chain
    from podfleet.security.digest_sinks import copy_sink
    from podfleet.security.digests import (
        default_digests_dir,
        signing_key,
        verify_trail,
    )
    from podfleet.security.keyring import provider_for, versions
    from podfleet.security.pubkeys import public_key_from_hex
    from podfleet.settings import get_settings
    from podfleet.store import open_store

    settings = get_settings()
    copy = copy or settings.audit_digests
    copy_command = copy_command or settings.audit_digests_command
    provider = provider_for(key_dir=key_dir)
    keys = versions(provider, "audit-mac")  # read only: verification never mints keys
    store = open_store(db)
    try:
        where = Path(digests) if digests else default_digests_dir(str(store.url))
        if where is None:
            result = verify_chain(store.iter_audit(), keys)
            if result.ok and not allow_missing:
                result = ChainResult(False, None, f"{result.message}, but {db} has no digests directory: pass "
                                     "--digests DIR, or --allow-missing-digests to check the chain alone", result.checked)
        else:
            copies = (copy_sink(copy, copy_command, primary=where),) if copy else ()
            try:
                pub = public_key_from_hex(public_key) if public_key else signing_key(provider, create=False).public_key()
            except ValueError as exc:
                raise InvalidInputError(f"no digest signing key: {exc}; pass --key-dir or --public-key",
                                        field="public_key") from None
            result = verify_trail(store.iter_audit(), keys, where, pub, copies=copies, allow_missing=allow_missing)
    finally:
        store.close()
    return {"ok": result.ok, "first_bad_seq": result.first_bad_seq, "message": result.message}
