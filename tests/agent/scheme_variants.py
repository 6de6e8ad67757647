"""Knob settings that change how a scheme exchanges (not only how fast): each runs the
whole scheme contract in ``scheme_conformance.py`` as a scheme of its own would, under
its label. No mpi4py here, so pytest can list them."""

from __future__ import annotations

from typing import Any

#: label -> (scheme, knobs).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # PowerSGD from the second step, so both the plain and the compressed exchange (and
    # the error feedback across a mid-epoch stop) are in every check.
    "allreduce+powersgd": ("allreduce", {"compression": "powersgd", "powersgd_rank": 2, "powersgd_start": 2}),
    # The 16-bit hook: gradients exchanged in bf16 whatever the training precision.
    "allreduce+bf16": ("allreduce", {"compression": "bf16"}),
    # DASO's non-blocking global syncs as PowerSGD factors of the weights' moves (on
    # top of the conformance layout: 2 "nodes" of 2, no warm-up, so the first epoch
    # already sends compressed). At 2 ranks one node: plain DASO.
    # patience 1000 keeps the skips from shrinking to blocking syncs: every check sees
    # compressed exchanges. (A stop ends in a blocking average, which resets the move's
    # reference and error; test_daso_powersgd.py checks the factors a checkpoint keeps.)
    "daso+powersgd": ("daso", {"global_compression": "powersgd", "global_powersgd_rank": 8, "patience": 1000}),
}
