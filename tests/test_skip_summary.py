"""`make test` says at the end which tests skipped because data it fetches is missing (a failed download)."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")


def test_the_run_ends_naming_each_test_skipped_for_missing_data(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(
        test_data="""
        import pytest

        @pytest.mark.skipif(True, reason="real Ding file not present at /data/ding")
        def test_ding():
            pass

        def test_bergamot():
            pytest.skip("the Bergamot models are not under downloads/ (run `python -m core import-bergamot`)")

        def test_cuda():
            pytest.skip("needs a CUDA device")

        def test_runs():
            assert True
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=3)  # the run stays green: no network is no failure
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*!! 2 real-data test(s) SKIPPED: their data is missing !!*",
            "test_data.py::test_ding: real Ding file not present at /data/ding",
            "test_data.py::test_bergamot: the Bergamot models are not under downloads/ (run `python -m core*",
            "These tests did not run. Fetch the data (`make downloads`*",
        ]
    )
    assert "test_data.py::test_cuda:" not in out  # a machine without a GPU is not missing data


def test_a_run_with_every_data_file_says_nothing_more(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(test_fine="def test_one():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "real-data" not in result.stdout.str()
