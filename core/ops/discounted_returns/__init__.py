from .op import discounted_returns

__all__ = ["discounted_returns"]
