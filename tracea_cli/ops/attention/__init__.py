"""The attention op: out = softmax(Q·Kᵀ·scale + mask)·V, grouped-query heads, causal (bottom-right) or none."""
