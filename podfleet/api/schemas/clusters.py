"""Clusters: CreateTrainiumCluster's body and the cluster view."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, WithJsonSchema
from pydantic.config import JsonValue

from podfleet.api.schemas.base import (
    MAX_CHIPS,
    Address,
    ClientToken,
    Command,
    RequestBody,
    keyed_schema,
    old_spellings,
    present,
)

ClusterType = Literal["trn2-ultraserver", "trn2-node", "trn1-node", "custom"]
FabricKind = Literal["sim", "local", "ray", "neuron"]

TeamName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9_-]*$")]
QuotaChips = Annotated[int, Field(ge=0)]

# outside fuzzer) knows a request is refused before it sends it (issue 30, item 9).
_CLUSTER_FABRIC_OPTIONS: list[JsonValue] = [
    # ray_address joins a Ray cluster: fabric ray, neuron (its Trainium hosts are the Ray
    # nodes), or no fabric (it then means ray, or neuron beside neuron_ls / neuron_monitor).
    {"if": present("ray_address"),
     "then": {"properties": {"fabric": {"enum": ["ray", "neuron", None]}}}},
    {"if": {"allOf": [present("ray_address"), {"required": ["fabric"], "properties": {"fabric": {"const": "ray"}}}]},
     "then": {"properties": {"neuron_ls": {"type": "null"}, "neuron_monitor": {"type": "null"}}}},
    # neuron_ls / neuron_monitor run neuron tools: fabric neuron, or no fabric (it then means neuron).
    {"if": {"anyOf": [present("neuron_ls"), present("neuron_monitor")]},
     "then": {"properties": {"fabric": {"enum": ["neuron", None]}}}},
]


class CreateClusterRequest(RequestBody):
    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "pod-1", "type": "trn2-node", "spares": 1}],
                                                 "allOf": old_spellings(_CLUSTER_FABRIC_OPTIONS)})

    name: str = Field(..., min_length=1, max_length=63, pattern=r"^[a-z][a-z0-9-]*$")
    type: ClusterType | None = Field(None, description="default trn2-ultraserver; custom (chips worker slots) "
                                                        "for fabric local or ray")
    dims: list[Annotated[int, Field(ge=1, le=64)]] | None = Field(
        None, min_length=1, max_length=6, description=f"custom only: 1-6 axes of 1-64 chips, at most {MAX_CHIPS} in all")
    chip_type: Literal["trn2", "trn1"] | None = Field(None, description="custom only")
    chips: int | None = Field(None, ge=1, le=MAX_CHIPS)
    hbm_gib: float | None = Field(None, gt=0, le=1024, description="per-chip memory")
    link_bw_gbps: float | None = Field(None, gt=0, le=10000, description="per link, GB/s")
    storage_nodes: int = Field(1, ge=0, le=16)
    spares: int = Field(0, ge=0, le=4, description="chips held out of placement for failover; "
                        "chosen where they keep the largest blocks free unless spare_chips names them")
    spare_chips: list[int] | None = Field(None, max_length=4, description="the spare chips, by index")
    restore_spares: bool = Field(True, description="a spare that takes a rank stops being a spare; "
                                 "restore the spare count from free or repaired chips")
    quotas: Annotated[dict[TeamName, QuotaChips], WithJsonSchema(keyed_schema(TeamName, QuotaChips))] | None = Field(
        None, description="team -> most chips its jobs may hold at once")
    encryption: bool = True
    network_isolation: bool = True
    fabric: FabricKind | None = Field(None, description="default: the server's (podfleet up --fabric)")
    ray_address: Address | None = Field(None,
                                   description="fabric ray: HOST:6379, ray://HOST:10001 or auto; "
                                               "default PODFLEET_RAY_ADDRESS, else a private local instance. "
                                               "fabric neuron: the Ray cluster whose nodes with neuron_cores "
                                               "are the Trainium hosts (neuron-ls and neuron-monitor run on each)")
    neuron_ls: Command | None = Field(None,
                                 description="fabric neuron: the command that prints neuron-ls JSON, run once at "
                                             "create (default 'neuron-ls --json-output'; no shell)")
    neuron_monitor: Command | None = Field(None,
                                      description="fabric neuron: the command that streams neuron-monitor reports, "
                                                  "kept running (default 'neuron-monitor'; no shell)")
    pods: int | None = Field(None, ge=1, le=1024, description="a fleet: this many pods of type, joined by EFA "
                             "(twin); spares are then per pod")
    pods_per_block: int | None = Field(None, ge=1, le=1024, description="fleet: pods behind one spine switch "
                                     "(a network block); default 16 or pods")
    client_token: str | None = ClientToken



