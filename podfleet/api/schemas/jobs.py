"""Training jobs: SubmitTrainingJob's body and the names it takes (the job view, its metrics
and job arrays are the SDK's models, ``podfleet.sdk.models``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from podfleet.api.schemas.base import (
    PRESET_NAMES,
    QUEUE_PATTERN,
    ClientToken,
    Name,
    RequestBody,
    present,
)
from podfleet.control.drivers.process import FABRIC_JOB_OPTIONS, JOB_OPTIONS
from podfleet.control.lifecycle import TERMINAL, JobState
from podfleet.control.specs import POD_LOSS_POLICIES

JOB_MODEL_NAMES = (*PRESET_NAMES, "custom")  # custom: with model_dims
JobModelName = Literal[JOB_MODEL_NAMES]  # type: ignore[valid-type]
JOB_OPTION_NAMES = JOB_OPTIONS + FABRIC_JOB_OPTIONS
JobOptionName = Literal[JOB_OPTION_NAMES]  # type: ignore[valid-type]
TERMINAL_JOB_STATES = tuple(s.value for s in JobState if s in TERMINAL)
JobOrArrayId = Annotated[str, Field(pattern=r"^(job|arr)-[a-z0-9-]{1,60}$")]

# Said with if/then, not a top-level anyOf: client generators (openapi-python-client) turn
# an object with a top-level anyOf into a union and drop its model class.
_JOB_MODEL_GIVEN: JsonDict = {"if": {"not": present("model")},
                              "then": {"anyOf": [present("model_dims"), present("entrypoint")]}}
# model "custom" is the model_dims model: it needs them (control/presets.py; seed 29 found the 400).
_JOB_CUSTOM_DIMS: JsonDict = {"if": {"required": ["model"], "properties": {"model": {"const": "custom"}}},
                              "then": present("model_dims")}


class Parallelism(RequestBody):
    tp: int = Field(..., ge=1, le=4096)
    pp: int = Field(..., ge=1, le=4096)
    dp: int = Field(..., ge=1, le=65536)


class ModelDims(RequestBody):
    layers: int = Field(..., ge=1, le=1000)
    hidden: int = Field(..., ge=1, le=1_000_000)
    heads: int = Field(..., ge=1, le=10_000)
    vocab: int = Field(..., ge=1, le=10_000_000)
    seq_len: int = Field(4096, ge=1, le=10_000_000)


class SubmitJobRequest(RequestBody):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"model": "llama3-8b", "chips": 4, "steps": 100000, "checkpoint_interval": 100}],
        # a preset (or custom) model, custom model_dims, or a script that defines its own model
        "allOf": [_JOB_MODEL_GIVEN, _JOB_CUSTOM_DIMS]})

    model: JobModelName | None = Field(None, description="a preset (local and ray clusters run debug, tiny, small and medium), "
                                       "or custom with model_dims")
    model_dims: ModelDims | None = None
    chips: int = Field(..., ge=1, le=65536)
    parallelism: Literal["auto"] | Parallelism = "auto"
    steps: int = Field(1000, ge=1, le=10**9)
    checkpoint_interval: int = Field(100, ge=0, le=10**9, description="steps; 0 = never")
    priority: Annotated[int, Field(ge=0, le=100)] | Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")] = Field(
        50, description="0-100, or the name of a priority class")
    entrypoint: str | None = Field(None, min_length=1, max_length=1024, pattern=r"^(/|code:[0-9a-f]{64}/).+$",
                                   description="local/ray: an absolute path in an allowed code directory, or "
                                               "code:<sha256>/<path> from UploadCode")
    name: Name | None = None
    team: str | None = Field(None, min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9_-]*$",
                             description="quota owner (the cluster's quotas); default 'default'")
    max_retries: int = Field(0, ge=0, le=100, description="local/ray: crashes in the job's own code allowed "
                                                          "(infrastructure failures never count)")
    options: dict[JobOptionName, Any] | None = Field(None, description="local/ray worker options: seed, global_batch, "
                                           "seq_len, lr, step_delay_s, threads, entrypoint_args, "
                                           "encrypt_checkpoints, key_file, checkpoint_dir, replica_peer")
    grad_compression: str | None = Field(None, min_length=1, max_length=32,
                                        pattern=r"^(none|bf16|lossless|powersgd:([1-9]|[1-5][0-9]|6[0-4]))$",
                                        description="gradient compression: none, bf16, powersgd:RANK (1-64) or "
                                                    "lossless (zstd; bit-identical training); the twin models it")
    queue: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN,
                              description="the cluster queue it is admitted through; default 'default'")
    after_ok: list[JobOrArrayId] | None = Field(None, min_length=1, max_length=100,
                                                description="start only after each of these jobs (or arrays) "
                                                            "succeeded; one that fails fails this job")
    after_any: list[JobOrArrayId] | None = Field(None, min_length=1, max_length=100,
                                                 description="start only after each of these jobs ended")
    pods: int | None = Field(None, ge=1, le=1024, description="a fleet cluster: run on exactly this many pods, "
                             "chips / pods on each (whole pods when that is a pod)")
    topology_required: Literal["pod", "block"] | None = Field(
        None, description="never cross this network level: pod (NeuronLink) or block (the pods behind one spine); "
                          "the job waits rather than cross it")
    topology_preferred: Literal["pod", "block"] | None = Field(
        None, description="cross this level as little as possible (the default for a gang across pods: block)")
    on_pod_loss: Literal[POD_LOSS_POLICIES] | None = Field(  # type: ignore[valid-type]
        None, description="a fleet job when a pod it spans is lost as a whole (power, switch): wait (for the pod, "
                          "or a free pod elsewhere), requeue (from its checkpoint; the default) or shrink (its "
                          "other pods, fewer data-parallel replicas, re-planned)")
    time_limit_s: float | None = Field(None, gt=0, le=10**9,
                                       description="Slurm's --time: seconds it may run once placed; past it the "
                                                   "job fails with 'time limit reached'. Only a job with a limit "
                                                   "that ends before a reservation starts may use its chips first")
    array: str | None = Field(None, min_length=1, max_length=200, pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*(%\d+)?$",
                              description="one job per index, e.g. 0-15 or 0-15%4 (at most 4 queued or running); "
                                          "each gets PODFLEET_ARRAY_INDEX")
    client_token: str | None = ClientToken
