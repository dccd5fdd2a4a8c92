from .op import episodic_cumsum

__all__ = ["episodic_cumsum"]
