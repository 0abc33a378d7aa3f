"""Lightning notices that rl_lightning's design triggers on every run and that no user can act on.

Each entry drops one exact message, emitted from one Lightning module, and says why the condition it reports
is intended here. Every other warning Lightning or torch raises still reaches the user (and fails
``pytest -W error``).
"""

from __future__ import annotations

import logging
import warnings

# (message regex, emitting module, category, why the condition is intended)
_NOTICES: tuple[tuple[str, str, type[Warning], str], ...] = (
    (
        r"You are using the `dataloader_iter` step flavor",
        r"lightning\.pytorch\.trainer\.configuration_validator",
        UserWarning,
        "training_step pulls its own rollout so the policy that collects is the one updated (policy lag 0)",
    ),
    (
        r"Found `dataloader_iter` argument in the `training_step`",
        r"lightning\.pytorch\.loops\.utilities",
        UserWarning,
        "same design choice as above, reported a second time by the training loop",
    ),
    (
        r"Total length of `list` across ranks is zero",
        r"lightning\.pytorch\.utilities\.data",
        UserWarning,
        "during fit the datamodules return no val batches on purpose: the Evaluation callback evaluates on the "
        "env-step clock",
    ),
    (
        r"Skipping 'env_spec' parameter because it is not possible to safely dump to YAML",
        r"lightning\.pytorch\.core\.saving",
        UserWarning,
        "env_spec is derived from data.env (linked by the CLI); the run's config.yaml rebuilds it",
    ),
    (
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        r"lightning\.pytorch\.utilities\._pytree",
        FutureWarning,
        "Lightning 2.6 still calls a pytree API that torch 2.13 deprecates; nothing in this project calls it",
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
    for message, module, category, _why in _NOTICES:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    logger = logging.getLogger(_ADVERT_LOGGER)
    if _DROP_ADVERTS not in logger.filters:
        logger.addFilter(_DROP_ADVERTS)
