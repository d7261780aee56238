"""Convergence parity: a small Mamba-2 language model trains the same with the Helion kernels as with mamba-ssm's.

Each backend of ``bench/convergence_model.py`` (mamba-ssm's Triton kernels, the Helion drop-ins, the pure-PyTorch
references) trains the same model from the same initial weights on the same batches in the same order (AdamW,
warmup then cosine decay, gradients clipped at 1; bf16 autocast on CUDA as in training, fp32 on CPU), on each
task: ``text`` (next-byte prediction on the standard library's Python sources) and ``recall`` (multi-query
associative recall; only the answers are scored: solved loss 0, chance ln 128). Per step it records the loss,
the gradient norm (before clipping) and the step time.

The band is what a correct kernel may do, measured about the reference's run (fp32 intermediates, the closest
to exact; the rule of the kernel gate, after FlashAttention's: a candidate's error against the oracle within
FACTOR x the baseline's): mamba-ssm's run and its reruns (``mamba-rerun-1`` ... ``--reruns``: the same run, which
differs only where reductions are ordered by atomics, mamba-ssm's and PyTorch's own on the GPU), each compared
with the reference's. Per step, the band is the largest |difference from the reference| of those runs up to that
step (a running max: two runs drift apart, and a pointwise band would close where their curves cross). A
candidate (Helion) passes where, at every step, its loss and its gradient norm lie within FACTOR x band +
ATOL_REL x |the reference's value| of the reference's; its final loss (the mean of the last tenth of the steps)
within FACTOR x mamba-ssm's runs' largest final difference (+ the same floor); and its parameters after the last
step within FACTOR x their largest distance from the reference's, each relative to the reference's own drift
|theta_N - theta_0| (+ ATOL_REL x |theta_N| / drift). On CPU the Triton interpreter runs atomics in program
order, so a rerun is bitwise identical and the band is mamba-ssm's deviation alone: the output says which.

Free-running runs decorrelate where training is chaotic (a plateau, a loss spike: which run leaves it first is
decided by rounding), and then a correct run leaves the band at random. So each of mamba-ssm's runs is first
judged against the band of the others on every free-running check (the curves, the final loss, the parameters);
a check that one of them fails is not judged (reported, with the run that strayed). Two checks need no free run:
at every step of mamba-ssm's run, each candidate and the reference also compute the loss and the gradient at
mamba-ssm's weights on the same batch (``same weights``), and the candidate's RMS error against the reference over
the steps must be within FACTOR x mamba-ssm's own.

Writes to ``--out``: ``convergence.json`` (every curve, the band, the verdicts, step times), one PNG per task (the
curves, the deviations from the reference against the bound, the errors at mamba-ssm's weights) and
``summary.md``. ``--control`` also trains the Helion scan with its D skip term dropped, which must be rejected.
Exit 0 if every candidate passes (and the control is rejected), 1 if not, 2 on bad input (one error line, nothing
written). ``--plot-from`` redraws the PNGs and the summary from a JSON (written where matplotlib is missing).

    python bench/convergence.py --device cuda --out bench/results/h200-convergence --control
    python bench/convergence.py --device cpu --out /tmp/convergence        # tiny: a smoke run, minutes
    python bench/convergence.py --plot-from DIR/convergence.json --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shlex
import statistics
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # convergence_model, also when a test loads this file

import convergence_model as cm

from parity import device as parity_device
from parity.report import atomic_write
from parity.results import stamped

FORMAT = stamped("convergence", {})
"""The JSON's format marker (``parity report`` reads the file as its kind "convergence")."""

FACTOR = 2.0
"""A candidate may differ from the reference by twice what mamba-ssm does: the factor of the kernel gate's rule
(tolerances.toml, after mamba-ssm's own tests)."""

ATOL_REL = 1e-6
"""Floor of every bound, relative to mamba-ssm's value: about 8 fp32 ulp (2^-23 = 1.2e-7), where the band is 0
(the first steps, and every step of a bitwise-identical rerun)."""

CLIP = 1.0
BASELINE, RERUN, REFERENCE, CANDIDATE = "mamba", "mamba-rerun", "reference", "helion"
CONTROL = "helion-no-D"
"""``--control``: the Helion backend with its D skip term dropped, which the band must reject."""


def rerun_names(reruns: int) -> list[str]:
    """The names of mamba-ssm's reruns: ``mamba-rerun-1`` ... (each one more draw of its atomics' order)."""
    return [f"{RERUN}-{i}" for i in range(1, reruns + 1)]


def band_names(runs: Sequence[str]) -> list[str]:
    """The runs of ``runs`` that make the band: mamba-ssm's run, its reruns, and the reference they are measured
    from."""
    return [n for n in runs if n == BASELINE or n.startswith(f"{RERUN}-") or n == REFERENCE]


TASKS = ("text", "recall")

