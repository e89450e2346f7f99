"""'Your workload, your server' without a browser: a file or two numbers become the run of every view, the page's
bounds hold, nothing of a file reaches the link, the guard lets the section's inputs through only within bounds,
a diagnosis sets the page to the server, and a file's cached runs go with its session."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from bokeh.document import Document

from engine import RunConfig, WorkloadError, simulate
from engine.diagnose import LogError
from explorable.page.layout import build_app
from explorable.page.url import apply_query, query_values
from explorable.server import guard
from explorable.state import runs, your_workload
from explorable.state.store import ExplorableState
from tests.engine.test_workload_formats import BURSTGPT_CSV, MOONCAKE_JSONL
from tests.explorable.served_app import ROOT, WEBSOCKET_MAX_MESSAGE_SIZE


@pytest.fixture
def page():
    state = ExplorableState()
    view = build_app(state, sync=False).views["your_workload"]
    view.card.collapsed = False  # the reader opens the section (it is built then)
    return state, view


def test_a_folded_section_builds_and_runs_nothing():
    state = ExplorableState()
    view = build_app(state, sync=False).views["your_workload"]
    assert len(view.card.objects) == 1 and not hasattr(view, "summary")  # nothing built
    state.max_num_seqs = 37  # (a setting no other test visits: the caches are the process's)
    assert not runs.has_throughput(RunConfig(max_num_seqs=37, unit="request"))  # nor run
    view.card.collapsed = False
    assert "yw-gain-value" in view.summary.object and len(view.card.objects) == 1


def test_a_file_becomes_the_run_of_every_view_and_back(page):
    state, view = page
    read = your_workload.read_upload(BURSTGPT_CSV.encode(), "trace.csv", 1)
    state.use_file(read)
    assert state.run_config().workload == read.workload and state.arrival == "workload"
    assert state.summary == simulate(RunConfig(workload=read.workload, arrival="workload")).summary()
    assert "BurstGPT layout): 3 requests" in view.summary.object and "1 failed" in view.summary.object
    view._back()
    assert state.uploaded is None and state.arrival == "all-at-once"
    assert state.summary == simulate(RunConfig()).summary()


def test_a_mooncake_file_shares_prompt_blocks_once_caching_is_on(page):
    state, _view = page
    state.use_file(your_workload.read_upload(MOONCAKE_JSONL.encode(), "m.jsonl", 1))
    state.param.update(enable_prefix_caching=True, model="Llama-3.1-8B")
    assert state.trace.cache_hits_per_request.tolist() == [0, 6144, 512, 0]


def test_two_numbers_replace_a_file_and_go_into_the_link_which_never_names_a_file(page):
    state, view = page
    state.use_file(your_workload.read_upload(BURSTGPT_CSV.encode(), "trace.csv", 1))
    assert not {"output_p50", "workload", "uploaded"} & set(query_values(state))
    view.numbers["output_p50"].value, view.numbers["output_p99"].value = 200, 2000
    view._apply_numbers()
    assert state.uploaded is None and state.run_config() == RunConfig(output_p50=200, output_p99=2000)
    query = query_values(state)
    assert (query["output_p50"], query["output_p99"], query["seed"], query["requests"]) == ("200", "2000", "1", "256")
    other = ExplorableState()
    apply_query(other, query)
    assert other.run_config() == state.run_config()  # the link opens the same workload


@pytest.mark.parametrize("values, words", [
    ({"output_p50": 200}, "Give both p50 and p99"),
    ({"output_p50": 200, "output_p99": 100}, "must be at least output_p50"),
    ({"output_p50": 10, "output_p99": 20, "prompt_p50": 50}, "go together"),
])
def test_bad_numbers_get_one_line_and_change_nothing(page, values, words):
    state, view = page
    before = state.run_config()
    for name, value in values.items():
        view.numbers[name].value = value
    view._apply_numbers()
    assert words in view.status.object and state.run_config() == before


@pytest.mark.parametrize("data, words", [
    (b"\xff\xfe\x00garbage", "is not a UTF-8 text file"),
    (b"a,b\n1,2\n", "CSV header must be"),
    (b"x" * (your_workload.MAX_UPLOAD_BYTES + 1), "the limit here is 2 MB"),
    (b'{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [1]}\n{"oops"\n', "line 2"),
])
def test_a_bad_upload_is_one_line_and_the_page_keeps_its_run(page, data, words):
    state, view = page
    before = state.summary
    view._deliver_upload(*runs.collecting(lambda: _read(data)))
    assert words in view.status.object and "\n" not in re.sub("<[^>]+>", "", view.status.object)
    assert state.uploaded is None and state.summary == before


def _read(data: bytes):
    from explorable.views.your_workload import _read as read

    return read(data, "up.csv", 1)


def test_the_diagnosis_sets_the_page_to_the_server(page):
    state, view = page
    view.diagnosis.paste.value_input = your_workload.sample_log()
    view.diagnosis.max_num_seqs.value = 256
    found = view.diagnosis.diagnose()
    assert found.case == "memory-cap"
    view.diagnosis.apply()
    assert (state.pool_gib, state.max_num_seqs, state.model, state.unit, state.allocation) == (
        16.0, 256, "Qwen3-8B", "pass", "on-demand")
    assert 'data-yw="reproduced"' in view.diagnosis.result.object


def test_a_long_or_hostile_paste_is_one_line():
    with pytest.raises(LogError, match="at most 8,192"):
        your_workload.diagnose_paste("x" * 9000, None)
    with pytest.raises(LogError, match="no vLLM log line"):
        your_workload.diagnose_paste("<script>alert(1)</script>", None)


def test_the_walk_loads_the_shipped_trace_compares_and_diagnoses(page):
    state, view = page
    view.guide.buttons.value = 0
    assert state.uploaded is not None and view.guide.text.object.count('data-step="1"')
    view.guide.buttons.value = 1
    assert state.max_num_seqs == 64 and "yw-gain-value" in view.summary.object
    view.guide.buttons.value = 2
    assert view.diagnosis.found.case == "memory-cap"


def test_a_file_s_cached_runs_go_with_its_session(page):
    state, _view = page
    read = your_workload.read_upload(BURSTGPT_CSV.encode(), "trace.csv", 1)
    state.use_file(read)
    cfg = state.run_config()
    assert runs.is_cached(cfg)
    your_workload.forget(read.workload)
    assert not runs.is_cached(cfg) and runs.is_cached(RunConfig())


def test_a_guide_step_leaves_the_reader_s_file(page):
    from explorable.page.layout import build_app as build

    state = ExplorableState()
    app = build(state, sync=False)
    state.use_file(your_workload.read_upload(BURSTGPT_CSV.encode(), "trace.csv", 1))
    assert app.views["guide"].step_buttons.value is None  # no step lights while a file is in use
    app.views["guide"].go(1)
    assert state.uploaded is None and state.run_config() == RunConfig(max_num_seqs=64)


# -- the guard ---------------------------------------------------------------------------------------------
def _doc_with_page():
    doc = Document()
    state = ExplorableState()
    app = build_app(state, sync=False)
    app.views["your_workload"].card.collapsed = False
    doc.add_root(app.__panel__().get_root(doc))
    return doc


def _model(doc, cls: str, css: str):
    return next(m for m in doc.models if type(m).__name__ == cls and css in (m.css_classes or []))


def test_the_guard_lets_the_section_s_inputs_through_within_their_bounds():
    doc = _doc_with_page()
    pf = guard.PatchFilter(doc)
    spinner = _model(doc, "Spinner", "yw-output_p50")
    upload = _model(doc, "FileInput", "yw-upload")
    paste = _model(doc, "TextAreaInput", "yw-paste")
    ok = lambda model, attr, new: pf.event(  # noqa: E731
        {"kind": "ModelChanged", "model": {"id": model.id}, "attr": attr, "new": new}) is not None
    assert ok(spinner, "value", 200) and ok(spinner, "value", None)
    assert not ok(spinner, "value", 0) and not ok(spinner, "value", 2.5) and not ok(spinner, "value", "200")
    assert ok(upload, "value", "QUJD" * 1000) and ok(upload, "filename", "trace.csv")
    assert not ok(upload, "value", "A" * (guard.MAX_UPLOAD_TEXT + 4))
    assert ok(paste, "value_input", "x" * your_workload.MAX_PASTE_CHARS)
    assert not ok(paste, "value_input", "x" * (your_workload.MAX_PASTE_CHARS + 1))
    assert not ok(upload, "accept", "*")  # not a property a reader sets


def test_an_upload_is_charged_in_advance_for_its_reading():
    doc = _doc_with_page()
    upload = _model(doc, "FileInput", "yw-upload")
    event = {"kind": "ModelChanged", "model": {"id": upload.id}, "attr": "value", "new": "A" * guard.MAX_UPLOAD_TEXT}
    assert guard.change_cost(doc, [((upload.id, "value"), event)]) == pytest.approx(
        guard.budget.CHANGE_COST_S + 0.6)


def test_the_readme_s_message_limit_carries_the_largest_upload_and_the_tests_serve_with_it():
    readme = (ROOT / "README.md").read_text()
    sizes = {int(n) for n in re.findall(r"--websocket-max-message-size (\d+)", readme)}
    assert sizes == {WEBSOCKET_MAX_MESSAGE_SIZE}
    # the file base64-encoded, in a PATCH-DOC with its name and type: well under the limit, and not far under
    assert guard.MAX_UPLOAD_TEXT + 2048 < WEBSOCKET_MAX_MESSAGE_SIZE < 2 * guard.MAX_UPLOAD_TEXT
    assert "2 MB" in your_workload.LIMITS_TEXT


def test_the_shipped_samples_read_as_their_layouts():
    read = your_workload.read_sample_trace()
    assert read.layout == "BurstGPT" and read.rows == 392 and read.skipped == 8
    assert your_workload.verdict(your_workload.distribution(read.all_output_len).ratio)[0] == "open-ended"
    assert your_workload.diagnose_paste(your_workload.sample_log(), 256).case == "memory-cap"
    assert Path(your_workload.SAMPLE_TRACE).stat().st_size < 50_000


def test_a_file_of_long_prompts_is_served_only_as_far_as_the_page_s_token_bound():
    rows = "".join(f"{20_000 + i},{500 + i},{i * 0.05:.2f}\n" for i in range(3000))
    read = your_workload.read_upload(("prompt_len,output_len,arrival_s\n" + rows).encode(), "long.csv", 1)
    wl = read.workload
    assert int((wl.prompt_len + wl.output_len).sum()) <= your_workload.MAX_WINDOW_TOKENS
    assert 0 < wl.num_requests < your_workload.UPLOAD_SAMPLE and your_workload.cut_to_token_bound(read)
    state = ExplorableState()
    view = build_app(state, sync=False).views["your_workload"]
    view.card.collapsed = False
    view._deliver_upload((read, 0.0), 0.0)
    assert f"cut to the {wl.num_requests:,}" in view.summary.object
