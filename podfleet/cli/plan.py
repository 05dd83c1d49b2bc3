"""``podfleet plan``: parallelism plan with predicted step time, MFU and memory."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.errors import InvalidInputError
from podfleet.perf.flops import Recompute
from podfleet.perf.models import ModelSpec, custom_model, get_model

TABLE_FIELDS = (
    "model", "chips", "topology", "tp", "pp", "dp", "micro_batch", "num_micro_batches",
    "interleave", "recompute", "zero_stage", "global_batch", "seq_len", "step_time_s",
    "tokens_per_s", "tflops_per_chip", "mfu", "memory_per_chip_bytes", "hbm_bytes", "fits",
    "grad_compression", "uncompressed_step_time_s", "compression_speedup",
)


def _model(
    name: str | None, layers: int | None, hidden: int | None, heads: int | None, vocab: int | None,
    seq_len: int | None,
) -> ModelSpec:
    dims = {"layers": layers, "hidden": hidden, "heads": heads, "vocab": vocab}
    given = {k: v for k, v in dims.items() if v is not None}
    if not given:
        if name is None:
            raise InvalidInputError("give --model NAME or --layers --hidden --heads --vocab", field="model")
        return get_model(name)
    if len(given) != len(dims):
        missing = ", ".join(f"--{k}" for k in dims if k not in given)
        raise InvalidInputError(f"a custom model also needs {missing}", field="model")
    return custom_model(layers, hidden, heads, vocab, seq_len=seq_len or 2048,  # type: ignore[arg-type]
                        name=name or "custom")


def plan(
    model: str | None = typer.Option(None, "--model", "-m", help="preset (debug, llama3-8b, llama3-70b, llama3-405b, gpt3-175b, megatron-*) or a name for custom dims"),
    chips: int = typer.Option(..., "--chips", "-n", help="number of chips"),
    chip_type: str | None = typer.Option(None, "--chip-type", help="trn2, trn1, a100, h100, h200"),
    topology: str | None = typer.Option(None, "--topology", help="e.g. trn2-ultraserver, dgx-a100, or NAME:COUNT"),
    seq_len: int | None = typer.Option(None, "--seq-len", help="tokens per sequence (default: the model's, 2048 for custom)"),
    global_batch: int | None = typer.Option(None, "--global-batch", help="sequences per step"),
    layers: int | None = typer.Option(None, "--layers", help="custom model: transformer layers"),
    hidden: int | None = typer.Option(None, "--hidden", help="custom model: hidden size"),
    heads: int | None = typer.Option(None, "--heads", help="custom model: attention heads"),
    vocab: int | None = typer.Option(None, "--vocab", help="custom model: vocabulary size"),
    tp: int | None = typer.Option(None, "--tp", help="fix the tensor-parallel degree (default: searched)"),
    pp: int | None = typer.Option(None, "--pp", help="fix the pipeline-parallel degree (default: searched)"),
    dp: int | None = typer.Option(None, "--dp", help="fix the data-parallel degree (default: searched)"),
    micro_batch: int | None = typer.Option(None, "--micro-batch", help="sequences per micro-batch (default: searched)"),
    recompute: Recompute | None = typer.Option(None, "--recompute", help="none, selective or full"),
    zero_stage: int | None = typer.Option(None, "--zero-stage", help="0-3"),
    top: int = typer.Option(5, "--top", help="how many candidates to list"),
    grad_compression: str | None = typer.Option(
        None, "--grad-compression", help="none, bf16, powersgd:RANK or lossless: the plan with gradient "
        "compression, beside its uncompressed step time"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Search (or evaluate) a parallelism plan and predict its step time, MFU and memory."""
    from podfleet.planner import plan as run_plan

    with errors():
        spec = _model(model, layers, hidden, heads, vocab, seq_len)
        result = run_plan(
            spec, chips, topology=topology, chip_type=chip_type, seq_len=seq_len,
            global_batch=global_batch, tp=tp, pp=pp, dp=dp, micro_batch=micro_batch,
            recompute=recompute, zero_stage=zero_stage, top=max(top, 1), grad_compression=grad_compression,
        )
        data = result.to_dict(top=top)
        if output == OutputFormat.json:
            emit(data, output)
        else:
            emit(data, output, columns=TABLE_FIELDS, title=f"plan: {result.model} on {chips} chips")
