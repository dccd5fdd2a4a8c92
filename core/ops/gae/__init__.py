from .op import GAEOutput, gae

__all__ = ["gae", "GAEOutput"]
