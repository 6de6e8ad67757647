"""Curvature and landscape of a trained fold: the top Hessian eigenvalues (Lanczos), the
spectral density (stochastic Lanczos quadrature), and loss surfaces with the training
trajectory on them.

- ``loss.py``: the fold's training loss over fixed samples and its Hessian-vector
  products, summed over the fold group's ranks;
- ``lanczos.py``: Lanczos with full reorthogonalisation, top-k and SLQ;
- ``landscape.py``: filter-normalised or eigen-directions, 1-D and 2-D surfaces, the
  trajectory projected on the plane;
- ``analysis.py``: what a campaign asks for (``analysis: {hessian, landscape}``), its
  cost fixed before it starts, and the result as small arrays with what it cost.

Everything here is plain numbers in and out: results are lists of floats, never a
pickle. What these views mean, and what they do not, is in the guide
(``docs/guides/curvature.md``).
"""
