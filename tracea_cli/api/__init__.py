"""The Python API's home (the public names are re-exported by the `tracea` package): Graph (graph.py), fusion
(fusion.py), kernel choice (choose.py), Context (context.py), Plan (plan.py, render.py), running a plan (run.py,
arrays.py), torch: Graph.from_fx (fx.py) and patch_conv2d (torch_patch.py)."""
