"""tolerances.toml: lookup order, validation errors that name file and entry, and the rule that
every number carries a comment."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity import tolerances
from parity.errors import ParityError
from parity.spec import Impl, OpSpec

DEFAULTS = """
[defaults.float32]
factor = 2.0
atol = 1e-5
rtol = 1e-4
"""

SPEC = OpSpec(
    name="toy",
    reference=Impl("torch", "math:sqrt"),
    make_inputs=lambda *a: {},
    problems=lambda profile: None,
    outputs=("out",),
    grad_inputs=("x",),
)


def _load(tmp_path: Path, text: str) -> tolerances.Tolerances:
    path = tmp_path / "tolerances.toml"
    path.write_text(text)
    return tolerances.load(path, specs={"toy": SPEC})


def test_most_specific_entry_wins(tmp_path):
    tols = _load(
        tmp_path,
        DEFAULTS
        + """
[op.toy]
factor = 3.0
[op.toy.float32]
atol = 1e-3
[op.toy.float32."grad.x"]
atol = 1e-2
""",
    )
    assert tols.lookup("toy", "float32", "out") == tolerances.Tolerance(3.0, 1e-3, 1e-4)
    assert tols.lookup("toy", "float32", "grad.x") == tolerances.Tolerance(3.0, 1e-2, 1e-4)
    assert tols.lookup("other", "float32", "out") == tolerances.Tolerance(2.0, 1e-5, 1e-4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[defaults.float32\nfactor = 1", "malformed TOML"),
        (DEFAULTS + "[op.nope]\nfactor = 1.0\n", "[op.nope] unknown op"),
        (DEFAULTS + "[op.toy.float32]\nfator = 1.0\n", "[op.toy.float32] unknown key 'fator'"),
        (DEFAULTS + '[op.toy.float32]\natol = "small"\n', "atol must be a number, got str"),
        (DEFAULTS + "[op.toy.float32]\natol = -1.0\n", "atol = -1.0 must be finite and >= 0"),
        (DEFAULTS + "[op.toy.float32]\natol = true\n", "atol must be a number, got bool"),
        (DEFAULTS + "[op.toy.fp8]\natol = 1.0\n", "[op.toy.fp8] unknown dtype 'fp8'"),
        (DEFAULTS + "[op.toy.float32.outt]\natol = 1.0\n", "no output or gradient 'outt'"),
        ("[defaults.float32]\nfactor = 2.0\n", "[defaults.float32] is missing atol, rtol"),
        (DEFAULTS + "[extra]\nx = 1\n", "unknown top-level table(s) extra"),
        # a value where a table goes, at every level
        ("defaults = 3\n", "[defaults] must be a table, got int 3"),
        ("op = 3\n" + DEFAULTS, "[op] must be a table, got int 3"),
        ("checks = 3\n" + DEFAULTS, "[checks] must be a table, got int 3"),
        ("[defaults]\nfloat32 = 3\n", "[defaults.float32] must be a table, got int 3"),
        (DEFAULTS + "[op]\ntoy = 3\n", "[op.toy] must be a table, got int 3"),
        (DEFAULTS + "[op.toy]\nfloat32 = 3\n", "[op.toy.float32] must be a table, got int 3"),
        (DEFAULTS + "[op.toy.float32]\nout = 3\n", "[op.toy.float32.out] must be a table, got int 3"),
        (DEFAULTS + '[checks]\nx = "y"\n', "[checks.x] must be a table, got str 'y'"),
    ],
)
def test_bad_files_give_one_clear_error(tmp_path, text, message):
    with pytest.raises(ParityError) as info:
        _load(tmp_path, text)
    assert message in str(info.value) and "tolerances.toml" in str(info.value)


def test_a_dtype_without_defaults_is_refused_up_front(tmp_path):
    tols = _load(tmp_path, DEFAULTS)
    tols.require(["float32"])
    with pytest.raises(ParityError, match=r"tolerances\.toml: no \[defaults\.bfloat16\], \[defaults\.float16\] table"):
        tols.require(["float32", "float16", "bfloat16"])


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ParityError, match="cannot read tolerances"):
        tolerances.load(tmp_path / "absent.toml")


def test_project_file_is_valid_for_every_registered_op():
    from parity import registry

    tols = tolerances.load(specs=registry.load())
    assert {"float32", "float16", "bfloat16"} <= set(tols.defaults)


def test_every_number_in_the_project_file_says_where_it_came_from():
    assert tolerances.uncommented_numbers(tolerances.default_path()) == []


def test_uncommented_numbers_are_found(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("# why\n[a]\nx = 1.0\n\n[b]\ny = 2e-3\nz = 3  # measured\n")
    assert tolerances.uncommented_numbers(path) == [6]
