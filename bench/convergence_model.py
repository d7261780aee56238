"""A small Mamba-2 language model whose SSD scan and gated RMSNorm come from a swappable backend, and the data it
trains on (nothing downloaded), for the convergence comparison of ``bench/convergence.py``.

The mixer follows mamba-ssm's ``Mamba2`` module (no fused kernels besides the two under test): one in-projection
to z, x, B, C and dt; a causal depthwise convolution over x, B and C written in PyTorch, then SiLU;
``mamba_chunk_scan_combined`` with D, dt_bias and softplus; the gated ``rmsnorm_fn`` (gate z,
norm_before_gate=False, one group per B/C group); the out-projection. Blocks are pre-norm residual with a plain
PyTorch RMSNorm; the LM head is tied to the byte embedding.

Backends (:data:`BACKENDS`): ``mamba`` is mamba-ssm's original Triton kernels (``reference.mamba_triton``),
``helion`` the Helion drop-ins (``kernels.*``, which load the config promoted for the GPU themselves) and
``reference`` the pure-PyTorch references (``reference.ssd_combined``, ``reference.layernorm_gated``). Whatever
the backend, the two calls run with autocast off, on the dtypes that autocast's projections hand them (bf16 x,
dt, B, C and z; fp32 A, D, dt_bias and norm weight, as mamba-ssm's Mamba2 passes them): the Triton kernels never
see autocast, and the same must hold for the PyTorch code of the other two.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

BACKENDS = ("mamba", "helion", "reference")

_MODULES = {
    "mamba": ("reference.mamba_triton", "reference.mamba_triton"),
    "helion": ("kernels.ssd_combined", "kernels.layernorm_gated"),
    "reference": ("reference.ssd_combined", "reference.layernorm_gated"),
}
"""Backend -> (module of its mamba_chunk_scan_combined, module of its rmsnorm_fn)."""

NORM_EPS = 1e-5
VOCAB = 256
"""Tokens are bytes, in both tasks."""


class Backend(NamedTuple):
    """The two calls a mixer makes, with mamba-ssm's signatures."""

    scan: Callable[..., torch.Tensor]
    norm: Callable[..., torch.Tensor]


def load_backend(name: str) -> Backend:
    """Backend ``name`` of :data:`BACKENDS`. Call after ``parity.device.configure``: on CPU this imports triton
    under the interpreter and installs the interpreter shims that mamba-ssm's and Helion's Triton code need there
    (a no-op on CUDA)."""
    from reference import _triton_shims

    _triton_shims.install()
    scan_module, norm_module = (importlib.import_module(m) for m in _MODULES[name])
    return Backend(scan_module.mamba_chunk_scan_combined, norm_module.rmsnorm_fn)


def without_d(backend: Backend) -> Backend:
    """``backend`` with a deliberately broken scan, its D skip term dropped (out - D x, forward and, through
    autograd, backward): the negative control a convergence band must reject."""
    scan = backend.scan

    def broken(x: torch.Tensor, *args: Any, D: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        out = scan(x, *args, D=D, **kwargs)
        return out - (D[:, None] * x).to(out.dtype)

    return Backend(broken, backend.norm)


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the model; the SSD sees (b, L, nheads, headdim) x and (b, L, ngroups, dstate) B and C."""

    n_layers: int
    d_model: int
    nheads: int
    headdim: int
    ngroups: int
    dstate: int
    chunk_size: int
    d_conv: int = 4

    @property
    def d_inner(self) -> int:
        return self.nheads * self.headdim

    def validate(self) -> None:
        """ValueError naming the first size that is not usable."""
        for name, value in asdict(self).items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.nheads % self.ngroups:
            raise ValueError(f"ngroups {self.ngroups} must divide nheads {self.nheads}")

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "d_inner": self.d_inner}


class RMSNorm(nn.Module):
    """Plain RMSNorm over the last dimension, in fp32 (the block norms; not a kernel under test)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), self.weight.shape, self.weight, NORM_EPS)


