"""The search's "narrow the second stage" row: which ep and cp sizes, ZeRO stages, expert token exchanges,
recompute-module lists, optimizer offload and overlap the search may try — the studio's face of
``tilewright search --ep … --no-overlap``.

Every field left at its default (empty list, all boxes ticked) keeps that part of the default space; the texts
are parsed by the engine's ``narrowing`` (the CLI's parser), so both refuse the same inputs with one message.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QCheckBox, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QWidget
from tilewright.engine.search.parallel.candidate import DISPATCHERS
from tilewright.engine.search.parallel.extended import ZERO_CHOICES
from tilewright.engine.search.parallel.narrowing import narrowing

# How the messages name each list (the CLI names its flags instead).
NAMES = {"ep": "ep sizes", "cp": "cp sizes", "zero": "ZeRO", "ep_dispatcher": "token exchange",
         "recompute_modules": "modules re-run"}
TIPS = {
    "ep": "expert-parallel sizes the search tries, comma-separated (e.g. 1,2,4,8); empty: every divisor of "
          "the experts for a mixture-of-experts model, 1 otherwise (--ep)",
    "cp": "context-parallel sizes the search tries, comma-separated (e.g. 1,2,4); empty: 1, 2, 4, 8 from 8k-token "
          "sequences, 1 below (--cp)",
    "zero": "ZeRO stages the search tries: 0 none, 1 optimizer states, 2 + gradients, 3 + weights sharded over "
            "the data-parallel replicas; fsdp: PyTorch full sharding (--zero)",
    "ep_dispatcher": "how routed tokens reach their experts: alltoall one flat all-to-all, deepep node by node "
                     "(DeepEP); mixture-of-experts models only (--ep-dispatcher)",
    "recompute_modules": "selective-recomputation module lists the search tries where full recomputation or "
                         "memory binds, ';' between lists (e.g. core_attn,mlp;core_attn,layernorm,moe_act), or "
                         "none; empty: Megatron-Core's recipes the model has (--recompute-modules)",
    "offload": "let the search put the optimizer in host memory when the node has some (untick: --no-offload)",
    "overlap": "let the search overlap communication with compute: gradient reduction and the expert all-to-all "
               "(untick: --no-overlap)",
}


def _boxes(choices: tuple[str, ...], tip: str) -> list[QCheckBox]:
    boxes = []
    for choice in choices:
        box = QCheckBox(choice, checked=True)
        box.setToolTip(tip)
        boxes.append(box)
    return boxes


def _chosen(boxes: list[QCheckBox]) -> str | None:
    """None (the default space) with every box ticked, else the ticked ones as the engine's list text."""
    ticked = [b.text() for b in boxes if b.isChecked()]
    return None if len(ticked) == len(boxes) else ",".join(ticked)


class NarrowingRow(QGroupBox):
    def __init__(self, parent: QWidget | None = None):
        super().__init__("Narrow the second stage (empty or all ticked: the default space)", parent)
        self.ep = QLineEdit(placeholderText="default")
        self.cp = QLineEdit(placeholderText="default")
        self.modules = QLineEdit(placeholderText="default")
        for edit, key in ((self.ep, "ep"), (self.cp, "cp"), (self.modules, "recompute_modules")):
            edit.setToolTip(TIPS[key])
            edit.setMaximumWidth(90)
        self.zero = _boxes(ZERO_CHOICES, TIPS["zero"])
        self.dispatcher = _boxes(tuple(DISPATCHERS), TIPS["ep_dispatcher"])
        self.offload = QCheckBox("offload", checked=True)
        self.offload.setToolTip(TIPS["offload"])
        self.overlap = QCheckBox("overlap", checked=True)
        self.overlap.setToolTip(TIPS["overlap"])
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 2, 6, 2)
        for label, widgets, key in (("ep", [self.ep], "ep"), ("cp", [self.cp], "cp"), ("ZeRO", self.zero, "zero"),
                                    ("exchange", self.dispatcher, "ep_dispatcher"),
                                    ("re-run", [self.modules], "recompute_modules")):
            caption = QLabel(label)
            caption.setToolTip(TIPS[key])
            row.addWidget(caption)
            for w in widgets:
                row.addWidget(w)
            row.addSpacing(10)
        row.addWidget(self.offload)
        row.addWidget(self.overlap)
        row.addStretch(1)

    def narrow(self) -> dict[str, Any]:
        """The ``narrow`` keywords of ``search``; raises ``InputError`` naming the field whose text is bad."""
        return narrowing(
            "",
            ep=self.ep.text().strip() or None,
            cp=self.cp.text().strip() or None,
            zero=_chosen(self.zero),
            ep_dispatcher=_chosen(self.dispatcher),
            recompute_modules=self.modules.text().strip() or None,
            offload=self.offload.isChecked(),
            overlap=self.overlap.isChecked(),
            names=NAMES,
        )
