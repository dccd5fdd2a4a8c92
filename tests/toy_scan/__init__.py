"""A test-only op, registered by tests/test_registry.py: an exponentially discounted sum that
restarts after each episode end::

    S_0 = x_0 + initial
    S_t = x_t + γ (1 − dones_{t−1}) S_{t−1}

Its folder holds what an op of the package's has: the function and its OpSpec (``op.py``), its
Triton coefficients (``kernel.py``), its CPU loop (``cpu.py``) and its float64 reference
(``reference.py``)."""
