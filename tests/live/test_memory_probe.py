"""The live run's memory probe reads what vLLM's start-up profile reads (a fake CUDA stands in for a GPU)."""
from types import SimpleNamespace

from engine.live.memory_probe import MemoryProbe

GIB = 2**30


class FakeCuda:
    """cudaMemGetInfo and torch's allocator counters, moved by the test as a run would move them."""

    def __init__(self):
        self.total, self.used, self.reserved, self.allocated, self.peak = 80 * GIB, GIB // 2, 0, 0, 0

    def mem_get_info(self, _device):
        return self.total - self.used, self.total

    def memory_reserved(self, _device):
        return self.reserved

    def memory_allocated(self, _device):
        return self.allocated

    def max_memory_allocated(self, _device):
        return self.peak

    def reset_peak_memory_stats(self, _device):
        self.peak = self.allocated

    def synchronize(self, _device):
        pass


def test_the_probe_measures_total_weights_activation_peak_and_non_torch_growth():
    cuda = FakeCuda()
    torch = SimpleNamespace(cuda=cuda)
    device = SimpleNamespace(type="cuda")
    probe = MemoryProbe.before_model(torch, device)  # 0.5 GiB of CUDA context: vLLM's baseline, not counted
    weights, pool = 15 * GIB, 20 * GIB
    cuda.allocated = cuda.reserved = weights + pool
    cuda.used += weights + pool
    probe.serving_starts()
    cuda.peak = cuda.allocated + GIB  # the largest pass's activations
    cuda.used += GIB // 4  # NCCL / workspaces outside torch's allocator
    model = SimpleNamespace(parameters=lambda: [SimpleNamespace(numel=lambda: weights // 2, element_size=lambda: 2)])
    got = probe.after_serving(model, "Qwen3-8B", "NVIDIA H100 80GB HBM3", 8192)
    assert got == {"model": "Qwen3-8B", "device": "NVIDIA H100 80GB HBM3", "total_memory": 80 * GIB,
                   "weights_memory": weights, "activation_peak": GIB, "max_num_batched_tokens": 8192,
                   "non_torch_memory": GIB // 4}


def test_nothing_is_measured_on_a_cpu():
    assert MemoryProbe.before_model(SimpleNamespace(), SimpleNamespace(type="cpu")) is None
