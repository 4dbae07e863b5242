"""The mapping option of how sharded weights are gathered and their gradients handed back: whose FSDP runs the
ZeRO-3 gathers. One field, set at once as one undo step by ``MappingOptions`` (``SetMappingOption``):

- PyTorch FSDP2's copies (``mapping.fsdp_copies``): each layer's gathered weights copied out of the all-gather
  buffer and its gradients copied into the reduce-scatter buffer, both on the compute stream (``plan.sharding``);
  off, the layers view flat buffers (Megatron-FSDP). Needs weights gathered per layer: FSDP or ZeRO stage 3,
  training.

FSDP and the ZeRO stage themselves are degrees of the Mapping box above (they change the memory every stage holds
and wait for Auto-map); this option only says which implementation runs them, so it applies at once and sits
first in the options group, right under them.
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.ir.project import Mode, Project
from tilewright.studio.ui.framework_options import APPLIES, TRAINING_ONLY

SHARDING_FIELDS = ("fsdp_copies",)
FSDP_COPIES_TEXT = "FSDP2 copies around each gather"

SHARDING_TIPS = {
    "fsdp_copies": "PyTorch FSDP2 (fully_shard): after each layer's weight all-gather, the gathered weights are "
                   "copied out of the flat buffer into the parameters (split_with_sizes_copy), and before each "
                   "gradient reduce-scatter the gradients are copied into the reduce buffer in the reduce dtype "
                   "(foreach_reduce_scatter_copy_in); both run on the compute stream, so every forward, backward "
                   "and recomputed forward of a layer waits for a memory-bound copy of its weights (pytorch "
                   "torch/distributed/_composable/fsdp/_fsdp_collectives.py; plan.sharding). Off: the layers view "
                   f"the gathered buffer, as Megatron-FSDP and ZeRO over flat buffers do (no copies). {APPLIES}",
}
FSDP_COPIES_OFF_TIP = ("needs weights gathered layer by layer: tick FSDP (or choose ZeRO 3) above and press Auto-map; "
                       "below ZeRO-3 every rank holds its weights and nothing is gathered or copied")


def sharding_reason(field: str, project: Project) -> str | None:
    """Why the option ``field`` cannot matter for ``project`` as applied, or None when it can: the copies exist only
    where the engine gathers weights per layer (``plan.sharding.stage_shard_comm``: ZeRO ≥ 3, training)."""
    if field == "fsdp_copies":
        if project.run.mode is not Mode.train:
            return TRAINING_ONLY
        return None if project.mapping.zero >= 3 else FSDP_COPIES_OFF_TIP
    raise KeyError(field)


def sharding_undo_text(field: str, value: Any) -> str:
    """The Edit menu's name of the gesture ("Copy FSDP2's gathers and gradients")."""
    if field == "fsdp_copies":
        return "Copy weights and gradients as FSDP2 does" if value else "Gather into flat buffers (no FSDP2 copies)"
    raise KeyError(field)
