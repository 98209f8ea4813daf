"""SpecViz: see how speculative decoding spends its work.

The data flow (DESIGN.md): models.load_pair -> engine.target_only (reference) -> oracle ->
engine.generate per policy -> trace.Comparison -> render / plots / export.
"""

from .errors import SpecVizError

__all__ = ["SpecVizError"]
