"""A fold's analysis document (``hpcopt.core.analysis_doc``) as an agent stores it, for
the tests that store, serve and draw one without running the agent."""

from __future__ import annotations

from typing import Any


def analysis_document(top: float = 30.0) -> dict[str, Any]:
    """Every part filled: λ_max ``top`` (also the trace's last epoch), a density whose
    bulk is at 0, a 3 x 3 surface with its minimum 0.5 at the centre, a trajectory of 3
    epochs ending at the final weights, and a line with one overflowed (null) loss."""
    return {
        "parameters": 97,
        "samples": 64,
        "hessian": {
            "eigenvalues": [top, 3.0],
            "residuals": [1e-9, 1e-6],
            "steps": 20,
            "density": {
                "grid": [0.0, 10.0, 20.0, 30.0],
                "density": [0.9, 0.05, 0.01, 0.04],
                "nodes": [[0.0, top]],
                "weights": [[0.9, 0.1]],
                "sigma": 1.0,
            },
            "trace": [5.0, 20.0, top],
        },
        "landscape": {
            "directions": "random",
            "line": {"offsets": [-1.0, 0.0, 1.0], "loss": [2.0, 0.5, None]},
            "surface": {"xs": [-1.0, 0.0, 1.0], "ys": [-1.0, 0.0, 1.0], "loss": [[3, 2, 3], [2, 0.5, 2], [3, 2, 3]]},
            "trajectory": {"xs": [0.8, 0.3, 0.0], "ys": [-0.4, -0.1, 0.0], "off_plane": [0.9, 0.7, 0.0]},
        },
        "epochs": [1, 2, 3],
        "cost": {"hvps": 110, "passes": 12, "samples": 64, "seconds": 0.4, "share_planned": 0.03},
    }
