"""The hypothesis profiles, registered with hypothesis (``settings.register_profile``): ``ci`` for the CPU
(derandomized, few small problems: the Triton interpreter is slow) and ``gpu`` for the GPU (more problems,
realistic sizes; derandomized too, so that a merge gate checks the same problems on every run and every
implementation of an op meets the same problems, sharing their oracle and baseline runs).

``long`` (GPU only) runs each op's problems whose tensors' element offsets cross 2^31 (``OpSpec.profile_examples``,
judged by the op's segmented oracle: ``OpSpec.oracle_for``), besides its pinned examples; ops without such problems
generate none under it (``OpSpec.max_examples``).

Select one under pytest with hypothesis's own ``--hypothesis-profile ci|gpu|long`` (default: ci on cpu, gpu on cuda)
and in the CLI with ``--profile``. Each spec's ``problems(profile)`` strategy decides the size caps for the
profile's name; :class:`Profile` adds the dtypes a profile checks. No health check is suppressed: the problem
strategies draw small dictionaries, and slow test bodies are what ``deadline=None`` allows.

This module imports only hypothesis, so that the pytest plugin can register the profiles before hypothesis's
own plugin loads the one asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings

from parity.errors import ParityError

settings.register_profile("ci", max_examples=2, derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("gpu", max_examples=25, derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("long", max_examples=1, derandomize=True, deadline=None, database=None, print_blob=True)


@dataclass(frozen=True)
class Profile:
    """A registered hypothesis profile by name, and the dtypes it checks (None: every dtype the spec lists)."""

    name: str
    dtypes: tuple[str, ...] | None = None
    device: str | None = None
    """The only device this profile runs on (None: any)."""

    @property
    def settings(self) -> settings:
        """The hypothesis settings registered under this profile's name."""
        return settings.get_profile(self.name)

    @property
    def max_examples(self) -> int:
        """Generated problems per op and dtype (an op's ``OpSpec.max_examples`` may override it)."""
        return self.settings.max_examples

    def wants(self, dtype: str) -> bool:
        """Whether this profile checks ``dtype``."""
        return self.dtypes is None or dtype in self.dtypes


PROFILES = {
    # CPU: the two dtypes issue #2 asks for.
    "ci": Profile("ci", dtypes=("float32", "float16")),
    "gpu": Profile("gpu"),
    # Tensors past 2^31 elements (tens of GB): the H200, in bf16, the dtype of long-context training.
    "long": Profile("long", dtypes=("bfloat16",), device="cuda"),
}


def get_profile(name: str) -> Profile:
    """The profile called ``name``, for the device this process is set up for; a clear error otherwise."""
    if name not in PROFILES:
        raise ParityError(f"unknown profile {name!r}: expected one of {', '.join(PROFILES)}")
    profile = PROFILES[name]
    if profile.device is not None:
        from parity import device

        here = device.ensure_configured()
        if here != profile.device:
            raise ParityError(
                f"profile {name!r} runs on {profile.device} only (its problems hold tensors past 2^31 elements); "
                f"this process runs on {here}: pass --device {profile.device} (pytest: --parity-device cuda)"
            )
    return profile
