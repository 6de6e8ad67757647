"""hpcopt MPI agent (skeleton: the agent itself lands with the MPI agent issue)."""

__version__ = "0.1.0"
