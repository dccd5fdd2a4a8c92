from .op import RetraceOutput, retrace, retrace_from_q

__all__ = ["retrace", "retrace_from_q", "RetraceOutput"]
