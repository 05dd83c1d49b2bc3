"""A small GPT-style decoder (torch.nn); its presets are ``podfleet.perf.models.TRAINER_PRESETS``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from podfleet.perf.models import get_trainer_preset


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 256  # byte-level: the corpus is bytes, no tokenizer to ship
    d_model: int = 64
    n_layer: int = 2
    n_head: int = 4
    max_seq_len: int = 256


def get_preset(name: str) -> GPTConfig:
    """The torch config of a trainer preset: the shape ``podfleet.perf.models`` registers
    under the same name (one registry, so the planner and the twin model this same net)."""
    m = get_trainer_preset(name)
    return GPTConfig(vocab_size=m.vocab, d_model=m.hidden, n_layer=m.layers, n_head=m.heads,
                     max_seq_len=m.seq_len)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.out = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as in GPT-2
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_model(name: str, seed: int, *, init: bool = True) -> GPT:
    """The same seed gives the same initial weights on every rank and every run.
    ``init=False``: the tensors are allocated but not initialised (a rank move's
    replacement, whose every value comes from a peer: the random init of a 25M-parameter
    model costs it ~0.2 s idle, over a second on a loaded host)."""
    cfg = get_preset(name)
    if not init:
        with torch.device("meta"):
            shell = GPT(cfg)
        model = shell.to_empty(device="cpu")
        model.head.weight = model.tok.weight  # ``to_empty`` unties them
        return model
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = GPT(cfg)
    torch.random.set_rng_state(gen_state)
    return model


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def flops_per_token(model: GPT) -> float:
    # 6N for forward+backward of the matmuls (Kaplan et al.); attention ignored at this size.
    return 6.0 * model.n_params()
