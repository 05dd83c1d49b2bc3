"""One rank of a real training job: the entry point every fabric launches.

Contract (shared by fabric/local and fabric/ray):

* ``WorkerConfig`` (frozen dataclass, in ``podfleet.training.config``, torch-free):
  job_id, rank, world_size, master_addr/port, model preset, steps, seed,
  global_batch, seq_len, lr, checkpoint_dir/interval, key_file / key_env,
  resume / resume_from, entrypoint (+ args), replica_peer / replica_dir, device.
* ``run_worker(cfg, reporter) -> WorkerResult``: runs in the calling process (a Ray
  actor calls it directly with its own ``Reporter``). It imports torch lazily, so
  importing this module costs nothing on the control plane.
* ``Reporter`` protocol: ``progress(step, loss, tokens_per_s, step_time_s)``,
  ``heartbeat()``, ``log(line)``, ``checkpoint(step, path)`` (this rank's shard of
  ``step`` is durable; the driver calls ``podfleet.checkpoint.commit`` once every
  rank's shard is in). ``tokens_per_s`` is the global batch's tokens over step time;
  ``loss`` is this rank's local mean (the job's loss is the mean over ranks). A reporter
  may also have ``send(type, **fields)`` (a ``MessageReporter``): it then gets
  ``running`` (imports done) and ``replica`` messages too. Without it, a survivor's replica path is in
  ``WorkerResult.extra["replica"]`` (exit code 75).
* ``main()``: ``python -m podfleet.training.worker --config JSON [--report-fd N]
  [--key-fd N] [--rlimits JSON]``. The checkpoint key may come over a pipe (``--key-fd``,
  or ``key`` in a standby's assignment): a JSON line ``{source, data: base64}`` holding
  what the key file or variable holds, so a worker running as another user needs neither
  read access to the key file nor the key in its environment. ``--rlimits`` are applied
  before anything else (``podfleet.security.sandbox.apply_limits``). Before that still,
  the worker makes itself undumpable (``PR_SET_DUMPABLE`` 0, ``security.harden``): no
  other process of its uid can read its memory, environment or key. A standby told a
  ``uid`` in its assignment drops to it before it takes anything else from the message.
  A worker that is root when its job is due exits with code 2 unless ``--allow-root``.
  ``--die-with-parent PID`` (a Ray actor's child): SIGKILL when that parent dies.
  Reports go to fd N (default: the original stdout, with the user's prints moved
  to stderr) as JSON lines (see ``JsonLineReporter``): hello, progress, heartbeat
  (every ``heartbeat_interval_s`` from a thread), log, checkpoint, replica, error,
  done. Exit codes: 0 done, 1 user/loop error (counts against retries), 2 bad input
  (missing entrypoint, unwritable checkpoint dir, wrong or missing key, bad shard),
  75 peer lost (infrastructure; this rank saved its replica, reported as ``replica``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from podfleet.errors import InvalidInputError, PodfleetError
from podfleet.training.config import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_PEER_LOST,
    EXIT_USER_ERROR,
    JsonLineReporter,
    MessageReporter,
    NullReporter,
    Reporter,
    WorkerConfig,
    WorkerResult,
)

if TYPE_CHECKING:
    import torch

__all__ = ["JsonLineReporter", "MessageReporter", "NullReporter", "Reporter", "WorkerConfig", "WorkerResult", "main", "run_worker"]


# The checkpoint key handed over by the fabric (``--key-fd`` / a standby's assignment):
# (what the file or variable holds, where it came from), or None: read cfg.key_file / key_env.
_delivered_key: tuple[bytes, str] | None = None


def _take_key(line: str | bytes) -> None:
    global _delivered_key
    import base64

    doc = json.loads(line)
    _delivered_key = (base64.b64decode(doc["data"]), str(doc["source"]))


def deliver_key(material: bytes) -> None:
    """Hand this process's ``run_worker`` the checkpoint key (``security.sandbox.key_material``'s
    JSON line) in memory: a Ray actor takes it out of its environment before job code runs."""
    _take_key(material)


def _read_key_fd(fd: int) -> None:
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    if data.strip():
        _take_key(data)


def _kek(cfg: WorkerConfig) -> bytes | None:
    if _delivered_key is None or not cfg.encrypt_checkpoints:
        from podfleet.training import helpers

        return helpers.kek_for(cfg)
    from podfleet.checkpoint.keys import parse_key_file

    return parse_key_file(_delivered_key[0], source=_delivered_key[1])


class BadInput(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _check_inputs(cfg: WorkerConfig) -> None:
    if cfg.entrypoint is not None and not Path(cfg.entrypoint).is_file():
        raise BadInput("missing-entrypoint", f"entrypoint {cfg.entrypoint} does not exist or is not a file")
    if cfg.checkpoint_dir:
        probe = Path(cfg.checkpoint_dir) / f".probe-{cfg.rank}-{os.getpid()}"
        try:
            probe.parent.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise BadInput(
                "checkpoint-dir", f"checkpoint_dir {cfg.checkpoint_dir} is not writable: {exc.strerror or exc}"
            ) from exc


def _heartbeats(reporter: Reporter, interval_s: float, stop: threading.Event) -> None:
    while not stop.wait(interval_s):
        reporter.heartbeat()


def run_worker(cfg: WorkerConfig, reporter: Reporter) -> WorkerResult:
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeats, args=(reporter, cfg.heartbeat_interval_s, stop), daemon=True)
    beat.start()
    try:
        return _run(cfg, reporter)
    except BadInput as exc:
        reporter.log(f"error [{exc.kind}]: {exc}")
        return WorkerResult(cfg.rank, 0, None, exit_code=EXIT_BAD_INPUT, error=str(exc), extra={"kind": exc.kind})
    except (InvalidInputError, PodfleetError) as exc:
        # Wrong key, tampered checkpoint, unknown preset: the job's inputs are bad.
        kind = "checkpoint-integrity" if exc.code == "integrity" else exc.code
        reporter.log(f"error [{kind}]: {exc.message}")
        return WorkerResult(cfg.rank, 0, None, exit_code=EXIT_BAD_INPUT, error=exc.message, extra={"kind": kind})
    except SystemExit as exc:
        if exc.code in (0, None):
            return WorkerResult(cfg.rank, 0, None)
        reporter.log(f"error [user-code]: the script called sys.exit({exc.code!r})")
        return WorkerResult(cfg.rank, 0, None, exit_code=EXIT_USER_ERROR, error=f"sys.exit({exc.code!r})",
                            extra={"kind": "user-code"})
    except Exception as exc:
        tb = traceback.format_exc()
        lines = tb.rstrip().splitlines()
        for line in lines[:1] + lines[1:][-30:]:  # the header, then the innermost frames
            reporter.log(line)
        return WorkerResult(cfg.rank, 0, None, exit_code=EXIT_USER_ERROR, error=f"{type(exc).__name__}: {exc}",
                            extra={"kind": "user-code", "traceback": tb})
    finally:
        stop.set()


def _run(cfg: WorkerConfig, reporter: Reporter) -> WorkerResult:
    phases = {"started": time.time()}  # a rank move's replacement reports these (``regrouped``)
    _check_inputs(cfg)
    t0 = time.perf_counter()
    import torch
    import torch.distributed as dist


    reporter.log(f"startup: torch ready {time.perf_counter() - t0:.2f} s")
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    needs_key = cfg.encrypt_checkpoints and bool(cfg.checkpoint_dir or cfg.resume_from or cfg.replica_dir)
    kek = _kek(cfg) if needs_key else None
    if cfg.world_size > 1:
        from datetime import timedelta

        from podfleet.training.regroup import init_group

        init_group("nccl" if use_cuda else "gloo", f"tcp://{cfg.master_addr}:{cfg.master_port}", cfg.rank,
                   cfg.world_size, timedelta(seconds=60))
        phases["joined"] = time.time()
        reporter.log(f"startup: process group ready {time.perf_counter() - t0:.2f} s")
    if isinstance(reporter, MessageReporter):
        reporter.send("running")  # the slow imports are done: the fabric may now expect steady heartbeats
    if cfg.entrypoint is not None:
        result = _run_entrypoint(cfg, reporter, kek, device)
    else:
        result = _run_builtin(cfg, reporter, kek, device, phases)
    # Only a clean run tears the group down: after a peer died the group is broken and
    # destroying it can block; the process exits right after anyway.
    if result.exit_code == EXIT_OK and cfg.world_size > 1 and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return result


def _run_entrypoint(cfg: WorkerConfig, reporter: Reporter, kek: bytes | None, device: torch.device) -> WorkerResult:
    import runpy

    from podfleet.training import helpers

    os.environ.update({"RANK": str(cfg.rank), "WORLD_SIZE": str(cfg.world_size), "LOCAL_RANK": "0",
                       "PODFLEET_JOB_ID": cfg.job_id, "PODFLEET_CHECKPOINT_DIR": cfg.checkpoint_dir or ""})
    if cfg.array_index is not None:  # a job-array member: which element of the sweep it is
        os.environ["PODFLEET_ARRAY_INDEX"] = str(cfg.array_index)
    helpers.set_context(helpers.Context(cfg, reporter, kek, device))
    if cfg.grad_compression != "none":
        reporter.log(f"grad-compression {cfg.grad_compression}: applies where the script calls "
                     "pf.compress_gradients(ddp)")
    argv = sys.argv
    sys.argv = [cfg.entrypoint or "", *cfg.entrypoint_args]
    try:
        runpy.run_path(cfg.entrypoint or "", run_name="__main__")
    finally:
        sys.argv = argv
        helpers.set_context(None)
    return WorkerResult(cfg.rank, cfg.steps, None)


def _run_builtin(cfg: WorkerConfig, reporter: Reporter, kek: bytes | None, device: torch.device,
                 phases: dict[str, float]) -> WorkerResult:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from podfleet.checkpoint import manifest
    from podfleet.checkpoint.torch_state import AsyncCheckpointer, load, snapshot, write_shard
    from podfleet.perf.compression import parse_grad_compression
    from podfleet.training import compression
    from podfleet.training.loop import LoopState, PeerLost, train
    from podfleet.training.model import build_model

    joining = cfg.join and cfg.world_size > 1
    model = build_model(cfg.model, cfg.seed, init=not (joining and not cfg.resume_from)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    phases["built"] = time.time()
    # Everything alive now (torch's modules, the model) lives as long as the process: out of
    # the collector's sight, a survivor's ``gc.collect`` after a lost peer takes microseconds,
    # not the ~0.5 s a scan of torch's ~300k objects takes on a loaded host.
    gc.freeze()
    state = LoopState()
    source = cfg.resume_from or (manifest.latest(cfg.checkpoint_dir) if cfg.resume else None)
    if source:
        restored = load(source, cfg.job_id, kek)
        model.load_state_dict(restored.model)
        if restored.optimizer is not None:
            optimizer.load_state_dict(restored.optimizer)
        state.step = restored.step
        reporter.log(f"restored step {restored.step} from {source}")
    start_step = state.step
    backend = "nccl" if device.type == "cuda" else "gloo"
    gen, synced = cfg.generation, False
    if joining:
        # A replacement for a lost rank: its state comes from the peers that kept theirs.
        try:
            state.step = _take_state(cfg, reporter, gen, model, optimizer, device, -1, phases)
        except Exception as exc:
            from podfleet.training.loop import is_comm_failure
            from podfleet.training.regroup import NoReplica

            if not (is_comm_failure(exc) or isinstance(exc, NoReplica)):
                raise
            moved = None if isinstance(exc, NoReplica) else _rejoin(cfg, reporter, gen, backend, model, optimizer,
                                                                      device, -1, {})
            if moved is None:
                reporter.log(f"replacement rank could not take the gang's state: {str(exc).splitlines()[0][:160]}")
                return WorkerResult(cfg.rank, 0, None, (), 0, EXIT_PEER_LOST, str(exc), {"kind": "peer-lost"})
            gen, state.step = moved
        synced = True
    comp = parse_grad_compression(cfg.grad_compression)

    def durable(step: int, path: str) -> None:
        if cfg.world_size == 1:
            manifest.commit(cfg.checkpoint_dir or "", cfg.job_id, step, 1)
        reporter.checkpoint(step, path)

    ckpt = (AsyncCheckpointer(cfg.checkpoint_dir, cfg.job_id, cfg.rank, cfg.world_size, kek, durable)
            if cfg.checkpoint_dir and (cfg.checkpoint_interval or cfg.checkpoint_request_file) else None)
    while True:
        # After a regroup every rank already holds the source's state: no second broadcast.
        ddp = DistributedDataParallel(model, init_sync=not synced) if cfg.world_size > 1 else model
        codec = compression.install(ddp, comp, cfg.world_size, cfg.seed) if cfg.world_size > 1 else None
        try:
            train(cfg, reporter, model, ddp, optimizer, device, state, ckpt)
            break
        except PeerLost as lost:
            from podfleet.training.regroup import cut_group

            lost_t = time.time()

            cut_group()  # first: a peer may be blocked on this rank, not on the dead one
            # Drop every reference to the broken group (the traceback's frames hold the DDP
            # module, whose reducer holds the group): only then does destroying it close its
            # sockets, which is how a peer still blocked in the collective learns of the loss.
            lost.__traceback__ = lost.__cause__ = lost.__context__ = None
            del ddp, codec
            gc.collect()
            if cfg.regroup_file and cfg.entrypoint is None:
                reporter.log(f"{lost}; waiting for the fabric to move the lost rank (generation > {gen})")
                moved = _rejoin(cfg, reporter, gen, backend, model, optimizer, device, lost.step,
                                {"lost": lost_t, "released": time.time()})
                if moved is not None:
                    gen, state.step = moved
                    synced = True
                    continue
                reporter.log("no rank move came: leaving the gang to be relaunched")
            if ckpt is not None:
                ckpt.flush()
            if not (cfg.replica_peer and cfg.replica_dir):
                reporter.log(f"{lost}; replicas are off, the gang restarts from the last checkpoint")
                return WorkerResult(cfg.rank, lost.step, None, tuple(state.losses), start_step, EXIT_PEER_LOST,
                                    str(lost), {"kind": "peer-lost"})
            # DP replicas are identical, so this rank's whole (unsharded) state is the replica.
            path = write_shard(cfg.replica_dir, cfg.job_id, lost.step, 0, snapshot(model, optimizer, 0, 1), kek)
            manifest.commit(cfg.replica_dir, cfg.job_id, lost.step, 1, kind="replica")
            if isinstance(reporter, MessageReporter):
                reporter.send("replica", step=lost.step, path=str(path.parent))
            reporter.log(f"{lost}; replica of step {lost.step} saved to {path.parent}")
            return WorkerResult(cfg.rank, lost.step, state.losses[-1] if state.losses else None,
                                tuple(state.losses), start_step, EXIT_PEER_LOST, str(lost),
                                {"kind": "peer-lost", "replica": str(path.parent)})
    if ckpt is not None:
        ckpt.close()
    if cfg.world_size > 1:
        reporter.log(compression.report_line(comp, state.wire, state.step_times_s, codec))
    final = state.losses[-1] if state.losses else None
    return WorkerResult(cfg.rank, state.step, final, tuple(state.losses), start_step, EXIT_OK)


def _take_state(cfg: WorkerConfig, reporter: Reporter, gen: int, model: torch.nn.Module,
                optimizer: torch.optim.Optimizer, device: torch.device, held: int,
                phases: dict[str, float]) -> int:
    """Join the current group's state transfer (``regroup.sync_state``); the step restored.
    ``phases``: this rank's wall-clock times of the move so far (``regrouped`` reports them
    with ``synced``, for the recovery record's breakdown)."""
    from podfleet.training.regroup import sync_state

    t0 = time.perf_counter()
    step, src = sync_state(model, optimizer, held, device)
    took = time.perf_counter() - t0
    reporter.log(f"regroup generation {gen}: state of step {step} from rank {src} in {took:.2f} s")
    if isinstance(reporter, MessageReporter):
        reporter.send("regrouped", generation=gen, step=step, source_rank=src, restore_s=round(took, 4),
                      phases={**phases, "synced": time.time()})
    return step


