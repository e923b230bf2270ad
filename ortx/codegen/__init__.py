"""Code generation: claimed segments rendered as C (render.py) and compiled with a content-hash cache (jit.py)."""
