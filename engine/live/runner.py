"""The model runner: one scheduler pass in, one forward pass of the torch model out.

`pass_input_from_plan` reads a `StepPlan` (who runs, how many tokens from which position, who samples,
which pages each holds) with the token history; `ModelRunner.execute` turns that into tensors (decodes first, then
prefill chunks, all in one flat batch), runs the model, samples argmax for the sequences that are caught
up, and times the pass: CUDA events on a GPU, perf_counter on a CPU. Decode-only passes replay a CUDA
graph captured for the next batch size up, when graphs are enabled.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np
import torch

from engine.live.backend import Kernels
from engine.live.kv_cache import PagedKVCache, slot_mapping
from kernels.scheduler_core import cdiv
from engine.live.qwen3 import AttentionMetadata, PrefillChunk, Qwen3ForCausalLM


@dataclass
class PassInput:
    """One pass, per scheduled sequence: its new tokens, where they start, its pages, whether it samples."""

    token_ids: list[np.ndarray]
    computed_before: list[int]
    block_tables: list  # per sequence, its pages in order (a list or an int array)
    sample: list[bool]

    @property
    def num_seqs(self) -> int:
        return len(self.token_ids)


@dataclass
class PassResult:
    sampled: list[int]  # one token per sampling sequence, in the PassInput's order
    gpu_seconds: float  # CUDA-event time of the pass (equals wall time on a CPU)
    wall_seconds: float  # host time from tensor building to the sampled ids in hand
    used_graph: bool
    logits: torch.Tensor | None = None  # [num sampling sequences, vocab] when asked for


def pass_input_from_plan(plan, tokens: list[list[int]]) -> PassInput:
    """The runner's view of a StepPlan: each scheduled sequence's new token ids and its pages."""
    token_ids = []
    for r, n, c in zip(plan.request_ids.tolist(), plan.new_tokens.tolist(), plan.computed_before.tolist()):
        assert c + n <= len(tokens[r]), f"request {r} asks for positions up to {c + n}, has {len(tokens[r])} tokens"
        token_ids.append(np.asarray(tokens[r][c:c + n], dtype=np.int64))
    tables = [row[:count] for row, count in zip(plan.block_tables, plan.num_blocks.tolist())]
    return PassInput(token_ids, plan.computed_before.tolist(), tables, plan.samples.tolist())


def _graph_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16, and max_batch itself."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_batch] + list(range(16, max_batch + 1, 16))
    if max_batch not in sizes:
        sizes.append(max_batch)
    return sizes


class ModelRunner:
    def __init__(self, model: Qwen3ForCausalLM, kv_cache: PagedKVCache, *, max_num_seqs: int,
                 max_model_len: int, kernels: Kernels, use_cuda_graphs: bool) -> None:
        self.model = model
        model.prepare_rope(max_model_len)  # rotary table for every position a pass can reach
        self.kv_cache = kv_cache
        self.kv_layers = kv_cache.layers()
        self.block_size = kv_cache.block_size
        self.device = kv_cache.kv.device
        self.is_cuda = self.device.type == "cuda"
        self.kernels = kernels
        self.num_kv_heads = model.spec.num_kv_heads
        self.num_sms = torch.cuda.get_device_properties(self.device).multi_processor_count if self.is_cuda else 1
        self.max_blocks_per_seq = cdiv(max_model_len, self.block_size)
        self.graph_sizes = _graph_sizes(min(max_num_seqs, 512))
        self.graphs: dict[int, Callable[[], torch.Tensor]] = {}  # batch size -> run a static decode pass
        if use_cuda_graphs and self.is_cuda and kernels.triton:
            self.prepare_static_decode(self.graph_sizes)

    # -- one pass ------------------------------------------------------------------------------
    @torch.inference_mode()
    def execute(self, batch: PassInput, keep_logits: bool = False, allow_graph: bool = True) -> PassResult:
        wall_start = time.perf_counter()
        if batch.num_seqs == 0:  # a pass whose only decision was to preempt: nothing to run
            return PassResult([], 0.0, 0.0, False)
        # Decodes first (they share one attention call), then prefill chunks; `order` maps back.
        lengths = [len(t) for t in batch.token_ids]
        order = [i for i, n in enumerate(lengths) if n == 1] + [i for i, n in enumerate(lengths) if n != 1]
        num_decodes = sum(1 for n in lengths if n == 1)
        input_ids = np.concatenate([batch.token_ids[i] for i in order])
        positions = np.concatenate([np.arange(batch.computed_before[i], batch.computed_before[i] + lengths[i])
                                    for i in order])
        slots = np.concatenate([slot_mapping(batch.block_tables[i], batch.computed_before[i], lengths[i],
                                             self.block_size) for i in order])
        # Row of each sampling sequence's last token, in PassInput order.
        ends = np.cumsum([lengths[i] for i in order]) - 1
        row_of = {i: int(ends[k]) for k, i in enumerate(order)}
        sample_rows = [row_of[i] for i in range(batch.num_seqs) if batch.sample[i]]

        # Every input is on the device before the start event: the clock covers the pass's GPU work, not
        # the host building tensors while the GPU idles.
        graph = self._graph_for(batch.num_seqs) if allow_graph and num_decodes == batch.num_seqs else None
        if graph is not None:
            forward = self._stage_replay(graph, batch, order, input_ids, positions, slots)
        else:
            forward = partial(self.model, self._to_device(input_ids), self._to_device(positions), self.kv_layers,
                              self._metadata(batch, order, num_decodes, slots))
        rows = self._to_device(np.asarray(sample_rows, dtype=np.int64)) if sample_rows else None
        start_event = end_event = None
        if self.is_cuda:
            start_event = torch.cuda.Event(enable_timing=True)
            end_event = torch.cuda.Event(enable_timing=True)
            start_event.record()
        hidden = forward()
        logits = None
        sampled_t = None
        if rows is not None:
            logits = self.model.compute_logits(hidden[rows], self.kernels)
            sampled_t = logits.argmax(dim=-1)
        if end_event is not None:
            end_event.record()
        sampled = sampled_t.tolist() if sampled_t is not None else []  # the sync point
        if end_event is not None:
            end_event.synchronize()
            gpu_seconds = start_event.elapsed_time(end_event) / 1e3
        wall_seconds = time.perf_counter() - wall_start
        if end_event is None:
            gpu_seconds = wall_seconds
        return PassResult(sampled, gpu_seconds, wall_seconds, graph is not None,
                          logits.float() if keep_logits and logits is not None else None)

    # -- tensors -------------------------------------------------------------------------------
    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        return tensor.to(self.device, non_blocking=True) if self.is_cuda else tensor

    def _metadata(self, batch: PassInput, order: list[int], num_decodes: int, slots: np.ndarray) -> AttentionMetadata:
        meta = AttentionMetadata(slot_mapping=self._to_device(slots), num_decodes=num_decodes, kernels=self.kernels)
        if num_decodes:
            decodes = order[:num_decodes]
            width = max(len(batch.block_tables[i]) for i in decodes)
            if self.kernels.triton:
                width = cdiv(width, 16) * 16  # a table stride Triton has already specialised for
            tables = np.zeros((num_decodes, width), dtype=np.int32)  # padding points at the null block
            for row, i in enumerate(decodes):
                tables[row, :len(batch.block_tables[i])] = batch.block_tables[i]
            seq_lens = np.array([batch.computed_before[i] + 1 for i in decodes], dtype=np.int32)
            meta.decode_block_tables = self._to_device(tables)
            meta.decode_seq_lens = self._to_device(seq_lens)
            meta.decode_num_splits = self._num_splits(num_decodes)
        prefills = order[num_decodes:]
        if prefills and self.kernels.triton:
            self._triton_prefill_metadata(meta, batch, prefills, num_decodes)
        elif prefills:
            # One host-to-device copy for every chunk's table; each chunk gets a slice of it.
            all_ids = self._to_device(np.concatenate([np.asarray(batch.block_tables[i], dtype=np.int64)
                                                      for i in prefills]))
            start_row, start_id = num_decodes, 0
            for i in prefills:
                n, count = len(batch.token_ids[i]), len(batch.block_tables[i])
                meta.prefills.append(PrefillChunk(start_row, n, batch.computed_before[i],
                                                  all_ids[start_id:start_id + count]))
                start_row += n
                start_id += count
        return meta

    def _triton_prefill_metadata(self, meta: AttentionMetadata, batch: PassInput, prefills: list[int],
                                 first_row: int) -> None:
        """Chunk table, tile list and chunk info for the one-launch prefill kernel, in one host-to-device copy."""
        from kernels.paged_prefill_triton import prefill_tiles

        chunks, row = [], first_row
        for i in prefills:
            chunks.append((row, len(batch.token_ids[i]), batch.computed_before[i]))
            row += len(batch.token_ids[i])
        tiles, info = prefill_tiles(chunks, self.model.spec.num_q_heads // self.num_kv_heads)
        width = cdiv(max(len(batch.block_tables[i]) for i in prefills), 16) * 16  # few distinct strides
        tables = np.zeros((len(prefills), width), dtype=np.int32)
        for row_index, i in enumerate(prefills):
            tables[row_index, :len(batch.block_tables[i])] = batch.block_tables[i]
        # Each piece starts on a 16-byte boundary: Triton specialises on pointer alignment, and a new
        # alignment would mean a compile inside a timed pass.
        parts = [np.pad(a.ravel(), (0, -a.size % 4)) for a in (tables, tiles, info)]
        packed = self._to_device(np.concatenate(parts))
        starts = np.cumsum([0] + [p.size for p in parts])
        meta.prefill_tables, meta.prefill_tiles, meta.prefill_chunks = (
            packed[start:start + a.size].view(a.shape) for start, a in zip(starts, (tables, tiles, info)))
        meta.prefill_max_kv_len = max(n + before for _, n, before in chunks)

    def _num_splits(self, batch_size: int) -> int:
        """Split count of the graph size bucket at or above the batch: a handful of kernel variants, all
        compiled during warm-up, instead of a fresh Triton compile inside a timed pass."""
        if not self.kernels.triton:
            return 1
        from kernels.paged_decode_triton import default_num_splits

        bucket = next((s for s in self.graph_sizes if s >= batch_size), batch_size)
        return default_num_splits(bucket, self.num_kv_heads, self.num_sms)

    def warm_up(self) -> None:
        """One prefill and a decode at every bucket size, all on the null block, before anything is timed."""
        self.execute(PassInput([np.zeros(2 * self.block_size, dtype=np.int64)], [0], [[0, 0]], [True]))
        for size in self.graph_sizes:
            self.execute(PassInput([np.zeros(1, dtype=np.int64)] * size, [0] * size, [[0]] * size, [True] * size),
                         allow_graph=False)
        # Replay each captured graph once (its static buffers point at the null block): a graph's first
        # launch is slower, and it would otherwise land in a timed pass.
        for run in self.graphs.values():
            run()
        if self.is_cuda:
            torch.cuda.synchronize()

    # -- CUDA graphs for decode-only passes ----------------------------------------------------
    def _graph_for(self, batch_size: int) -> int | None:
        return next((size for size in sorted(self.graphs) if size >= batch_size), None)

    @torch.inference_mode()
    def prepare_static_decode(self, sizes: list[int], capture: bool = True) -> None:
        """Static input buffers at the largest size and, per size, a way to run a decode pass on them.

        capture=True records a CUDA graph per size (largest first, one memory pool). capture=False runs
        the same buffers eagerly: how a CPU test checks the padding and buffer logic the graphs replay.
        """
        dev = self.device
        max_batch = sizes[-1]
        self.g_input_ids = torch.zeros(max_batch, dtype=torch.int64, device=dev)
        self.g_positions = torch.zeros(max_batch, dtype=torch.int64, device=dev)
        self.g_slots = torch.zeros(max_batch, dtype=torch.int64, device=dev)  # slot 0: the null block
        width = cdiv(self.max_blocks_per_seq, 16) * 16  # same stride specialisation as eager tables
        self.g_tables = torch.zeros((max_batch, width), dtype=torch.int32, device=dev)
        self.g_seq_lens = torch.ones(max_batch, dtype=torch.int32, device=dev)
        pool = None
        for size in reversed(sizes):
            meta = AttentionMetadata(slot_mapping=self.g_slots[:size], num_decodes=size,
                                     decode_block_tables=self.g_tables[:size], decode_seq_lens=self.g_seq_lens[:size],
                                     decode_num_splits=self._num_splits(size), kernels=self.kernels)
            args = (self.g_input_ids[:size], self.g_positions[:size], self.kv_layers, meta)
            if not capture:
                self.graphs[size] = partial(self.model, *args)
                continue
            # Warm up outside capture (Triton JIT, cuBLAS workspaces) on a side stream, as PyTorch advises.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.model(*args)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: a CUDA call from another thread (a web session asking what GPU this is) must
            # not invalidate a capture running in the live-run thread.
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                out = self.model(*args)
            pool = graph.pool() if pool is None else pool
            self.graphs[size] = partial(_replay_graph, graph, out)
        if capture:
            torch.cuda.synchronize()

    def _stage_replay(self, size: int, batch: PassInput, order: list[int], input_ids: np.ndarray,
                      positions: np.ndarray, slots: np.ndarray) -> Callable[[], torch.Tensor]:
        """Copy the pass's inputs into the static buffers; returns the replay (hidden states of the real rows)."""
        b = batch.num_seqs
        width = max(len(batch.block_tables[i]) for i in order)
        tables = np.zeros((b, width), dtype=np.int32)
        for row, i in enumerate(order):
            tables[row, :len(batch.block_tables[i])] = batch.block_tables[i]
        self.g_input_ids[:b].copy_(self._to_device(input_ids))
        self.g_positions[:b].copy_(self._to_device(positions))
        self.g_slots[:b].copy_(self._to_device(slots))
        self.g_seq_lens[:b].copy_(self._to_device((positions + 1).astype(np.int32)))
        self.g_tables[:b, :width].copy_(self._to_device(tables))
        # Padding rows: write into the null block, read one key from it; their outputs are dropped.
        self.g_slots[b:size].zero_()
        self.g_seq_lens[b:size].fill_(1)
        self.g_tables[b:size, 0].zero_()
        return lambda: self.graphs[size]()[:b]


def _replay_graph(graph: "torch.cuda.CUDAGraph", out: torch.Tensor) -> torch.Tensor:
    graph.replay()
    return out