def _rejoin(cfg: WorkerConfig, reporter: Reporter, gen: int, backend: str, model: torch.nn.Module,
            optimizer: torch.optim.Optimizer, device: torch.device, held: int,
            phases: dict[str, float]) -> tuple[int, int] | None:
    """A survivor: leave the broken group, join the fabric's next rendezvous and share state.
    (generation, step) once the gang trains again; None when no move came in time."""
    from podfleet.training.loop import is_comm_failure
    from podfleet.training.regroup import NoReplica, join_group, leave_group, wait_rendezvous

    assert cfg.regroup_file is not None
    while True:
        leave_group()
        rdv = wait_rendezvous(cfg.regroup_file, gen, cfg.regroup_timeout_s)
        if rdv is None:
            return None
        gen = rdv.generation
        phases["rendezvous"] = time.time()
        try:
            join_group(cfg, rdv, backend)
            phases["joined"] = time.time()
            return gen, _take_state(cfg, reporter, gen, model, optimizer, device, held, phases)
        except NoReplica:
            return None
        except Exception as exc:  # another rank lost while re-forming: wait for the next generation
            if not is_comm_failure(exc) and not isinstance(exc, TimeoutError):
                raise
            reporter.log(f"regroup generation {gen} failed: {str(exc).splitlines()[0][:160]}")


