"""DreamerV3's world model: encoder, RSSM, decoder, reward and continue heads, and its loss (dreamer.md §2–§3)."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn
from torch.nn import functional as F

from rl_lightning import keys
from rl_lightning.algos.dreamer.obs_keys import StackImages, split_keys
from rl_lightning.envs.base import EnvSpec
from rl_lightning.networks import distributions as D
from rl_lightning.networks.dreamer_nets import CNNDecoder, CNNEncoder, DreamerSize, Head, MLPDecoder, MLPEncoder
from rl_lightning.networks.encoders import ObsEncoder
from rl_lightning.networks.rssm import RSSM
from rl_lightning.objectives import dreamer as L


class WorldModel(nn.Module):
    """Learns a latent model of the env from replayed sequences.

    Vector observations go through an MLP encoder with symlog inputs and are reconstructed in symlog space;
    images (``[C, H, W]``, uint8 0–255) through a CNN with a sigmoid decoder. The keys of a ``Dict`` observation
    are split as the official code does (``obs_keys.py``): rank-3 ``uint8`` keys are stacked on channels into the
    CNN, every other key (any dtype; ``Discrete`` one-hot) is turned into one float vector by an ``ObsEncoder``
    for the MLP encoder, whose decoder predicts every key's slice of that vector; with both, the two embeddings
    are concatenated and both reconstructions enter ``rec``. Rewards use a two-hot head, the
    continue flag a Bernoulli head; both heads read ``feat = concat(deter, stoch)``.

    Args:
        spec: the env's spec (observation ranks decide MLP vs CNN keys).
        action_dim: width of the model-format action.
        size: the network sizes (a preset from ``DREAMER_SIZES``).
        unimix: uniform mix of the latent categoricals.
        initial: RSSM initial state, ``zeros`` (2024) or ``learned`` (2023).
        norm: ``rms`` (2024) or ``layer`` (2023).
        reward_bins: bins of the two-hot reward head.
        twohot_space: ``raw`` (2024 symexp bins) or ``symlog`` (2023).
        continuous_actions: the action is a box (preprocessed by a / max(1, |a|)).
    """

    def __init__(
        self,
        spec: EnvSpec,
        action_dim: int,
        size: DreamerSize,
        unimix: float = 0.01,
        initial: str = "zeros",
        norm: str = "rms",
        reward_bins: int = 255,
        twohot_space: str = "raw",
        continuous_actions: bool = False,
    ) -> None:
        super().__init__()
        cnn_leaves, vector_spec = split_keys(spec)
        self.image = bool(cnn_leaves)
        #: the MLP keys → flat float vector: the MLP encoder's input and decoder target (``None``: images only).
        self.obs_vector = None if vector_spec is None else ObsEncoder(vector_spec)
        self.images = StackImages(cnn_leaves) if self.image else None
        mlp_in = 0 if self.obs_vector is None else self.obs_vector.out_dim
        mlp_encoder = MLPEncoder(mlp_in, size.hidden, size.mlp_layers, norm=norm) if mlp_in else None
        if self.images is not None:
            self.encoder: nn.Module = CNNEncoder(self.images.shape, size.cnn_depth, norm=norm)
            self.vector_encoder = mlp_encoder  # the vector keys beside the images, if any
        else:
            self.encoder, self.vector_encoder = mlp_encoder, None
        embed_dim = self.encoder.out_dim + (0 if self.vector_encoder is None else self.vector_encoder.out_dim)
        self.rssm = RSSM(
            action_dim, embed_dim, size.deter, size.hidden, size.stoch, size.classes,
            blocks=size.blocks, unimix=unimix, initial=initial, norm=norm, continuous_actions=continuous_actions,
        )  # fmt: skip
        feat = self.rssm.feature_dim
        mlp_decoder = MLPDecoder(feat, mlp_in, size.hidden, size.mlp_layers, norm=norm) if mlp_in else None
        if self.images is not None:
            self.decoder: nn.Module = CNNDecoder(feat, self.images.shape, size.cnn_depth, norm=norm)
            self.vector_decoder = mlp_decoder
        else:
            self.decoder, self.vector_decoder = mlp_decoder, None
        self.reward_codec = L.TwoHot(reward_bins, space=twohot_space)
        self.reward_head = Head(feat, reward_bins, size.hidden, size.head_layers, outscale=0.0, norm=norm)
        self.cont_head = Head(feat, 1, size.hidden, size.head_layers, outscale=1.0, norm=norm)
        self.obs_shape = spec.obs_shape

    def embed(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """Observation(s) ``[..., *obs_shape]`` (or a TensorDict of ``Dict`` keys) → embedding ``[..., E]``."""
        if self.images is None:
            return self.encoder(self.obs_vector(obs))
        embed = self.encoder(self.images(obs))
        if self.vector_encoder is None:
            return embed
        return torch.cat([embed, self.vector_encoder(self.obs_vector(obs))], dim=-1)

    def reward(self, feat: torch.Tensor) -> torch.Tensor:
        """Predicted reward (raw scale) of each feature."""
        return self.reward_codec.decode(self.reward_head(feat))

    def cont(self, feat: torch.Tensor) -> torch.Tensor:
        """Predicted probability that the state is not terminal (times the continue discount in 2024 mode)."""
        return torch.sigmoid(self.cont_head(feat).squeeze(-1))

    def observe_inputs(self, seq: TensorDict, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The observe scan's ``prev_action [T, B, A]`` and ``is_first [T, B]`` for a replayed ``[T, B]`` sequence.

        Row ``t``'s RSSM step uses the previous row's action (zeros for row 0); row 0 is always treated as an
        episode start, so every sampled window begins from the initial state (dreamer.md §12.2).
        """
        prev = torch.cat([torch.zeros_like(actions[:1]), actions[:-1]])
        is_first = seq[keys.IS_FIRST].clone()
        is_first[0] = True
        return prev, is_first

    def observe(
        self, seq: TensorDict, actions: torch.Tensor, generator: torch.Generator
    ) -> tuple[TensorDict, torch.Tensor]:
        """Filter a replayed ``[T, B]`` sequence (``observe_inputs``): posterior states and prior log-probs."""
        prev, is_first = self.observe_inputs(seq, actions)
        return self.rssm.observe(self.embed(seq[keys.OBS]), prev, is_first, None, generator)

    def loss(
        self,
        seq: TensorDict,
        actions: torch.Tensor,
        generator: torch.Generator,
        free_nats: float,
        horizon: float,
        discount_continue: bool,
    ) -> tuple[dict[str, torch.Tensor], TensorDict, dict[str, torch.Tensor]]:
        """Per-step ``[T, B]`` loss terms (``rec``, ``rew``, ``con``, ``dyn``, ``rep``), posteriors and diagnostics."""
        posts, prior_logp = self.observe(seq, actions, generator)
        terms, diagnostics = self.loss_terms(
            posts["deter"], posts["stoch"], posts["logits"], prior_logp, seq[keys.OBS], seq[keys.REWARD],
            seq[keys.TERMINATED], free_nats, horizon, discount_continue,
        )  # fmt: skip
        return terms, posts, diagnostics

    def loss_terms(
        self,
        deter: torch.Tensor,
        stoch: torch.Tensor,
        post_logp: torch.Tensor,
        prior_logp: torch.Tensor,
        obs: torch.Tensor | TensorDict,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        free_nats: float,
        horizon: float,
        discount_continue: bool,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """``loss`` after the observe scan, on the posteriors' tensors ``[T, B, ...]``: terms and diagnostics."""
        feat = torch.cat([deter, stoch.flatten(-2)], -1)
        if self.images is None:
            rec = (self.decoder(feat) - D.symlog(self.obs_vector(obs))).pow(2).sum(-1)
        else:
            target = self.images(obs).float() / 255.0
            rec = (self.decoder(feat) - target).pow(2).flatten(2).sum(-1)
            if self.vector_decoder is not None:
                rec = rec + (self.vector_decoder(feat) - D.symlog(self.obs_vector(obs))).pow(2).sum(-1)
        rew = self.reward_codec.loss(self.reward_head(feat), reward.float())
        con_target = L.continue_target(terminated.float(), horizon, discount_continue)
        con = F.binary_cross_entropy_with_logits(self.cont_head(feat).squeeze(-1), con_target, reduction="none")
        dyn, rep, kl = L.kl_losses(post_logp, prior_logp, free_nats)
        terms = {"rec": rec, "rew": rew, "con": con, "dyn": dyn, "rep": rep}
        with torch.no_grad():
            diagnostics = {
                "kl": kl.mean(),
                "post_entropy": _entropy(post_logp).mean(),
                "prior_entropy": _entropy(prior_logp).mean(),
            }
        return terms, diagnostics


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    """Entropy of the latent state, summed over its categoricals."""
    return -(logp.exp() * logp).sum((-2, -1))
