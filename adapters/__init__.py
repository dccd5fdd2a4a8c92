"""Framework adapters: rlscan.adapters.sb3, rlscan.adapters.torchrl, rlscan.adapters.cleanrl, rlscan.adapters.rllib."""
