"""The ops: one folder each, with the public function (``op.py``), its Triton coefficients
(``kernel.py``), its compiled CPU loop (``cpu.py``) and its float64 reference
(``reference.py``)."""
