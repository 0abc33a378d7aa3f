"""Whole evaluation episodes played with a policy on a separate batched env (``episodes``), the compiled evaluation
step (``fused``) and the frames of evaluation videos (``video``). The ``Evaluation`` callback schedules them."""