class Mamba2Mixer(nn.Module):
    """One Mamba-2 mixer, as mamba-ssm's ``Mamba2`` computes it, with the scan and the gated norm of ``backend``."""

    def __init__(self, cfg: ModelConfig, backend: Backend) -> None:
        super().__init__()
        self.cfg, self.backend = cfg, backend
        conv_dim = cfg.d_inner + 2 * cfg.ngroups * cfg.dstate
        self.in_proj = nn.Linear(cfg.d_model, cfg.d_inner + conv_dim + cfg.nheads, bias=False)
        self.conv = nn.Conv1d(conv_dim, conv_dim, cfg.d_conv, groups=conv_dim, padding=cfg.d_conv - 1)
        # mamba-ssm's initialization: dt log-uniform in [1e-3, 1e-1] through the inverse softplus, A in [1, 16].
        dt = torch.exp(torch.rand(cfg.nheads) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(cfg.nheads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(cfg.nheads))
        self.norm_weight = nn.Parameter(torch.ones(cfg.d_inner))
        self.out_proj = nn.Linear(cfg.d_inner, cfg.d_model, bias=False)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        b, L, _ = u.shape
        z, xbc, dt = self.in_proj(u).split([cfg.d_inner, self.conv.in_channels, cfg.nheads], dim=-1)
        xbc = F.silu(self.conv(xbc.transpose(1, 2))[..., :L].transpose(1, 2))  # causal: the left padding only
        x, B, C = xbc.split([cfg.d_inner, cfg.ngroups * cfg.dstate, cfg.ngroups * cfg.dstate], dim=-1)
        with torch.autocast(u.device.type, enabled=False):
            y = self.backend.scan(
                x.reshape(b, L, cfg.nheads, cfg.headdim),
                dt,
                -torch.exp(self.A_log),
                B.reshape(b, L, cfg.ngroups, cfg.dstate),
                C.reshape(b, L, cfg.ngroups, cfg.dstate),
                cfg.chunk_size,
                D=self.D,
                z=None,
                dt_bias=self.dt_bias,
                dt_softplus=True,
            )
            y = self.backend.norm(
                y.reshape(b, L, cfg.d_inner),
                self.norm_weight,
                None,
                z=z,
                eps=NORM_EPS,
                group_size=cfg.d_inner // cfg.ngroups,
                norm_before_gate=False,
            )
        return self.out_proj(y)


class Block(nn.Module):
    """Pre-norm residual block: h + mixer(norm(h))."""

    def __init__(self, cfg: ModelConfig, backend: Backend) -> None:
        super().__init__()
        self.norm = RMSNorm(cfg.d_model)
        self.mixer = Mamba2Mixer(cfg, backend)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mixer(self.norm(h))


class Mamba2LM(nn.Module):
    """Byte embedding, ``n_layers`` blocks, a final RMSNorm and an LM head tied to the embedding."""

    def __init__(self, cfg: ModelConfig, backend: Backend) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, backend) for _ in range(cfg.n_layers))
        self.norm_f = RMSNorm(cfg.d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)
        for layer in self.layers:
            # mamba-ssm's rescale_prenorm_residual: the residual branch's output shrinks with depth.
            layer.mixer.out_proj.weight.data /= math.sqrt(cfg.n_layers)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embedding(tokens)
        for layer in self.layers:
            h = layer(h)
        return F.linear(self.norm_f(h), self.embedding.weight)


def no_weight_decay(name: str, param: torch.Tensor) -> bool:
    """Parameters AdamW leaves undecayed, as mamba-ssm does: A_log, D, dt_bias, norm weights and biases."""
    return param.ndim < 2 or name.endswith(("A_log", "D", "dt_bias"))


# ---------------------------------------------------------------------------------------------
# Data: every batch of every step drawn up front from one seed, so that every backend sees the same order

IGNORE = -100
"""Target of a position the loss skips (F.cross_entropy's ignore_index)."""


