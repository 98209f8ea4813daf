"""SpecViz web app: one prompt, four lookahead policies side by side.

Hugging Face Spaces runs this file. The page is built in specviz.ui.page, its events are in
specviz.ui.events, and the model work in specviz.decoding.

    python app.py [--host HOST] [--port PORT] [--share]
"""

try:  # On a ZeroGPU Space `spaces` must be imported before torch (specviz/pair/gpu.py); elsewhere a no-op.
    import spaces  # noqa: F401
except ImportError:
    pass

from specviz.ui.page import build_demo, launch

demo = build_demo()

if __name__ == "__main__":
    launch(demo)