PRESETS: dict[str, dict[str, Any]] = {
    "cuda": {
        "model": cm.ModelConfig(n_layers=4, d_model=256, nheads=8, headdim=64, ngroups=1, dstate=128, chunk_size=128),
        "train": {
            "steps": 300,
            "batch": 8,
            "seqlen": 1024,
            "lr": 2e-3,
            "recall_pairs": 8,
            "recall_keys": 32,
            "corpus_bytes": 2 << 20,
        },
        "reruns": 3,
    },
    "cpu": {
        "model": cm.ModelConfig(n_layers=2, d_model=16, nheads=2, headdim=16, ngroups=1, dstate=16, chunk_size=16),
        "train": {
            "steps": 6,
            "batch": 1,
            "seqlen": 32,
            "lr": 3e-3,
            "recall_pairs": 2,
            "recall_keys": 32,
            "corpus_bytes": 1 << 16,
        },
        "reruns": 1,
    },
}
"""CUDA: the SSD in the Nemotron-3-Nano mixer's config bucket (headdim 64, dstate 128, chunk 128, 8 heads per
group) and the gated norm in its group of 512, so that configs promoted for that mixer are the ones loaded; 300
steps per task; recall of 8 pairs from 32 keys, which this model learns within them (16 pairs of 128 keys sat at
chance: bench/results/cpu-recall-learnability); three mamba-ssm reruns for the band (one is a single draw of how
far a correct run strays). CPU: the Triton interpreter, two layers, 32 tokens (two chunks), a few steps, one rerun
(bitwise identical there)."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """What every run of a task shares besides the model sizes."""

    steps: int
    batch: int
    seqlen: int
    lr: float
    recall_pairs: int
    recall_keys: int
    corpus_bytes: int
    weight_decay: float = 0.1
    seed: int = 0
    data_seed: int = 1

    def validate(self) -> None:
        """ValueError naming the first unusable setting."""
        for name in ("steps", "batch", "seqlen", "recall_pairs", "recall_keys", "corpus_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")

    @property
    def warmup(self) -> int:
        return min(30, self.steps // 10)


@dataclasses.dataclass
class Run:
    """One backend's training run: per-step loss, gradient norm and milliseconds, and the final parameters; for
    the baseline's run also what the other backends compute at its weights (``same_weights``)."""

    name: str
    losses: list[float] = dataclasses.field(default_factory=list)
    grad_norms: list[float] = dataclasses.field(default_factory=list)
    step_ms: list[float] = dataclasses.field(default_factory=list)
    params: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    error: str | None = None
    same_weights: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Training


def make_batches(task: str, tc: TrainConfig) -> tuple[cm.Batches, dict[str, Any]]:
    """Every step's batch of ``task`` and what the data are (with the losses worth drawing on the plot)."""
    if task == "text":
        corpus, info = cm.stdlib_corpus(tc.corpus_bytes)
        return cm.text_batches(corpus, tc.steps, tc.batch, tc.seqlen, tc.data_seed), {
            **info,
            "levels": {"uniform over bytes": math.log(cm.VOCAB)},
        }
    batches = cm.recall_batches(tc.steps, tc.batch, tc.seqlen, tc.recall_pairs, tc.recall_keys, tc.data_seed)
    return batches, {
        "pairs": tc.recall_pairs,
        "keys": tc.recall_keys,
        "scored_per_sequence": int((batches.targets[0, 0] != cm.IGNORE).sum()),
        "levels": {"chance": math.log(tc.recall_keys), "solved": 0.0},
    }


def initial_state(cfg: cm.ModelConfig, seed: int, backend: cm.Backend) -> dict[str, torch.Tensor]:
    """The initial weights every run starts from (drawn on the CPU: the same on every device and backend)."""
    torch.manual_seed(seed)
    model = cm.Mamba2LM(cfg, backend)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _lr_factor(step: int, tc: TrainConfig) -> float:
    """Linear warmup, then cosine decay to a tenth."""
    if step < tc.warmup:
        return (step + 1) / tc.warmup
    progress = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))


