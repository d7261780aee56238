"""The pytest plugin's log lines: a batch job's log says why each test failed as it happens, not only in the
end-of-run summary that a job cut by its time limit never reaches."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


@pytest.mark.cpu
def test_a_failure_is_logged_with_its_reason_when_it_happens(pytester) -> None:
    pytester.makepyfile(
        """
        def test_broken():
            assert 1 == 2, "grad.A 0.286 vs bound 0.102"

        def test_fine():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "parity.pytest_plugin", "-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=1, failed=1)
    lines = [line for line in result.errlines if line.startswith("parity: call failed:")]
    assert len(lines) == 1 and "test_broken" in lines[0] and "grad.A 0.286 vs bound 0.102" in lines[0]


@pytest.mark.cpu
def test_a_slow_test_is_logged_with_its_duration_when_it_ends(pytester) -> None:
    pytester.makeconftest("import parity.pytest_plugin as plugin\n\nplugin.SLOW_SECONDS = 0.2\n")
    pytester.makepyfile(
        """
        import time

        def test_slow():
            time.sleep(0.3)

        def test_quick():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "parity.pytest_plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    slow = [line for line in result.errlines if line.startswith("parity: slow:")]
    assert len(slow) == 1 and "test_slow" in slow[0]