class Batches(NamedTuple):
    """Inputs and targets of every step: (steps, batch, seqlen) int64 on the CPU."""

    inputs: torch.Tensor
    targets: torch.Tensor


def stdlib_corpus(nbytes: int) -> tuple[torch.Tensor, dict[str, Any]]:
    """The first ``nbytes`` bytes of the standard library's top-level ``*.py`` files in name order, as uint8,
    and what it is (Python version, files, sha256). ValueError if the library holds fewer bytes (a stripped
    install)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total, files = [], 0, 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        total, files = total + len(data), files + 1
        if total >= nbytes:
            break
    if total < nbytes:
        raise ValueError(f"the standard library at {root} holds {total} bytes of *.py, fewer than {nbytes}")
    text = b"".join(chunks)[:nbytes]
    info = {
        "source": f"{root}/*.py in name order",
        "python": ".".join(map(str, sys.version_info[:3])),
        "files": files,
        "bytes": nbytes,
        "sha256": hashlib.sha256(text).hexdigest(),
    }
    return torch.frombuffer(bytearray(text), dtype=torch.uint8), info


def text_batches(corpus: torch.Tensor, steps: int, batch: int, seqlen: int, seed: int) -> Batches:
    """Windows of seqlen + 1 bytes at random offsets: next-byte prediction on every position."""
    if corpus.numel() < seqlen + 2:
        raise ValueError(f"the corpus ({corpus.numel()} bytes) is shorter than one window of {seqlen + 1}")
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, corpus.numel() - seqlen - 1, (steps, batch), generator=g)
    windows = corpus.long()[starts[..., None] + torch.arange(seqlen + 1)]
    return Batches(windows[..., :-1].contiguous(), windows[..., 1:].contiguous())


MAX_RECALL_KEYS = 128
"""Associative recall: keys are byte values 0..keys-1, values 128..128+keys-1 (at most 128 of each)."""


def recall_batches(steps: int, batch: int, seqlen: int, pairs: int, keys: int, seed: int) -> Batches:
    """Multi-query associative recall: episodes of ``pairs`` key-value pairs (distinct keys of ``keys``, random
    values of as many), then every key once more as a query in random order followed by its value, episodes back
    to back. Only the answers are scored: the loss of a model that solved the task is 0, of one that guesses
    ln(keys)."""
    if not 1 <= keys <= MAX_RECALL_KEYS:
        raise ValueError(f"recall keys must be in 1..{MAX_RECALL_KEYS}, got {keys}")
    if not 1 <= pairs <= keys:
        raise ValueError(f"recall pairs must be in 1..{keys} (the recall keys), got {pairs}")
    g = torch.Generator().manual_seed(seed)
    per_episode = 4 * pairs
    episodes = steps * batch * -(-(seqlen + 1) // per_episode)
    drawn = torch.rand(episodes, keys, generator=g).argsort(dim=1)[:, :pairs]
    values = torch.randint(MAX_RECALL_KEYS, MAX_RECALL_KEYS + keys, (episodes, pairs), generator=g)
    order = torch.rand(episodes, pairs, generator=g).argsort(dim=1)
    tokens = torch.empty(episodes, per_episode, dtype=torch.long)
    tokens[:, 0 : 2 * pairs : 2], tokens[:, 1 : 2 * pairs : 2] = drawn, values
    tokens[:, 2 * pairs :: 2], tokens[:, 2 * pairs + 1 :: 2] = drawn.gather(1, order), values.gather(1, order)
    answer = torch.zeros(per_episode, dtype=torch.bool)
    answer[2 * pairs + 1 :: 2] = True
    tokens = tokens.reshape(steps, batch, -1)[..., : seqlen + 1]
    scored = answer.repeat(tokens.shape[-1] // per_episode + 1)[1 : seqlen + 1]
    targets = torch.where(scored, tokens[..., 1:], IGNORE)
    return Batches(tokens[..., :-1].contiguous(), targets.contiguous())
