from .op import td_lambda

__all__ = ["td_lambda"]
