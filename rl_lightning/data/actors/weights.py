"""``SharedWeights``: the learner's acting weights in shared memory, published with a version, read without a lock."""

from __future__ import annotations

from collections.abc import Mapping

import torch

_WRITING = -1


class SharedWeights:
    """Two shared-memory copies of a state dict (a double buffer) with a version stamp each: a seqlock.

    The learner (the only writer) fills the copy readers are not pointed at, stamps it with the version and then
    points readers at it; an actor copies the newest copy into its own module and re-reads the stamp afterwards, so a
    copy overwritten while it was being read (two publishes during one read) is detected and read again. Nothing is
    pickled per publish: the buffers travel to the actors once, as shared-memory handles, when they start.

    Args:
        state_dict: the acting module's ``state_dict()``; names, shapes and dtypes are fixed from now on.
    """

    def __init__(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        self.names = list(state_dict)
        self.buffers = [
            [tensor.detach().to("cpu", copy=True).share_memory_() for tensor in state_dict.values()] for _ in range(2)
        ]
        # [stamp of copy 0, stamp of copy 1, index of the copy to read]; a stamp is a version, or _WRITING.
        self.control = torch.tensor([_WRITING, _WRITING, 0], dtype=torch.int64).share_memory_()

    @property
    def version(self) -> int:
        """The version readers get now (``-1`` before the first publish)."""
        return int(self.control[int(self.control[2])])

    def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Make ``state_dict`` (same names as at construction) the weights of ``version`` for every reader."""
        target = 1 - int(self.control[2])
        self.control[target] = _WRITING
        torch._foreach_copy_(self.buffers[target], [state_dict[name].detach() for name in self.names])
        self.control[target] = version
        self.control[2] = target

    def read_into(self, state_dict: Mapping[str, torch.Tensor], newer_than: int) -> int | None:
        """Copy the newest weights into ``state_dict``'s tensors (a module's own ``state_dict()``: it aliases the
        parameters) if their version is above ``newer_than``; returns that version, or ``None`` if nothing newer."""
        destination = [state_dict[name] for name in self.names]
        while True:
            index = int(self.control[2])
            stamp = int(self.control[index])
            if stamp == _WRITING or stamp <= newer_than:
                return None
            torch._foreach_copy_(destination, self.buffers[index])
            if int(self.control[index]) == stamp:
                return stamp
