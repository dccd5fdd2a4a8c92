from .op import RetraceOutput, retrace

__all__ = ["retrace", "RetraceOutput"]
