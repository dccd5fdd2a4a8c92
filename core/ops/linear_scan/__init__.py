from .op import linear_scan

__all__ = ["linear_scan"]
