"""Diagnostic: a kernel's sm90 build, read on a machine with no GPU.

Triton compiles for a target it is told of, and its wheel carries ptxas and nvdisasm, so the Triton code a Helion
kernel generates (and a Triton kernel of mamba-ssm's) can be built for sm90 here, specialized as a launch would
(arguments equal to 1 made constants, pointers and multiples of 16 marked 16-divisible) and read: registers, shared
memory, layout conversions, barriers, shuffles, SASS instruction counts, and the layout each ``tt.scan`` runs in.
These are static facts, not timings: they say where a kernel's build differs from its counterpart's, e.g. a cumsum
run across warps through shared memory where mamba-ssm's stays inside one warp.

    python bench/diag/sm90_build.py --shape nemotron --blocks 4,8,16 --warps 2,4 --json builds.json
    python bench/diag/sm90_build.py --shape nemotron --ssd-config configs/nvidia-h200-sm90/ssd_combined.json
    python bench/diag/sm90_build.py --ssd-config configs/nvidia-h200-sm90/ssd_combined.json --only bwd_dcb --warps 4,8

Run without ``TRITON_INTERPRET=1`` (the interpreter's functions cannot be compiled).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helion
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: mixer's shapes

from variant_timing import int_list, static_build

from parity.lookup import STATIC_SHAPES
from parity.report import atomic_write

SM90 = GPUTarget("cuda", 90, 32)
_POINTER = {
    torch.float64: "*fp64",
    torch.float32: "*fp32",
    torch.float16: "*fp16",
    torch.bfloat16: "*bf16",
    torch.int64: "*i64",
    torch.int32: "*i32",
}
_TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


@dataclass(frozen=True)
class Build:
    """The static facts of one kernel's sm90 build."""

    name: str
    num_warps: int
    registers: int
    shared: int
    conversions: int
    sass: dict[str, int]
    scans: list[dict[str, list[int]]]
    ttgir: str

    def line(self) -> str:
        """One line of the facts, for a table."""
        counts = " ".join(f"{op} {n}" for op, n in self.sass.items())
        return (
            f"{self.name}: warps {self.num_warps}, regs {self.registers}, smem {self.shared}, "
            f"convert_layout {self.conversions}, {counts}"
        )


def _layouts(ttgir: str) -> dict[str, dict[str, list[int]]]:
    """Each ``#blockedN`` layout of a TTGIR module: its sizePerThread, threadsPerWarp, warpsPerCTA and order."""
    found = {}
    for name, body in re.findall(r"^(#blocked\d*) = #ttg\.blocked<\{(.*)\}>", ttgir, re.M):
        found[name] = {
            key: [int(v) for v in value.split(",")] for key, value in re.findall(r"(\w+) = \[([^]]*)]", body)
        }
    return found


def scan_layouts(ttgir: str) -> list[dict[str, list[int]]]:
    """The layout of each ``tt.scan``'s operand, with its scanned axis under ``axis``."""
    layouts = _layouts(ttgir)
    scans = []
    for axis, layout in re.findall(r'"tt\.scan".*?axis = (\d+).*?\}\) : \(tensor<[^,]*, (#blocked\d*)>', ttgir, re.S):
        scans.append({**layouts[layout], "axis": [int(axis)]})
    return scans


