"""`python -m engine` at its edges: hostile workload files, output paths that cannot be written, flags that
would be ignored, a closed pipe. Each bad input gets one line on stderr, exit status 2, no traceback, no hang
and no file left behind (issue 15's CLI list, issue 9's CLI edges)."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from engine.cli import build_parser, main
from engine.workload import DEFAULT_SAMPLE_REQUESTS, MAX_FILE_ROWS, MAX_WORKLOAD_BYTES, MAX_WORKLOAD_REQUESTS
from tests.conftest import ROOT


def refused(capsys, *argv: str) -> str:
    """Run the CLI in-process; assert exit 2 with exactly one stderr line and no output; return that line."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    captured = capsys.readouterr()
    assert rc == 2, (rc, captured.err)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert captured.out == ""
    return lines[0]


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# -- workload files ----------------------------------------------------------------------------------------
def test_a_json_number_of_5000_digits_is_refused(tmp_path, capsys):
    path = tmp_path / "w.json"
    path.write_text('{"prompt_len": [' + "9" * 5000 + '], "output_len": [1]}')
    assert "digits" in refused(capsys, "run", "--workload", str(path))


def test_json_nested_100000_deep_is_refused(tmp_path, capsys):
    path = tmp_path / "w.json"
    path.write_text('{"prompt_len": ' + "[" * 100_000 + "]" * 100_000 + ', "output_len": [1]}')
    assert "nested deeper" in refused(capsys, "run", "--workload", str(path))


def test_too_many_rows_are_refused_while_reading_and_the_limit_is_named(tmp_path, capsys):
    path = tmp_path / "w.csv"
    path.write_text("prompt_len,output_len\n" + "10,5\n" * (MAX_FILE_ROWS + 1))
    assert f"at most {MAX_FILE_ROWS:,}" in refused(capsys, "run", "--workload", str(path))


def test_more_rows_than_a_run_serves_are_sampled_not_refused(tmp_path, capsys):
    path = tmp_path / "w.csv"
    path.write_text("prompt_len,output_len\n" + "10,5\n" * (MAX_WORKLOAD_REQUESTS + 1))
    assert main(["run", "--workload", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["finished_requests"] == DEFAULT_SAMPLE_REQUESTS


def test_a_file_over_the_size_limit_is_refused_without_reading_it_and_the_limit_is_named(tmp_path, capsys):
    path = tmp_path / "w.csv"
    with open(path, "wb") as fh:  # 10 million rows' worth, sparse: nothing is really written or read
        fh.truncate(10_000_000 * 8)
    line = refused(capsys, "run", "--workload", str(path))
    assert f"{MAX_WORKLOAD_BYTES / 2**20:g} MiB" in line and "limit" in line


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused_without_reading_it(capsys, device):
    if not os.path.exists(device):
        pytest.skip(f"{device} is not on this system")
    assert "not a regular file" in refused(capsys, "run", "--workload", device)


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_instead_of_blocking(tmp_path, capsys):
    fifo = tmp_path / "w.csv"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(capsys, "run", "--workload", str(fifo))


def test_a_utf8_byte_order_mark_is_accepted(tmp_path, capsys):
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbfprompt_len,output_len\r\n100,20\r\n50,10\r\n")
    assert main(["run", "--workload", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["finished_requests"] == 2


def test_a_huge_cell_is_refused_and_not_echoed(tmp_path, capsys):
    path = tmp_path / "w.csv"
    path.write_text("prompt_len,output_len\n" + "1" * 200_000 + ",5\n")
    line = refused(capsys, "run", "--workload", str(path))
    assert len(line) < 300


# -- output files ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command, flag", [("run", "--trace-out"), ("live", "--trace-out"),
                                           ("live", "--calibrate-out")])
def test_an_output_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys, command, flag):
    extra = ["--device", "cpu", "--model-preset", "tiny"] if command == "live" else []
    for bad, words in (("", "empty"), (str(tmp_path / "no" / "such" / "x.json"), "does not exist"),
                       (str(tmp_path), "not a regular file")):
        line = refused(capsys, command, *extra, flag, bad)
        assert words in line, line
    assert leftovers(tmp_path) == []


def test_a_file_size_limit_leaves_no_partial_trace(tmp_path):
    def limit():  # 4 KiB: the schedule of the default run is far larger
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    done = subprocess.run([sys.executable, "-m", "engine", "run", "--trace-out", "t.json"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=limit, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert leftovers(tmp_path) == []


def test_a_written_trace_is_whole_and_leaves_no_temporary_file(tmp_path, capsys):
    assert main(["run", "--trace-out", str(tmp_path / "t.json")]) == 0
    assert "summary" in json.loads((tmp_path / "t.json").read_text())
    assert leftovers(tmp_path) == ["t.json"]


def test_sweep_refuses_trace_out_instead_of_ignoring_it(tmp_path, capsys):
    line = refused(capsys, "sweep", "--param", "max_num_seqs", "--values", "1,2", "--trace-out", str(tmp_path / "x"))
    assert "--trace-out" in line
    assert leftovers(tmp_path) == []


# -- the pipe and the help -----------------------------------------------------------------------------------
def test_a_closed_pipe_ends_quietly():
    """`python -m engine run | head -1`: the reader goes away before the output is written."""
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    proc.stdout.close()  # nobody reads: the first write (or the final flush) meets EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(120) in (0, 1)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


@pytest.mark.parametrize("command", ["run", "sweep", "live"])
def test_every_flag_has_help_that_shows_its_default(command, capsys):
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    for action in sub._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{command} {action.option_strings} has no help"
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--max-num-batched-tokens", "--block-size", "--requests", "--seed", "--max-model-len"):
        assert flag in text
    assert text.count("(default:") >= len([a for a in sub._actions if a.dest not in ("help",) and not a.required])


# -- a checkpoint's config.json is read before any work --------------------------------------------------------
def _checkpoint(tmp_path, monkeypatch, text: str) -> None:
    (tmp_path / "config.json").write_text(text)
    monkeypatch.setenv("CB_LIVE_WEIGHTS_DIR", str(tmp_path))


def test_a_malformed_checkpoint_config_is_refused_up_front(tmp_path, capsys, monkeypatch):
    _checkpoint(tmp_path, monkeypatch, "{not json")
    assert "config.json" in refused(capsys, "live", "--device", "cpu", "--model-preset", "tiny")


def test_negative_layer_counts_are_refused_up_front(tmp_path, capsys, monkeypatch):
    _checkpoint(tmp_path, monkeypatch, json.dumps({
        "model_type": "qwen3", "num_attention_heads": 2, "num_key_value_heads": 1, "hidden_size": 64,
        "num_hidden_layers": -3, "intermediate_size": 128, "vocab_size": 256}))
    assert "num_hidden_layers" in refused(capsys, "live", "--device", "cpu", "--model-preset", "tiny")
