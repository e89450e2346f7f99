"""The block mirror: physical ids for the scheduler's block counts, never the null block, never shared."""
import pytest

from engine.live.block_manager import BlockManager, BlockMirrorError
from engine.scheduler import Scheduler
from kernels import scheduler_core as core
from tests.live.helpers import tight_config


def test_mirror_tracks_the_scheduler_through_a_preempting_run():
    cfg = tight_config(num_gpu_blocks_override=12)
    sched = Scheduler(cfg)
    blocks = BlockManager(cfg.num_gpu_blocks)
    preempted = 0
    while not sched.finished:
        plan = sched.schedule()
        blocks.after_schedule(plan, sched.req, sched.state)
        preempted += len(plan.preempted)
        owned = [b for table in blocks.tables.values() for b in table]
        assert 0 not in owned, "block 0 is the null block"
        assert len(owned) == len(set(owned)), "a physical block belongs to one request"
        for r in plan.request_ids:
            assert len(blocks.table(int(r))) == sched.req[r, core.HELD]
        blocks.after_complete(sched.complete(plan), sched.state)
    assert preempted > 0
    assert blocks.num_free == cfg.usable_blocks and not blocks.tables


def test_freed_blocks_are_reused_last_so_tables_scatter():
    blocks = BlockManager(6)
    blocks.grow(0, 2)
    blocks.grow(1, 1)
    blocks.free(0)
    blocks.grow(2, 3)
    assert blocks.table(1) == [3]
    assert blocks.table(2) == [4, 5, 1]


def test_mirror_refuses_to_hand_out_more_than_it_has():
    blocks = BlockManager(3)
    with pytest.raises(BlockMirrorError):
        blocks.grow(0, 3)
