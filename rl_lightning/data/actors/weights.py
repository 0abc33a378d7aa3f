"""``SharedWeights``: the learner's acting weights in shared memory, published with a version, read without a lock."""

from __future__ import annotations

from collections.abc import Mapping

import torch

_WRITING = -1


class SharedWeights:
    """Two shared-memory copies of a state dict (a double buffer), each stamped with its publish number: a seqlock.

    The learner (the only writer) fills the copy readers are not pointed at, stamps it with the next publish number
    and its ``policy_version`` and then points readers at it; an actor copies the newest copy into its own module
    and re-reads the stamp afterwards, so a copy overwritten while it was being read (two publishes during one read)
    is detected and read again. Nothing is pickled per publish: the buffers travel to the actors once, as
    shared-memory handles, when they start.

    The version is what rollouts are tagged with and what the lag check compares; the publish number is what a
    reader waits for. They differ when a publish keeps the version but not the tensors (buffers moved without a
    gradient step, e.g. SPO's observation normaliser updated by ``process_rollout`` during ``learning_starts``): the
    actors load those too, and their rollouts keep the version's tag. Each reader keeps the last publish number it
    read in its own copy of this object (an actor receives one, pickled, when it starts).

    Args:
        state_dict: the acting module's ``state_dict()``; names, shapes and dtypes are fixed from now on.
    """

    def __init__(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        self.names = list(state_dict)
        self.buffers = [
            [tensor.detach().to("cpu", copy=True).share_memory_() for tensor in state_dict.values()] for _ in range(2)
        ]
        # [stamp of copy 0, stamp of copy 1, index of the copy to read, version of copy 0, version of copy 1]; a stamp
        # is the copy's publish number (1, 2, ... in publish order), or _WRITING.
        self.control = torch.tensor([_WRITING, _WRITING, 0, -1, -1], dtype=torch.int64).share_memory_()
        self._published = 0  # the writer's publish count
        self._read = 0  # this reader's last publish number read

    @property
    def version(self) -> int:
        """The version readers get now (``-1`` before the first publish)."""
        return int(self.control[3 + int(self.control[2])])

    def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> bool:
        """Make ``state_dict`` (same names as at construction) the weights of ``version`` for every reader.

        Returns whether readers get something new: ``False`` when ``version`` is the readers' already and every
        tensor equals theirs (nothing changes for them then)."""
        current = int(self.control[2])
        target = 1 - current
        self.control[target] = _WRITING
        torch._foreach_copy_(self.buffers[target], [state_dict[name].detach() for name in self.names])
        if version == self.version and all(map(torch.equal, self.buffers[target], self.buffers[current])):
            return False  # readers stay on ``current``; ``target`` is the next publish's to fill
        self._published += 1
        self.control[3 + target] = version
        self.control[target] = self._published
        self.control[2] = target
        return True

    def read_into(self, state_dict: Mapping[str, torch.Tensor], newer_than: int) -> int | None:
        """Copy the newest weights into ``state_dict``'s tensors (a module's own ``state_dict()``: it aliases the
        parameters) if their version is above ``newer_than`` or they were published since this reader's last read
        (same version, other tensors); returns their version, or ``None`` if nothing is new."""
        destination = [state_dict[name] for name in self.names]
        while True:
            index = int(self.control[2])
            stamp = int(self.control[index])
            version = int(self.control[3 + index])
            if stamp == _WRITING or (version <= newer_than and stamp <= self._read):
                return None
            torch._foreach_copy_(destination, self.buffers[index])
            if int(self.control[index]) == stamp:
                self._read = stamp
                return version
