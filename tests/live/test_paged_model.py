"""The Qwen3 model over a paged KV pool computes what a plain contiguous forward pass computes."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine.live.backend import TORCH  # noqa: E402
from engine.live.kv_cache import PagedKVCache  # noqa: E402
from engine.live.qwen3 import build_model  # noqa: E402
from engine.live.runner import ModelRunner, PassInput  # noqa: E402
from engine.presets import MODELS  # noqa: E402
from tests.live.helpers import contiguous_logits  # noqa: E402

BLOCK = 4  # small pages: an 11-token prompt spans three of them


@pytest.fixture(scope="module")
def runner():
    model = build_model(MODELS["tiny"], "cpu", torch.float32, seed=3)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():  # larger weights than the N(0, 0.02) default, so mistakes show in the logits
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.2 * noise)
    cache = PagedKVCache(model.spec, num_blocks=40, block_size=BLOCK, device="cpu", dtype=torch.float32)
    return ModelRunner(model, cache, max_num_seqs=8, max_model_len=256, kernels=TORCH, use_cuda_graphs=False)


def run(runner, *seqs):
    """seqs: (tokens so far, computed_before, new token count, block ids); every one samples if caught up."""
    batch = PassInput(
        token_ids=[np.array(t[c:c + n]) for t, c, n, _ in seqs],
        computed_before=[c for _, c, _, _ in seqs],
        block_tables=[b for *_, b in seqs],
        sample=[c + n == len(t) for t, c, n, _ in seqs],
    )
    return runner.execute(batch, keep_logits=True)


def assert_close(paged, reference):
    scale = reference.abs().max().item()
    np.testing.assert_allclose(paged.double().numpy(), reference.numpy(), atol=2e-5 * scale, rtol=0)


def prompt(seed, n):
    return np.random.default_rng(seed).integers(0, 256, size=n).tolist()


def test_chunked_prefill_then_decodes_on_scattered_pages_match_contiguous(runner):
    tokens = prompt(0, 11)
    pages = [7, 3, 12, 25, 9]
    assert run(runner, (tokens, 0, 6, pages)).sampled == []  # a chunk mid-prompt samples nothing
    res = run(runner, (tokens, 6, 5, pages))
    assert_close(res.logits[0], contiguous_logits(runner.model, tokens)[10])
    for _ in range(6):
        tokens.append(res.sampled[0])
        res = run(runner, (tokens, len(tokens) - 1, 1, pages))
        reference = contiguous_logits(runner.model, tokens)[-1]
        assert_close(res.logits[0], reference)
        assert res.sampled[0] == int(reference.argmax())


def test_preempted_sequence_recomputed_into_other_pages_continues_identically(runner):
    tokens = prompt(1, 9)
    res = run(runner, (tokens, 0, 9, [5, 30, 2]))
    for _ in range(4):
        tokens.append(res.sampled[0])
        res = run(runner, (tokens, len(tokens) - 1, 1, [5, 30, 2, 17]))
    before_preemption = res.logits[0]
    # Preempted: its pages are gone (and reused by someone else); readmission re-prefills prompt + output.
    run(runner, (prompt(9, 16), 0, 16, [30, 2, 17, 5]))
    recomputed = run(runner, (tokens, 0, len(tokens), [33, 1, 21, 11]))
    assert_close(recomputed.logits[0], contiguous_logits(runner.model, tokens)[-1])
    assert_close(recomputed.logits[0], before_preemption.double())
    tokens.append(recomputed.sampled[0])
    res = run(runner, (tokens, len(tokens) - 1, 1, [33, 1, 21, 11]))
    assert_close(res.logits[0], contiguous_logits(runner.model, tokens)[-1])


def test_one_pass_mixing_decodes_and_prefill_chunks_matches_each_alone(runner):
    a, b, c = prompt(2, 7), prompt(3, 13), prompt(4, 5)
    pages_a, pages_b, pages_c = [14, 4], [22, 8, 36, 19], [27, 6]
    run(runner, (a, 0, 7, pages_a), (b, 0, 6, pages_b))  # a's prompt done, b's first chunk
    a.append(int(contiguous_logits(runner.model, a)[-1].argmax()))
    # Decode a, finish b's prompt from a cached prefix, and prefill c: three kinds in one batch.
    res = run(runner, (b, 6, 7, pages_b), (a, 7, 1, pages_a), (c, 0, 5, pages_c))
    assert len(res.sampled) == 3
    for logits, seq in zip(res.logits, (b, a, c)):
        assert_close(logits, contiguous_logits(runner.model, seq)[-1])


def test_tied_embeddings_use_the_embedding_as_output_layer():
    from dataclasses import replace

    spec = replace(MODELS["tiny"], tie_word_embeddings=True)
    model = build_model(spec, "cpu", torch.float32, seed=5)
    assert model.lm_head is None and "lm_head.weight" not in model.state_dict()
    cache = PagedKVCache(spec, num_blocks=8, block_size=BLOCK, device="cpu", dtype=torch.float32)
    r = ModelRunner(model, cache, max_num_seqs=2, max_model_len=64, kernels=TORCH, use_cuda_graphs=False)
    tokens = prompt(6, 6)
    res = run(r, (tokens, 0, 6, [3, 1]))
    assert_close(res.logits[0], contiguous_logits(model, tokens)[-1])


def test_padded_static_decode_buffers_match_eager_and_touch_only_the_null_block():
    # The buffers and padding CUDA graphs replay, run eagerly, in the size-4 bucket: 3 sequences decode,
    # then 2 (the third row's stale slot must not be written again).
    model = build_model(MODELS["tiny"], "cpu", torch.float32, seed=8)
    prompts = [prompt(10, 9), prompt(11, 17), prompt(12, 4)]
    tables = [[6, 2, 11], [9, 3, 14, 1, 20], [17, 5]]
    logits = {}
    for static in (False, True):
        cache = PagedKVCache(model.spec, num_blocks=24, block_size=BLOCK, device="cpu", dtype=torch.float32)
        r = ModelRunner(model, cache, max_num_seqs=8, max_model_len=64, kernels=TORCH, use_cuda_graphs=False)
        if static:
            r.prepare_static_decode([1, 4, 8], capture=False)
        first = run(r, *[(p, 0, len(p), t) for p, t in zip(prompts, tables)])
        seqs = [p + [tok] for p, tok in zip(prompts, first.sampled)]
        third = run(r, *[(s, len(s) - 1, 1, t) for s, t in zip(seqs, tables)])
        seqs = [s + [tok] for s, tok in zip(seqs, third.sampled)][:2]
        before = cache.kv.clone()
        res = run(r, *[(s, len(s) - 1, 1, t) for s, t in zip(seqs, tables)])
        assert res.used_graph == static
        logits[static] = torch.cat([third.logits, res.logits])
        changed = (cache.kv != before).flatten(4).any(-1).any(0).any(0)  # [blocks, slots]
        written = {(t[(len(s) - 1) // BLOCK], (len(s) - 1) % BLOCK) for s, t in zip(seqs, tables)}
        unexpected = {(int(b), int(o)) for b, o in changed.nonzero()} - written - {(0, 0)}
        assert not unexpected, unexpected
    torch.testing.assert_close(logits[True], logits[False])
