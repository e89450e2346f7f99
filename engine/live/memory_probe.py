"""What a live run measures of the GPU's memory: the terms vLLM's start-up profile measures (engine/memory.py),
for this model on this GPU, so that a calibration can replace the estimates with them.

vLLM's own measurement (Worker.determine_available_memory with memory_profiling, vllm/v1/worker/gpu_worker.py,
v0.11) reads the board's total from cudaMemGetInfo, the weights as loaded, the torch allocation peak of a dummy
pass at --max-num-batched-tokens, and the growth of memory outside PyTorch's allocator. A live run has no dummy
pass: it serves the workload, whose largest passes are full token budgets (a queue of prompts); its torch peak
over what is allocated when serving starts (weights, pool, graphs) is the activation peak of its largest pass,
recorded with that pass's tokens so engine/memory.py can scale it to another budget. torch is passed in (the
module imports without it); on a CPU there is nothing to measure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class MemoryProbe:
    torch: Any
    device: Any
    total_memory: int
    non_torch_before: int  # outside PyTorch before the model existed (the CUDA context: vLLM's baseline too)
    allocated_at_start: int = 0

    @classmethod
    def before_model(cls, torch, device) -> "MemoryProbe | None":
        """Snapshot before the model is built; None off CUDA."""
        if getattr(device, "type", None) != "cuda":
            return None
        free, total = torch.cuda.mem_get_info(device)
        return cls(torch, device, int(total), int(total - free - torch.cuda.memory_reserved(device)))

    def serving_starts(self) -> None:
        """The model, its pool and its graphs exist: from here the peak is the passes' activations."""
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        self.allocated_at_start = int(cuda.memory_allocated(self.device))
        cuda.reset_peak_memory_stats(self.device)

    def after_serving(self, model, model_name: str, device_name: str, largest_pass_tokens: int) -> dict[str, Any]:
        """The measured terms, in bytes, as a GPU preset's extra["memory"] carries them."""
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        free, total = cuda.mem_get_info(self.device)
        non_torch = int(total - free - cuda.memory_reserved(self.device)) - self.non_torch_before
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        return {
            "model": model_name, "device": device_name, "total_memory": int(total), "weights_memory": int(weights),
            "activation_peak": int(cuda.max_memory_allocated(self.device)) - self.allocated_at_start,
            "max_num_batched_tokens": int(largest_pass_tokens), "non_torch_memory": max(non_torch, 0),
        }
