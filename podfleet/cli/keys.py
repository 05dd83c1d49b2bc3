"""``podfleet keys rotate|rewrap|retire``: versioned key-encryption keys for checkpoints,
and the audit chain's MAC key. ``keys rotate --cluster NAME`` asks the server
(``RotateKeys``: admin, audited, a second factor for a user's token); the other forms run
on the control-plane host with no server."""

from __future__ import annotations

from pathlib import Path

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError

app = typer.Typer(help="Key versions: rotate, rewrap stored data keys, retire old versions.", no_args_is_help=True)

KeyFileOpt = typer.Option(None, "--key-file", help="a checkpoint key file (single key or key ring)")
WorkdirOpt = typer.Option(None, "--cluster-workdir", help="a cluster's work directory: its KEK file")


def _key_file(key_file: str | None, workdir: str | None) -> Path:
    from podfleet.checkpoint.keys import kek_path_for

    if bool(key_file) == bool(workdir):
        raise InvalidInputError("give exactly one of --key-file or --cluster-workdir", field="key_file")
    path = Path(key_file) if key_file else kek_path_for(workdir or "")
    if not path.is_file():
        raise InvalidInputError(f"no key file at {path}", field="key_file")
    return path


@app.command("rotate")
def rotate(
    cluster: str | None = typer.Option(None, "--cluster", help="through the server: this cluster's checkpoint key"),
    key_file: str | None = KeyFileOpt,
    cluster_workdir: str | None = WorkdirOpt,
    audit: bool = typer.Option(False, "--audit", help="rotate the audit chain's MAC key instead"),
    key_dir: str | None = typer.Option(None, "--key-dir", help="with --audit: the key directory"),
    mfa: str | None = typer.Option(None, "--mfa", help="with --cluster: a fresh TOTP or recovery code"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Add a key version: new data is protected by it, older versions still decrypt/verify."""
    with errors():
        if cluster is not None:
            if key_file or cluster_workdir or audit:
                raise InvalidInputError("--cluster asks the server; drop --key-file, --cluster-workdir and --audit",
                                        field="cluster")
            c = client(url, token, mfa=mfa)
            emit(c.rotate_keys(cluster), output, title="rotated")
            return
        if audit:
            from podfleet.security.keyring import FileKeyProvider
            from podfleet.security.keyring import rotate as rotate_named

            name = rotate_named(FileKeyProvider(key_dir), "audit-mac")
            emit({"rotated": "audit-mac", "version": name, "note": "restart the server to MAC with it"}, output)
            return
        from podfleet.checkpoint import keys

        path = _key_file(key_file, cluster_workdir)
        emit({"key_file": str(path), "version": keys.rotate(path)}, output, title="rotated")


@app.command("rewrap")
def rewrap(
    root: str = typer.Argument(..., help="a checkpoint tree (a job's or a cluster's directory)"),
    key_file: str | None = KeyFileOpt,
    cluster_workdir: str | None = WorkdirOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Re-wrap every shard's data key under the current version, without touching the data."""
    with errors():
        from podfleet.checkpoint import keys
        from podfleet.checkpoint.rekey import rewrap_tree

        ring = keys.load_ring(_key_file(key_file, cluster_workdir))
        emit({**rewrap_tree(root, ring).as_dict(), "version": ring.current}, output, title="rewrapped")


@app.command("retire")
def retire(
    version: str = typer.Argument(..., help="the version to refuse from now on (e.g. v1)"),
    key_file: str | None = KeyFileOpt,
    cluster_workdir: str | None = WorkdirOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Refuse an old version (rewrap first: shards still under it stop decrypting)."""
    with errors():
        from podfleet.checkpoint import keys

        path = _key_file(key_file, cluster_workdir)
        keys.retire(path, version)
        emit({"key_file": str(path), "retired": version}, output, title="retired")
