"""Framework adapters: rlscan.adapters.sb3, rlscan.adapters.torchrl, rlscan.adapters.cleanrl, rlscan.adapters.rsl_rl,
rlscan.adapters.verl, rlscan.adapters.rllib."""