def _one_line(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def _loss_and_grad(model: torch.nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The loss of one batch (bf16 autocast on CUDA, as in training) and, after its backward, every parameter's
    gradient flattened into one fp32 vector (before clipping)."""
    dev = tokens.device
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        logits = model(tokens)
    loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=cm.IGNORE)
    model.zero_grad(set_to_none=True)
    loss.backward()
    grads = [p.grad.flatten().float() for p in model.parameters() if p.grad is not None]
    return loss.detach(), torch.cat(grads)


def _shadow_step(
    name: str,
    shadows: Mapping[str, torch.nn.Module],
    model: torch.nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    found: dict[str, tuple[torch.Tensor, ...]],
    record: dict[str, dict[str, Any]],
) -> None:
    """Each shadow backend's loss and gradient at ``model``'s weights on the same batch, recorded as its error
    against the reference's (|loss - reference's|, |grad - reference's| / |reference's|), the run's own (in
    ``found`` under ``name``) with them. A shadow that raises stops there, its error kept; its later steps and
    every step without the reference's count as infinitely far."""
    state = model.state_dict()
    for shadow_name, shadow in shadows.items():
        if "error" in record[shadow_name]:
            continue
        try:
            shadow.load_state_dict(state)
            found[shadow_name] = _loss_and_grad(shadow, *batch)
        except Exception as exc:
            error = f"step {len(record[name]['loss'])}: {_one_line(exc)}"
            print(f"  {name:12} same-weights {shadow_name} error: {error}", file=sys.stderr)
            record[shadow_name]["error"] = error
    ref = found.pop(REFERENCE, None)
    for run_name, errs in record.items():
        if run_name == REFERENCE:
            continue
        if ref is None or run_name not in found:
            errs["loss"].append(math.inf)
            errs["grad"].append(math.inf)
            continue
        ref_norm = float(ref[1].norm())
        errs["loss"].append(abs(float(found[run_name][0]) - float(ref[0])))
        errs["grad"].append(float((found[run_name][1] - ref[1]).norm()) / ref_norm if ref_norm else math.inf)


