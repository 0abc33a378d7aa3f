"""Lightning notices that rl_lightning's design triggers on every run and that no user can act on.

Each entry drops one exact message (matched by its text and category, not by the emitting module, so that a
warning re-emitted by a test's ``pytest.warns`` is still recognised) and says where it comes from and why the
condition it reports is intended here. Every other warning Lightning or torch raises still reaches the user
(and fails ``pytest -W error``).
"""

from __future__ import annotations

import logging
import warnings

# (message regex, category, where it comes from and why the condition is intended)
_NOTICES: tuple[tuple[str, type[Warning], str], ...] = (
    (
        r"You are using the `dataloader_iter` step flavor",
        UserWarning,
        "Lightning's configuration validator: training_step pulls its own rollout so that the policy that "
        "collects is the one updated (policy lag 0)",
    ),
    (
        r"Found `dataloader_iter` argument in the `training_step`",
        UserWarning,
        "Lightning's training loop: the same design choice, reported a second time",
    ),
    (
        r"Total length of `list` across ranks is zero",
        UserWarning,
        "Lightning's dataloader checks: during fit the datamodules return no val batches on purpose; the "
        "Evaluation callback evaluates on the env-step clock",
    ),
    (
        r"Skipping 'env_spec' parameter because it is not possible to safely dump to YAML",
        UserWarning,
        "Lightning's hparams.yaml writer: env_spec is derived from data.env (linked by the CLI), and the run's "
        "config.yaml rebuilds it",
    ),
    (
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        FutureWarning,
        "torch, via Lightning's pytree helpers: Lightning 2.6 calls a pytree API that torch 2.13 deprecates; "
        "nothing in this project calls it",
    ),
    (
        r"\s*Only use the public API as described in https://jsonargparse",
        DeprecationWarning,
        "torch.compile (PPO's compile_update): inductor's code cache reads every attribute of the modules it hashes, "
        "jsonargparse's private ones included, and jsonargparse warns about each read",
    ),
    (
        r"`torch.jit.script_method` is deprecated",
        DeprecationWarning,
        "torch.compile (PPO's compile_update): a module torch imports while compiling still decorates with it",
    ),
    (
        r"Precision bf16-mixed is not supported by the model summary",
        UserWarning,
        "Lightning's model summary under trainer.precision bf16-mixed (pixel PPO's speed option): mixed precision "
        "keeps the weights float32, so the 32-bit size it falls back to is the true one",
    ),
    (
        r"\s*By default only one JsonargparseDeprecationWarning per type is shown",
        DeprecationWarning,
        "jsonargparse's footnote to the first of those reads (it says how to see or hide the others)",
    ),
)

#: Prefix of Lightning's advertisements (cloud logging / model registry), logged as INFO on every fit.
_ADVERT_PREFIX = "💡 Tip: For seamless cloud"
_ADVERT_LOGGER = "lightning.pytorch.utilities.rank_zero"


class _DropAdverts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_ADVERT_PREFIX)


_DROP_ADVERTS = _DropAdverts()


def silence_lightning_notices() -> None:
    """Install the filters above (idempotent: ``warnings`` replaces an identical filter, ``logging`` keeps one).

    Called when an ``RLModule`` is built, i.e. at run time, so the filters sit in front of any installed
    earlier (a test runner's per-test filters included) and still hide only these exact messages.
    """
    for message, category, _why in _NOTICES:
        warnings.filterwarnings("ignore", message=message, category=category)
    logger = logging.getLogger(_ADVERT_LOGGER)
    if _DROP_ADVERTS not in logger.filters:
        logger.addFilter(_DROP_ADVERTS)
