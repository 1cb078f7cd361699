"""lowrank-mlp: y = act(x·U·V + bias) (+ residual), a low-rank (factorised, LoRA-style) linear layer in one pass.
ops/lowrank_mlp/op.py is what the registry serves."""