def build(jit: Any, values: dict[str, Any], num_warps: int, name: str, num_stages: int = 1) -> Build:
    """Compile the Triton function ``jit`` for sm90 with the launch arguments ``values`` (by parameter name)."""
    signature: dict[str, str] = {}
    constants: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], Any] = {}
    for index, param in enumerate(jit.arg_names):
        value = values[param]
        if jit.params[index].is_constexpr or value is None or (isinstance(value, int) and value == 1):
            signature[param], constants[param] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[param], attrs[(index,)] = _POINTER[value.dtype], CUDABackend.parse_attr("D")
        elif isinstance(value, int):
            signature[param] = "i32"
            if value % 16 == 0:
                attrs[(index,)] = CUDABackend.parse_attr("D")
        else:
            signature[param] = "fp32"
    compiled = triton.compile(
        ASTSource(jit, signature, constants, attrs),
        target=SM90,
        options={"num_warps": num_warps, "num_stages": num_stages},
    )
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        usage = subprocess.run([_TOOLS / "cuobjdump", "-res-usage", cubin], capture_output=True, text=True).stdout
        sass = subprocess.run([_TOOLS / "nvdisasm", "-c", cubin], capture_output=True, text=True).stdout
    instructions = [line for line in sass.splitlines() if re.match(r"\s*/\*[0-9a-f]{4}\*/", line)]
    counts = {"SASS": len(instructions)}
    for op in ("LDG", "STG", "LDS", "STS", "LDL", "STL", "BAR", "SHFL", "MUFU", "HMMA", "HGMMA"):
        counts[op] = sum(f" {op}" in line for line in instructions)
    registers = re.search(r"REG:(\d+)", usage)
    ttgir = compiled.asm["ttgir"]
    return Build(
        name=name,
        num_warps=num_warps,
        registers=int(registers.group(1)) if registers else -1,
        shared=int(compiled.metadata.shared),
        conversions=ttgir.count("ttg.convert_layout"),
        sass=counts,
        scans=scan_layouts(ttgir),
        ttgir=ttgir,
    )


def helion_builds(kernel: helion.Kernel, args: tuple[Any, ...], config: dict[str, Any], name: str) -> list[Build]:
    """The sm90 builds of the Triton kernels one call of a Helion kernel launches with ``config`` (its host code run
    on these CPU tensors with a launcher that records each launch instead of running it)."""
    code = kernel.bind(args).to_triton_code(helion.Config(**config))
    launches: list[tuple[Any, tuple[Any, ...], int, int]] = []

    def record(jit: Any, grid: Any, *launch_args: Any, num_warps: int = 4, num_stages: int = 1, **_: Any) -> None:
        launches.append((jit, launch_args, num_warps, num_stages))

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{kernel.fn.__name__}_sm90.py"
        path.write_text(code)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        getattr(module, kernel.fn.__name__)(*args, _launcher=record)
        return [
            build(jit, dict(zip(jit.arg_names, values, strict=False)), warps, name, stages)
            for jit, values, warps, stages in launches
        ]