def preload() -> None:
    """What a warm standby does before it has a job: the slow imports and the corpus."""
    import torch
    import torch.distributed
    from torch.nn.parallel import DistributedDataParallel  # noqa: F401

    import podfleet.checkpoint.torch_state  # noqa: F401
    from podfleet.training import helpers, loop, model  # noqa: F401
    from podfleet.training.data import batch

    # First use of an optimizer and of autograd pulls in more lazy modules (AdamW's
    # first construction imports torch._dynamo: seconds), so touch them here once.
    net = model.build_model("debug", 0)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x, y = batch(0, 1, 2, 16)
    model.loss_fn(net(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    opt.step()


def _await_assignment(fd: int) -> WorkerConfig:
    """Standby: preload, say ready, then take one job assignment from stdin."""
    t0 = time.perf_counter()
    preload()
    JsonLineReporter(fd, -1).send("ready", pid=os.getpid(), preload_s=time.perf_counter() - t0)
    line = sys.stdin.readline()
    if not line:
        os._exit(EXIT_OK)  # the fabric closed the pool
    msg = json.loads(line)
    if msg.get("uid") is not None:
        from podfleet.security.harden import drop_privileges

        drop_privileges(int(msg["uid"]), int(msg["gid"]))  # before the key, the directory, the code
    if msg.get("key"):
        _take_key(msg["key"])
    os.environ.update(msg.get("env", {}))
    if msg.get("cwd"):
        os.chdir(msg["cwd"])  # the job's own directory, like a freshly spawned worker
    if msg.get("log"):
        log_fd = os.open(msg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
    return WorkerConfig.from_json(msg["config"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m podfleet.training.worker")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="WorkerConfig as JSON")
    src.add_argument("--config-file", help="a file holding WorkerConfig JSON")
    src.add_argument("--standby", action="store_true",
                     help="warm standby: preload torch, report ready, read {config, env, log} JSON from stdin")
    ap.add_argument("--report-fd", type=int, default=1, help="fd for JSON-line reports (default: stdout)")
    ap.add_argument("--key-fd", type=int, help="a pipe holding the checkpoint key (JSON line: source, data)")
    ap.add_argument("--rlimits", default="", help="resource limits to apply first (JSON: NOFILE, NPROC, CORE, AS)")
    ap.add_argument("--allow-root", action="store_true", help="run the job even as root (PODFLEET_WORKER_USER=root)")
    ap.add_argument("--die-with-parent", type=int, metavar="PID", help="exit when PID, the parent (a Ray actor), dies")
    args = ap.parse_args(argv)
    from podfleet.security.harden import die_with_parent, set_undumpable
    from podfleet.training import iocount

    iocount.keep_open()  # the gradient wire meter's counters: unopenable once undumpable
    set_undumpable()  # first: nothing of this process is readable by its uid's other processes
    if args.die_with_parent is not None:
        die_with_parent(args.die_with_parent)
    if args.rlimits:
        from podfleet.security.sandbox import apply_limits

        apply_limits(args.rlimits)  # before the job is read, let alone run
    if args.key_fd is not None:
        _read_key_fd(args.key_fd)
    fd = args.report_fd
    if fd == 1:
        # Keep the report channel clean: the user's prints go to stderr.
        fd = os.dup(1)
        os.dup2(2, 1)
    if args.standby:
        cfg = _await_assignment(fd)
    else:
        cfg = WorkerConfig.from_json(args.config if args.config is not None else Path(args.config_file).read_text())
    reporter = JsonLineReporter(fd, cfg.rank)
    if os.geteuid() == 0 and not args.allow_root:
        reporter.send("error", code=EXIT_BAD_INPUT, kind="root", step=0,
                      message="refusing to run job code as root (set PODFLEET_WORKER_USER=root to allow it)")
        os._exit(EXIT_BAD_INPUT)
    reporter.send("hello", pid=os.getpid(), job_id=cfg.job_id, world_size=cfg.world_size)
    t0 = time.perf_counter()
    result = run_worker(cfg, reporter)
    if result.exit_code == EXIT_OK:
        reporter.send("done", step=result.steps_done, final_loss=result.final_loss, wall_s=time.perf_counter() - t0)
    else:
        reporter.send("error", code=result.exit_code, kind=result.extra.get("kind"), message=result.error,
                      step=result.steps_done)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a broken gloo group can stall it, and nothing is left to flush.
    os._exit(result.exit_code)


if __name__ == "__main__":
    main()