def train(
    name: str,
    backend: cm.Backend,
    cfg: cm.ModelConfig,
    tc: TrainConfig,
    init: Mapping[str, torch.Tensor],
    batches: cm.Batches,
    dev: torch.device,
    shadows: Mapping[str, cm.Backend] | None = None,
) -> Run:
    """Train from ``init`` on ``batches``; an exception ends the run with its message recorded (the curve so far
    kept), so that one broken backend does not hide the others. ``shadows`` (the reference among them): before
    every optimizer step each of these backends computes the loss and gradient at this run's weights, and
    ``Run.same_weights`` keeps every backend's error against the reference's (this run's own under its name); the
    step time leaves them out."""
    run = Run(name)
    model = cm.Mamba2LM(cfg, backend).to(dev)
    model.load_state_dict(init)
    shadow_models = {s: cm.Mamba2LM(cfg, b).to(dev) for s, b in (shadows or {}).items()}
    record: dict[str, dict[str, Any]] = {n: {"loss": [], "grad": []} for n in [name, *shadow_models]}
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if not cm.no_weight_decay(n, p)], "weight_decay": tc.weight_decay},
        {"params": [p for n, p in named if cm.no_weight_decay(n, p)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.95), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, tc))
    inputs, targets = batches.inputs.to(dev), batches.targets.to(dev)
    every = max(1, tc.steps // 10)

    def now() -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    try:
        for step in range(tc.steps):
            start = now()
            loss, grad = _loss_and_grad(model, inputs[step], targets[step])
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            elapsed = now() - start
            if shadow_models:
                batch = (inputs[step], targets[step])
                _shadow_step(name, shadow_models, model, batch, {name: (loss, grad)}, record)
            start = now()
            opt.step()
            sched.step()
            run.step_ms.append((now() - start + elapsed) * 1e3)
            run.losses.append(loss.item())
            run.grad_norms.append(norm.item())
            if step % every == 0 or step == tc.steps - 1:
                print(f"  {name:12} step {step:4d} loss {run.losses[-1]:.5f} grad norm {run.grad_norms[-1]:.4f}")
    except Exception as exc:
        run.error = f"step {len(run.losses)}: {_one_line(exc)}"
        print(f"  {name:12} error: {run.error}", file=sys.stderr)
    run.same_weights = record if shadow_models else {}
    run.params = {n: p.detach().float().cpu().clone() for n, p in named}
    return run


# ---------------------------------------------------------------------------------------------
# Judging


def _abs_diff(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """|a - b| per step over ``b``'s steps; a step ``a`` lacks (it stopped) or a NaN counts as infinitely far."""
    return [abs(a[t] - b[t]) if t < len(a) and math.isfinite(a[t]) else math.inf for t in range(len(b))]


def curve_bound(base: Sequence[float], band_runs: Sequence[Sequence[float]]) -> list[float]:
    """Per step: FACTOR x the running max of the band runs' |difference from ``base``| + ATOL_REL x |base|."""
    bound, band = [], 0.0
    diffs = [_abs_diff(r, base) for r in band_runs]
    for t, value in enumerate(base):
        band = max([band, *(d[t] for d in diffs)])
        bound.append(FACTOR * band + ATOL_REL * abs(value))
    return bound


def _ratio(deviation: float, bound: float) -> float:
    if deviation == 0:
        return 0.0
    return deviation / bound if bound > 0 else math.inf


def judge_curve(run: Sequence[float], base: Sequence[float], bound: Sequence[float]) -> dict[str, Any]:
    """The worst step's deviation over its bound, and whether every step is within it."""
    ratios = [_ratio(d, b) for d, b in zip(_abs_diff(run, base), bound, strict=True)]
    worst = max(range(len(ratios)), key=ratios.__getitem__)
    return {"passed": ratios[worst] <= 1, "max_ratio": ratios[worst], "worst_step": worst}


def final_loss(losses: Sequence[float], steps: int) -> float:
    """Mean loss over the last tenth of the steps (at least one): a final value less noisy than the last step."""
    window = losses[steps - max(1, steps // 10) : steps]
    return statistics.fmean(window) if len(window) == max(1, steps // 10) else math.nan


def judge_final(run: Sequence[float], base: Sequence[float], band_runs: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The candidate's final loss within FACTOR x the band runs' largest final difference (+ the floor) of
    ``base``'s (the reference's)."""
    steps = len(base)
    ref = final_loss(base, steps)
    band = max(abs(final_loss(r, steps) - ref) for r in band_runs)
    bound = FACTOR * band + ATOL_REL * abs(ref)
    value = final_loss(run, steps)
    deviation = abs(value - ref) if math.isfinite(value) else math.inf
    ratio = _ratio(deviation, bound)
    return {"passed": ratio <= 1, "value": value, "baseline": ref, "band": band, "bound": bound, "ratio": ratio}


def _distance(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    return math.sqrt(sum(float((a[n].double() - b[n].double()).square().sum()) for n in b))


def judge_params(
    run: Mapping[str, torch.Tensor],
    base: Mapping[str, torch.Tensor],
    band_runs: Sequence[Mapping[str, torch.Tensor]],
    init: Mapping[str, torch.Tensor],
) -> dict[str, Any]:
    """|theta_run - theta_base| relative to the drift |theta_base - theta_0| of ``base`` (the reference's run),
    within FACTOR x the band runs' largest (+ ATOL_REL x |theta_base| / drift); the three tensors that differ
    most, for a diagnosis."""
    drift = _distance(base, {n: init[n].float() for n in base})
    floor = ATOL_REL * _distance(base, {n: torch.zeros_like(t) for n, t in base.items()}) / drift
    band = max(_distance(r, base) / drift for r in band_runs)
    bound = FACTOR * band + floor
    value = _distance(run, base) / drift
    ratio = _ratio(value, bound) if math.isfinite(value) else math.inf
    per_tensor = {n: _distance({n: run[n]}, {n: base[n]}) / drift for n in base}
    worst = sorted(per_tensor, key=per_tensor.__getitem__, reverse=True)[:3]
    return {
        "passed": ratio <= 1,
        "relative_distance": value,
        "band": band,
        "bound": bound,
        "ratio": ratio,
        "drift": drift,
        "most_different": {n: per_tensor[n] for n in worst},
    }


def _rms(values: Sequence[float]) -> float:
    """Root mean square (infinite where a value is, or where there are none)."""
    return math.sqrt(statistics.fmean(v * v for v in values)) if values else math.inf


def judge_same_weights(errors: Sequence[float], base_errors: Sequence[float], floor: float) -> dict[str, Any]:
    """A candidate's error against the reference at the baseline's weights, over the steps: its RMS within FACTOR x
    the baseline's own RMS error (+ ``floor``), the rule of the kernel gate; the worst step for a diagnosis."""
    bound = FACTOR * _rms(base_errors) + floor
    value = _rms(errors) if len(errors) == len(base_errors) else math.inf
    ratio = _ratio(value, bound) if math.isfinite(value) else math.inf
    worst = max(range(len(errors)), key=errors.__getitem__) if errors else None
    return {
        "passed": ratio <= 1,
        "ratio": ratio,
        "rms": value,
        "baseline_rms": _rms(base_errors),
        "bound": bound,
        "worst_step": worst,
        "worst_step_ratio": None if worst is None else _ratio(errors[worst], bound),
    }


SCALAR_CHECKS = ("final_loss", "params", "same_weights_loss", "same_weights_grad")
"""The checks with one ratio each (beside the two curves)."""

CURVES = (("loss", "losses"), ("grad_norm", "grad_norms"))
"""The per-step curves judged against the band: (quantity, Run attribute)."""


FREE_RUNNING = ("loss_curve", "grad_norm_curve", "final_loss", "params")
"""The checks that compare free-running training runs: judged only where mamba-ssm's runs agree with each other."""


def free_running_checks(
    run: Run, center: Run, band: Sequence[Run], init: Mapping[str, torch.Tensor]
) -> dict[str, dict[str, Any]]:
    """``run`` against the band that ``band`` makes about ``center``: each check of :data:`FREE_RUNNING`."""
    checks = {
        f"{q}_curve": judge_curve(
            getattr(run, attr),
            getattr(center, attr),
            curve_bound(getattr(center, attr), [getattr(r, attr) for r in band]),
        )
        for q, attr in CURVES
    }
    checks["final_loss"] = judge_final(run.losses, center.losses, [r.losses for r in band])
    checks["params"] = judge_params(run.params, center.params, [r.params for r in band], init)
    return checks


def _worst(check: Mapping[str, Any]) -> float:
    return check["max_ratio"] if "max_ratio" in check else check["ratio"]


def band_consistency(
    center: Run, band: Mapping[str, Run], init: Mapping[str, torch.Tensor]
) -> dict[str, dict[str, float]]:
    """Each of mamba-ssm's runs judged as a candidate against the band of the others (leave one out): its ratio
    on each check of :data:`FREE_RUNNING`. Above 1, a correct run leaves the band: the runs have decorrelated (a
    chaotic stretch of training), and that comparison with them says nothing."""
    found = {}
    for name, run in band.items():
        others = [r for n, r in band.items() if n != name]
        if others:
            found[name] = {c: _worst(v) for c, v in free_running_checks(run, center, others, init).items()}
    return found


def judge(runs: Mapping[str, Run], candidates: Sequence[str], init: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The band (the runs of :func:`band_names` about the reference's run) and each candidate's verdict."""
    if REFERENCE not in runs:
        return {"band": None, "verdicts": {c: {"passed": False, "error": "no reference run"} for c in candidates}}
    center, base = runs[REFERENCE], runs[BASELINE]
    names = band_names(list(runs))
    unusable = [n for n in names if runs[n].error or not all(map(math.isfinite, runs[n].losses))]
    if unusable:
        reason = f"no band: {', '.join(unusable)} did not complete with finite losses"
        return {"band": None, "verdicts": {c: {"passed": False, "error": reason} for c in candidates}}
    family = [n for n in names if n != REFERENCE]
    band = [runs[n] for n in family]
    bounds = {q: curve_bound(getattr(center, attr), [getattr(r, attr) for r in band]) for q, attr in CURVES}
    consistency = band_consistency(center, {n: runs[n] for n in family}, init)
    judged = {c: all(ratios[c] <= 1 for ratios in consistency.values()) for c in FREE_RUNNING}
    same = base.same_weights
    verdicts: dict[str, Any] = {}
    for name in candidates:
        run = runs[name]
        checks = {c: {**v, "judged": judged[c]} for c, v in free_running_checks(run, center, band, init).items()}
        errors = [run.error]
        if same:  # mamba-ssm's run carried the candidates as shadows: their errors at its weights
            mine = same.get(name, {"loss": [], "grad": [], "error": "not computed at mamba-ssm's weights"})
            floor = ATOL_REL * _rms(base.losses)
            checks["same_weights_loss"] = judge_same_weights(mine["loss"], same[BASELINE]["loss"], floor)
            checks["same_weights_grad"] = judge_same_weights(mine["grad"], same[BASELINE]["grad"], ATOL_REL)
            errors.append(mine.get("error") and f"at mamba-ssm's weights, {mine['error']}")
        passed = all(c["passed"] or not c.get("judged", True) for c in checks.values())
        verdicts[name] = {"passed": passed and not any(errors), **checks}
        if any(errors):
            verdicts[name]["error"] = "; ".join(e for e in errors if e)
    reruns = [runs[n] for n in family if n != BASELINE]
    identical = all(
        r.losses == base.losses and all(torch.equal(r.params[n], base.params[n]) for n in base.params) for r in reruns
    )
    return {
        "band": {
            "center": REFERENCE,
            "runs": family,
            "rerun_bitwise_identical": identical if reruns else None,
            "bound": bounds,
            "consistency": consistency,
            "judged": judged,
            "deviation": {
                n: {
                    "loss": _abs_diff(runs[n].losses, center.losses),
                    "grad_norm": _abs_diff(runs[n].grad_norms, center.grad_norms),
                }
                for n in runs
                if n != REFERENCE
            },
        },
        "verdicts": verdicts,
    }


def band_note(band: Mapping[str, Any] | None, dev: str) -> str:
    """In words, what the band was measured from and which checks it could not judge."""
    if band is None:
        return "no band (a band run failed)"
    reruns = len(band["runs"]) - 1
    what = "rerun was" if reruns == 1 else f"{reruns} reruns were"
    them = "rerun" if reruns == 1 else f"{reruns} reruns"
    if band["rerun_bitwise_identical"] is None:
        note = "band: mamba-ssm's deviation from the reference alone (no rerun made)"
    elif band["rerun_bitwise_identical"]:
        why = "the CPU interpreter runs atomics in program order" if dev == "cpu" else "on this GPU"
        note = f"band: mamba-ssm's deviation from the reference alone (its {what} bitwise identical: {why})"
    else:
        note = (
            f"band: the largest deviation from the reference of mamba-ssm's run and its {them} (atomic reduction order)"
        )
    for check, judged in band.get("judged", {}).items():
        if not judged:
            name, ratios = max(band["consistency"].items(), key=lambda kv: kv[1][check])
            note += (
                f"; {check.replace('_', ' ')} not judged: {name} strays to {ratios[check]:.3g}x the band of the others"
            )
    return note


def run_task(
    task: str,
    cfg: cm.ModelConfig,
    tc: TrainConfig,
    backends: Mapping[str, cm.Backend],
    candidates: Sequence[str],
    dev: torch.device,
    controls: Sequence[str] = (),
) -> dict[str, Any]:
    """Train every named backend on ``task`` ({run name: backend}, mamba first) and judge ``candidates`` (each
    must pass) and ``controls`` (deliberately broken: each must fail)."""
    batches, data = make_batches(task, tc)
    init = initial_state(cfg, tc.seed, backends[BASELINE])
    runs: dict[str, Run] = {}
    shadows = {n: backends[n] for n in [*candidates, *controls, REFERENCE] if n in backends}
    for name, backend in backends.items():
        print(f"{task}: training {name}" + (f" (at its weights: {', '.join(shadows)})" if name == BASELINE else ""))
        runs[name] = train(name, backend, cfg, tc, init, batches, dev, shadows=shadows if name == BASELINE else None)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    judged = judge(runs, [*candidates, *controls], init)
    warm = min(tc.steps - 1, max(3, tc.steps // 20))  # the first steps compile and autotune
    return {
        "data": data,
        "runs": {
            name: {
                "losses": r.losses,
                "grad_norms": r.grad_norms,
                "step_ms": r.step_ms,
                "step_ms_median": statistics.median(r.step_ms[warm:]) if len(r.step_ms) > warm else None,
                "error": r.error,
            }
            for name, r in runs.items()
        },
        "timing_skips_steps": warm,
        "same_weights": runs[BASELINE].same_weights,
        **judged,
        "note": band_note(judged["band"], dev.type),
        "controls": list(controls),
        "passed": all(judged["verdicts"][c]["passed"] for c in candidates)
        and not any(judged["verdicts"][c]["passed"] for c in controls),
    }


# ---------------------------------------------------------------------------------------------
# Output


def summary_lines(payload: Mapping[str, Any]) -> list[str]:
    """The report as text: per task, the runs, the band and each candidate's checks."""
    meta = payload["meta"]
    lines = [f"# Convergence parity ({meta['device']}{', ' + meta['gpu'] if meta.get('gpu') else ''})", ""]
    lines += [f"    {meta['command']}", "", f"model {json.dumps(meta['model'])}", f"train {json.dumps(meta['train'])}"]
    for task, result in payload["tasks"].items():
        base_ms = result["runs"][BASELINE]["step_ms_median"]
        lines += ["", f"## {task}: {result['note']}", ""]
        lines += ["| run | final loss | step ms (median) | mamba ms / run ms | error |", "|---|---|---|---|---|"]
        for name, run in result["runs"].items():
            ms = run["step_ms_median"]
            final = final_loss(run["losses"], len(result["runs"][BASELINE]["losses"]))
            speed = f"{base_ms / ms:.2f}x" if ms and base_ms else "-"
            lines.append(
                f"| {name} | {final:.5f} | {'-' if ms is None else f'{ms:.2f}'} | {speed} | {run['error'] or ''} |"
            )
        lines += [
            "",
            "| candidate | loss curve | grad-norm curve | final loss | params | loss, same weights "
            "| gradient, same weights | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, v in result["verdicts"].items():
            if "loss_curve" not in v:
                lines.append(f"| {name} | | | | | | | FAIL: {v['error']} |")
                continue
            cells = [
                f"{v[c]['max_ratio']:.3g} (step {v[c]['worst_step']})" + ("" if v[c]["judged"] else ", not judged")
                for c in ("loss_curve", "grad_norm_curve")
            ]
            cells += [
                "-" if c not in v else f"{v[c]['ratio']:.3g}" + ("" if v[c].get("judged", True) else ", not judged")
                for c in SCALAR_CHECKS
            ]
            verdict = "pass" if v["passed"] else "FAIL" + (f": {v['error']}" if v.get("error") else "")
            if name in result.get("controls", ()):
                verdict = f"{verdict} (control: {'rejected' if not v['passed'] else '**NOT REJECTED**'})"
            lines.append(f"| {name} | {' | '.join(cells)} | {verdict} |")
        lines += [
            "",
            "Cells (pass <= 1): curves, final loss and params: deviation from the reference / bound, bound ="
            f" {FACTOR} x band + {ATOL_REL} x value; same weights: RMS error against the reference at mamba's"
            f" weights / ({FACTOR} x mamba's).",
        ]
    lines += ["", f"**{'PASS' if payload['passed'] else 'FAIL'}**"]
    return lines


def _write_png(figure: Any, path: Path) -> None:
    """Save ``figure`` via a temporary file and a rename (no half-written PNG)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    try:
        figure.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def plot(payload: Mapping[str, Any], out: Path) -> list[Path]:
    """One PNG per task: loss and gradient norm per run (top), each run's |difference from the reference| with the
    bound a candidate must stay under (middle, log scale; a difference of exactly 0 is not drawn) and, where the
    JSON has them, each backend's loss and gradient error against the reference at mamba-ssm's weights with the
    bound on their RMS (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for task, result in payload["tasks"].items():
        colors = {name: f"C{i}" for i, name in enumerate(result["runs"])}
        same = result.get("same_weights") or {}
        rows = 3 if same else 2
        fig, axes = plt.subplots(rows, 2, figsize=(12, 4 * rows), sharex=True)
        for col, (key, title) in enumerate((("losses", "loss"), ("grad_norms", "gradient norm (before clipping)"))):
            top, bottom = axes[0][col], axes[1][col]
            for name, run in result["runs"].items():
                is_base = name == BASELINE
                top.plot(
                    run[key], label=name, color=colors[name], lw=1.6 if is_base else 1.0, ls="-" if is_base else "--"
                )
            if key == "losses":
                for label, level in result["data"]["levels"].items():
                    top.axhline(level, color="grey", lw=0.8, ls=":")
                    top.annotate(label, (0, level), color="grey", fontsize=8, va="bottom")
            top.set_title(f"{task}: {title}")
            top.legend(fontsize=8)
            if result["band"] is not None:
                quantity = "loss" if key == "losses" else "grad_norm"
                bottom.plot(result["band"]["bound"][quantity], color="black", lw=1.5, label="bound")
                for name, deviation in result["band"]["deviation"].items():
                    shown = [d if 0 < d < math.inf else math.nan for d in deviation[quantity]]
                    bottom.plot(shown, label=name, color=colors[name], lw=1.0, marker=".")
                bottom.set_yscale("log")
                bottom.legend(fontsize=8)
            bottom.set_title(f"|{title.split(' (')[0]} - reference's| (0 not drawn)")
            axes[-1][col].set_xlabel("step")
            if same:
                quantity = "loss" if key == "losses" else "grad"
                ax = axes[2][col]
                for name, errs in same.items():
                    shown = [e if 0 < e < math.inf else math.nan for e in errs.get(quantity, [])]
                    if shown:
                        ax.plot(shown, label=name, lw=0.8, color=colors.get(name, "grey"))
                bounds = {
                    v[f"same_weights_{quantity}"]["bound"]
                    for v in result["verdicts"].values()
                    if f"same_weights_{quantity}" in v
                }
                for bound in bounds:  # one bound for every candidate: FACTOR x mamba-ssm's RMS + the floor
                    ax.axhline(bound, color="black", lw=1.2, ls=":", label="bound on a candidate's RMS")
                ax.set_yscale("log")
                ax.legend(fontsize=8)
                what = "|loss - reference's|" if quantity == "loss" else "|grad - reference's| / |reference's|"
                ax.set_title(f"at mamba-ssm's weights: {what}")
        fig.suptitle(textwrap.fill(result["note"], 150), fontsize=9)  # a note on checks not judged runs long
        fig.tight_layout()
        path = out / f"{task}.png"
        _write_png(fig, path)
        plt.close(fig)
        written.append(path)
    return written


def write_outputs(payload: Mapping[str, Any], out: Path) -> None:
    """The JSON, the summary and the plots (the plots skipped with a note where matplotlib is missing)."""
    atomic_write(out / "convergence.json", json.dumps(payload, indent=1, default=str) + "\n")
    redraw(payload, out)


def redraw(payload: Mapping[str, Any], out: Path) -> None:
    """summary.md and the PNGs from a payload."""
    atomic_write(out / "summary.md", "\n".join(summary_lines(payload)) + "\n")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            f"convergence: plots not drawn (no matplotlib here): python bench/convergence.py --plot-from "
            f"{out / 'convergence.json'} --out {out} where it is installed",
            file=sys.stderr,
        )
        return
    for path in plot(payload, out):
        print(f"wrote {path}")


def _versions() -> dict[str, str]:
    import importlib.metadata

    found = {"torch": torch.__version__, "python": platform.python_version()}
    for pkg in ("triton", "helion", "mamba_ssm"):
        try:
            found[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            found[pkg] = "unknown"
    return found


def helion_configs(cfg: cm.ModelConfig, dev: torch.device) -> dict[str, Any]:
    """The configs the Helion drop-ins load for the model's calls (None: nothing promoted, kernel defaults)."""
    from kernels import layernorm_gated, ssd_combined

    b, L = 1, cfg.chunk_size
    x = torch.empty(b, L, cfg.nheads, cfg.headdim, device=dev, dtype=torch.bfloat16 if dev.type == "cuda" else None)
    B = torch.empty(b, L, cfg.ngroups, cfg.dstate, device=dev, dtype=x.dtype)
    try:  # a stale store entry raises here as it did in every Helion step: recorded, not fatal to the report
        return {
            "ssd_combined": ssd_combined._promoted(x, B, cfg.chunk_size),
            "layernorm_gated": layernorm_gated._promoted(x.reshape(b, L, -1), cfg.d_inner // cfg.ngroups),
        }
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def make_payload(
    command: str,
    cfg: cm.ModelConfig,
    tc: TrainConfig,
    results: Mapping[str, Any],
    dev: torch.device,
    planned: Sequence[str],
) -> dict[str, Any]:
    """The JSON written: format marker, what ran (settings, versions, the Helion configs loaded), every task's
    result so far, and the verdict (a pass only once every planned task has passed)."""
    return stamped(
        "convergence",
        {
            "meta": {
                "command": command,
                "device": dev.type,
                "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else None,
                "autocast": "bfloat16" if dev.type == "cuda" else None,
                "tasks_planned": list(planned),
                "model": cfg.to_dict(),
                "train": {**dataclasses.asdict(tc), "warmup": tc.warmup, "clip": CLIP, "optimizer": "AdamW(0.9, 0.95)"},
                "factor": FACTOR,
                "atol_rel": ATOL_REL,
                "helion_configs": helion_configs(cfg, dev),
                "timing": "wall time per step, synchronized; median after the first steps"
                if dev.type == "cuda"
                else "CPU interpreter: step times are no speed measure",
                **_versions(),
            },
            "tasks": dict(results),
            "passed": set(results) == set(planned) and all(r["passed"] for r in results.values()),
        },
    )


# ---------------------------------------------------------------------------------------------
# Command line


def _load_payload(path: str) -> dict[str, Any]:
    """A convergence JSON; ValueError (one line) if it is not one."""
    try:
        payload = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(payload, dict) or {k: payload.get(k) for k in FORMAT} != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT['format']} version {FORMAT['version']} file")
    return payload


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=parity_device.DEVICES, default="cuda")
    parser.add_argument("--out", required=True, help="output directory (convergence.json, <task>.png, summary.md)")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {', '.join(TASKS)}")
    parser.add_argument("--steps", type=int, help="training steps (default: the device's preset)")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--seqlen", type=int)
    parser.add_argument("--layers", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--recall-pairs", type=int, help="key-value pairs per recall episode")
    parser.add_argument("--recall-keys", type=int, help="recall keys (and values) to draw from: chance is ln(keys)")
    parser.add_argument("--reruns", type=int, help="mamba-ssm reruns for the band (default: the device's preset)")
    parser.add_argument("--seed", type=int, default=0, help="initial weights")
    parser.add_argument("--data-seed", type=int, default=1, help="batches and their order")
    parser.add_argument(
        "--control", action="store_true", help=f"also train {CONTROL} (D skip term dropped): it must be rejected"
    )
    parser.add_argument("--plot-from", default=None, help="redraw the plots and summary from this JSON, nothing run")
    return parser.parse_args(argv)


def configure(args: argparse.Namespace) -> tuple[cm.ModelConfig, TrainConfig, list[str], int]:
    """The model and training settings, tasks and number of mamba-ssm reruns the arguments ask for; ValueError (one
    line) if unusable."""
    preset = PRESETS[args.device]
    model = dataclasses.replace(preset["model"], **({"n_layers": args.layers} if args.layers is not None else {}))
    names = ("steps", "batch", "seqlen", "lr", "recall_pairs", "recall_keys")
    given = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    train_cfg = TrainConfig(**{**preset["train"], **given, "seed": args.seed, "data_seed": args.data_seed})
    model.validate()
    train_cfg.validate()
    reruns = preset["reruns"] if args.reruns is None else args.reruns
    if reruns < 0:
        raise ValueError(f"reruns must be at least 0, got {reruns}")
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ValueError(f"unknown task {unknown[0]!r}: expected {', '.join(TASKS)}" if unknown else "no task given")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no CUDA device (--device cpu runs the tiny version)")
    return model, train_cfg, tasks, reruns


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    try:
        if args.plot_from:
            redraw(_load_payload(args.plot_from), out)
            return 0
        cfg, tc, tasks, reruns = configure(args)
        for task in tasks:
            make_batches(task, dataclasses.replace(tc, steps=1))  # bad data (a stripped stdlib) fails before training
    except ValueError as exc:
        print(f"convergence: {exc}", file=sys.stderr)
        return 2
    parity_device.configure(args.device)  # before triton is imported: the interpreter on CPU
    from reference import mamba_triton

    mamba_triton.autotune_as_shipped()  # mamba-ssm as training runs it, not pinned to the parity baseline's record
    dev = torch.device(args.device)
    loaded = {name: cm.load_backend(name) for name in cm.BACKENDS}
    backends = {
        BASELINE: loaded["mamba"],
        **dict.fromkeys(rerun_names(reruns), loaded["mamba"]),
        CANDIDATE: loaded["helion"],
        REFERENCE: loaded["reference"],
    }
    if args.control:
        backends[CONTROL] = cm.without_d(loaded["helion"])
    command = "python bench/convergence.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    results: dict[str, Any] = {}
    for task in tasks:  # the outputs rewritten after each task: a run stopped by a time limit keeps what it judged
        results[task] = run_task(task, cfg, tc, backends, [CANDIDATE], dev, [CONTROL] if args.control else [])
        payload = make_payload(command, cfg, tc, results, dev, tasks)
        write_outputs(payload, out)
    print("\n".join(summary_lines(payload)))
    return 0 if payload["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