def _mamba_cumsum(dt: torch.Tensor, A: torch.Tensor, bias: torch.Tensor, chunk: int, block: int, warps: int) -> Build:
    """mamba-ssm's ``_chunk_cumsum_fwd_kernel`` built as its wrapper launches it (softplus, a dt bias)."""
    from reference import mamba_triton

    jit = mamba_triton._module("ssd_chunk_state")._chunk_cumsum_fwd_kernel.fn
    batch, seqlen, nheads = dt.shape
    out = torch.empty(batch, nheads, -(-seqlen // chunk), chunk)
    values = {
        "dt_ptr": dt,
        "A_ptr": A,
        "dt_bias_ptr": bias,
        "dt_out_ptr": out,
        "dA_cumsum_ptr": out,
        "batch": batch,
        "seqlen": seqlen,
        "nheads": nheads,
        "chunk_size": chunk,
        "dt_min": 0.0,
        "dt_max": float("inf"),
        "stride_dt_batch": dt.stride(0),
        "stride_dt_seqlen": dt.stride(1),
        "stride_dt_head": dt.stride(2),
        "stride_A_head": A.stride(0),
        "stride_dt_bias_head": bias.stride(0),
        "stride_dt_out_batch": out.stride(0),
        "stride_dt_out_chunk": out.stride(2),
        "stride_dt_out_head": out.stride(1),
        "stride_dt_out_csize": out.stride(3),
        "stride_dA_cs_batch": out.stride(0),
        "stride_dA_cs_chunk": out.stride(2),
        "stride_dA_cs_head": out.stride(1),
        "stride_dA_cs_csize": out.stride(3),
        "DT_SOFTPLUS": True,
        "HAS_DT_BIAS": True,
        "BLOCK_SIZE_H": block,
        "BLOCK_SIZE_CHUNK": triton.next_power_of_2(chunk),
    }
    return build(jit, values, warps, f"mamba-ssm head block {block}")


def ssd_launches(shape: dict[str, int]) -> dict[str, tuple[helion.Kernel, tuple[Any, ...]]]:
    """Each Helion kernel of the SSD forward and backward with zero arguments of the mixer's dtypes at ``shape`` (bf16
    inputs, D per head, dt bias and softplus on, no z, seq_idx or initial states), by its config key."""
    from kernels import bmm_chunk, chunk_cumsum, chunk_scan, chunk_state, state_passing
    from kernels import ssd_combined_bwd as bwd

    b, L, h, g = shape["batch"], shape["seqlen"], shape["nheads"], shape["ngroups"]
    p, n, cs = shape["headdim"], shape["dstate"], shape["chunk_size"]
    c = -(-L // cs)
    bf, wide = torch.bfloat16, torch.float64
    x, dy = torch.zeros(b, L, h, p, dtype=bf), torch.zeros(b, L, h, p, dtype=bf)
    B, C = torch.zeros(b, L, g, n, dtype=bf), torch.zeros(b, L, g, n, dtype=bf)
    dt, A, D = torch.zeros(b, L, h, dtype=bf), torch.zeros(h), torch.zeros(h)
    dt_out, dA = torch.zeros(b, h, c, cs), torch.zeros(b, h, c, cs)
    cb, dcb = torch.zeros(b, c, g, cs, cs), torch.zeros(b, c, g, cs, cs)
    states, dS = torch.zeros(b, c, h, p, n), torch.zeros(b, c, h, p, n)
    per_step = torch.zeros(b, h, c, cs, dtype=wide)
    ddA_last = torch.zeros(b, h, c, 1, dtype=wide)
    return {
        "chunk_cumsum": (chunk_cumsum.chunk_cumsum_kernel, chunk_cumsum.chunk_cumsum_args(dt, A, cs, A, True)),
        "chunk_state": (
            chunk_state.chunk_state_kernel,
            chunk_state.chunk_state_args(B, x, dt_out, dA, states_in_fp32=True),
        ),
        "state_passing": (
            state_passing.state_passing_kernel,
            state_passing.state_passing_args(states.flatten(3), dA[:, :, :, -1], chunk_size=cs, out_dtype=bf),
        ),
        "bmm_chunk": (bmm_chunk.bmm_chunk_kernel, bmm_chunk.bmm_chunk_args(C, B, cs, output_dtype=torch.float32)),
        "chunk_scan": (
            chunk_scan.chunk_scan_kernel,
            chunk_scan.chunk_scan_args(cb, x, dt_out, dA, C, states.to(bf), D=D),
        ),
        "bwd_states": (bwd.states_bwd_kernel, (dy, C, dA, states, None, None)),
        "bwd_dx": (
            bwd.dx_kernel,
            (x, dy, dt_out, dA, B, cb, dS, D, None, per_step, per_step, torch.zeros(b, c, h, p, dtype=wide)),
        ),
        "bwd_dcb": (bwd.dcb_kernel, (x, dy, dt_out, dA, cb, None, per_step)),
        "bwd_dc": (bwd.dc_kernel, (dy, states, dA, C, B, dcb, None, per_step)),
        "bwd_db": (bwd.db_kernel, (x, dt_out, dA, dS, C, dcb, None)),
        "bwd_ddt": (
            bwd.ddt_kernel,
            (*[per_step] * 2, ddA_last, *[per_step] * 2, dt_out, A, dt, A, 0.0, float("inf"), cs, True),
        ),
    }


def main() -> int:
    import mixer

    from kernels.chunk_cumsum import chunk_cumsum_args, chunk_cumsum_kernel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(mixer.SHAPES), default="nemotron")
    parser.add_argument("--blocks", default="4,8,16", help="head blocks (comma-separated)")
    parser.add_argument(
        "--warps", help="num_warps (comma-separated; default 2,4, and with --ssd-config each config's own)"
    )
    parser.add_argument("--only", help="with --ssd-config, build only these kernels (config keys, comma-separated)")
    parser.add_argument("--json", type=Path, help="also write every build's facts here")
    parser.add_argument(
        "--ssd-config",
        type=Path,
        help="instead, build every SSD kernel (static shapes) with this config: a store file's first entry, or a "
        "tuned config.json",
    )
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        print(
            "sm90_build: TRITON_INTERPRET=1 is set; Triton's interpreter builds nothing to compile: unset it",
            file=sys.stderr,
        )
        return 2
    try:
        warps = int_list(args.warps or "2,4")
        grid = [(b, w) for b in int_list(args.blocks) for w in warps]
    except ValueError:
        print(
            f"sm90_build: --blocks and --warps take integers, got {args.blocks!r} and {args.warps!r}", file=sys.stderr
        )
        return 2
    shape = mixer.SHAPES[args.shape]
    if args.ssd_config is not None:
        try:
            data = json.loads(args.ssd_config.read_text())
            configs = data["entries"][0]["config"] if "entries" in data else data
        except (OSError, ValueError, KeyError, IndexError) as exc:
            print(f"sm90_build: {args.ssd_config}: not a store file or a config: {exc}", file=sys.stderr)
            return 2
    batch, seqlen, nheads, chunk = shape["batch"], shape["seqlen"], shape["nheads"], shape["chunk_size"]
    dt = torch.zeros(batch, seqlen, nheads, dtype=torch.bfloat16)
    A, bias = torch.zeros(nheads), torch.zeros(nheads)
    kernel_args = chunk_cumsum_args(dt, A, chunk, bias, True)
    facts: list[dict[str, Any]] = []

    def report(result: Build, **where: Any) -> None:
        print(result.line(), flush=True)
        for scan in result.scans:
            print(f"  scan: {scan}", flush=True)
        facts.append({**where, **{k: v for k, v in dataclasses.asdict(result).items() if k != "ttgir"}})
        if args.json:
            atomic_write(args.json, json.dumps({"shape": args.shape, "builds": facts}, indent=1) + "\n")

    if args.ssd_config is not None:
        launches = ssd_launches(shape)
        only = args.only.split(",") if args.only else list(launches)
        if unknown := sorted(set(only) - set(launches)):
            print(f"sm90_build: --only: no SSD kernel {unknown}; the kernels are {sorted(launches)}", file=sys.stderr)
            return 2
        for key in only:
            kernel, kernel_args = launches[key]
            # host_tensor_descriptors: a key Helion accepts only where a GPU is present (it is off in these configs)
            config = {
                k: v for k, v in configs.get(key, {}).items() if k not in (STATIC_SHAPES, "host_tensor_descriptors")
            }
            static = static_build(kernel)
            for num_warps in warps if args.warps else [config.get("num_warps", 4)]:
                config = {**config, "num_warps": num_warps}
                for result in helion_builds(static, kernel_args, config, f"{key} {num_warps} warps"):
                    report(result, kernel="helion", config=config)
        return 0
    builds = {static: static_build(chunk_cumsum_kernel, static) for static in (False, True)}  # bound once each
    for block, warps in grid:
        report(_mamba_cumsum(dt, A, bias, chunk, block, warps), kernel="mamba-ssm", block=block, warps=warps)
        for static, kernel in builds.items():
            config = {"block_sizes": [block], "num_warps": warps, "num_stages": 1}
            name = f"helion chunk_cumsum head block {block}, {'static' if static else 'dynamic'} shapes"
            for result in helion_builds(kernel, kernel_args, config, name):
                report(result, kernel="helion", block=block, warps=warps, static=static)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
