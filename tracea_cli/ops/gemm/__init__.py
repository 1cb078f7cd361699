"""GEMM: C = epilogue(A·B), layouts nn (B is K×N) and nt (B is N×K, as torch.nn.Linear stores weights)."""

from tracea_cli.ops.gemm.problem import EPILOGUES, LAYOUTS, GemmInputs, GemmProblem, make_inputs, reference

__all__ = ["EPILOGUES", "LAYOUTS", "GemmInputs", "GemmProblem", "make_inputs", "reference"]
