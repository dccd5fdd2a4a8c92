from .op import VTraceOutput, vtrace

__all__ = ["vtrace", "VTraceOutput"]
