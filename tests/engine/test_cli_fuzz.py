"""Fuzzing the command line: any flag value either runs or is refused in one line with status 2."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from engine.cli import main

FLAGS = ["--max-num-seqs", "--pool-gib", "--allocation", "--declared-multiple", "--unit", "--spread",
         "--max-num-batched-tokens", "--block-size", "--requests", "--seed", "--model", "--gpu",
         "--num-gpu-blocks-override", "--max-model-len"]
NASTY = st.sampled_from(["0", "-1", "1e9", "nan", "inf", "-inf", "", " ", "1.5", "99999999999999999999", "abc",
                         "16", "64", "2", "reserve", "request", "\u2603", "0x10", "1_000", "--json"])
VALUES = st.one_of(NASTY, st.integers(-10**6, 10**6).map(str), st.floats(allow_nan=True).map(repr),
                   st.text(max_size=8))


def _call(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a malformed flag this way
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(FLAGS), VALUES), min_size=1, max_size=3))
def test_any_flag_values_run_or_fail_in_one_line(capsys, pairs):
    argv = ["run", "--requests", "32", "--json"]
    for flag, value in pairs:
        argv += [flag, value]
    code, out, err = _call(argv, capsys)
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
        assert out == ""
    else:
        assert '"throughput_tok_s"' in out


@pytest.mark.parametrize("argv", [[], ["run", "--unknown"], ["sweep"], ["run", "--max-num-seqs"]])
def test_usage_errors_exit_2(capsys, argv):
    code, _, err = _call(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
