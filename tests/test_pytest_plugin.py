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


@pytest.mark.cpu
def test_an_xdist_group_runs_in_one_worker(pytester) -> None:
    """The op groups (one oracle and baseline per op) and the GPU compile groups rely on pytest-xdist's loadgroup;
    with pytest 9.2 and pytest-xdist 3.8 it ignored every group mark (pyproject.toml pins pytest below 9.2)."""
    pytester.makepyfile(
        """
        import os
        import pytest

        @pytest.mark.parametrize("n", range(6))
        @pytest.mark.xdist_group("op")
        def test_case(n):
            print("worker", os.environ["PYTEST_XDIST_WORKER"])
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-s", "-v")
    result.assert_outcomes(passed=6)
    workers = {line.split()[0] for line in result.outlines if line.startswith("[gw") and "PASSED" in line}
    assert len(workers) == 1, result.outlines


class _Item:
    """What longest_first reads of a pytest item: its node id and its xdist_group mark."""

    def __init__(self, nodeid: str, group: str | None = None) -> None:
        self.nodeid = nodeid
        self.mark = pytest.mark.xdist_group(group).mark if group else None

    def get_closest_marker(self, name: str):
        return self.mark if name == "xdist_group" else None


def test_longest_groups_go_first_and_stay_whole() -> None:
    from parity.pytest_plugin import longest_first

    items = [
        _Item("t.py::a[g1-x]@g1", "g1"),
        _Item("t.py::a[g2-x]@g2", "g2"),
        _Item("t.py::lone"),
        _Item("t.py::a[g1-y]@g1", "g1"),
        _Item("t.py::new"),
    ]
    durations = {"t.py::a[g1-x]": 1.0, "t.py::a[g1-y]": 2.0, "t.py::a[g2-x]": 10.0, "t.py::lone": 4.0}
    # g1 sums to 3 s; "new" is unknown and counts as the mean, 17 / 4 = 4.25 s
    order = [item.nodeid for item in longest_first(items, durations)]  # type: ignore[arg-type]
    assert order == ["t.py::a[g2-x]@g2", "t.py::new", "t.py::lone", "t.py::a[g1-x]@g1", "t.py::a[g1-y]@g1"]


@pytest.mark.cpu
def test_durations_are_read_from_a_junit_xml(pytester) -> None:
    import gzip

    from parity.pytest_plugin import junit_durations

    pytester.makepyfile(
        test_timed="""
        import time

        import pytest

        @pytest.mark.parametrize("wait", [0.3, 0.0])
        def test_wait(wait):
            time.sleep(wait)
        """
    )
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--junitxml={xml}")
    result.assert_outcomes(passed=2)
    zipped = pytester.path / "junit.xml.gz"
    zipped.write_bytes(gzip.compress(xml.read_bytes()))
    for path in (xml, zipped):
        durations = junit_durations(path)
        assert set(durations) == {"test_timed.py::test_wait[0.3]", "test_timed.py::test_wait[0.0]"}
        assert durations["test_timed.py::test_wait[0.3]"] >= 0.3 > durations["test_timed.py::test_wait[0.0]"]
