from .op import eligibility_traces

__all__ = ["eligibility_traces"]
