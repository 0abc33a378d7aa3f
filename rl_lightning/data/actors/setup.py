"""The datamodule's side of async collection: refuse what cannot run in actors, then start the pool (processes on
this machine, or Ray actors: ``data.actor_backend``)."""

from __future__ import annotations

import io
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

from rl_lightning.data.actors.policy_factory import PolicyFactory
from rl_lightning.data.actors.pool import ActorPool, PoolSettings
from rl_lightning.data.actors.ray_checks import check_backend, check_ray_cluster
from rl_lightning.data.actors.recipes import SelfPlayRecipe, SingleAgentRecipe
from rl_lightning.errors import ConfigError

_MIXED = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}  # Lightning's autocast precisions


def check_actor_config(datamodule: Any, module: Any) -> None:
    """One-line ``ConfigError`` for every async setting that cannot run, before any env or process starts."""
    n = datamodule.num_actors
    if not isinstance(n, int) or n < 0:
        raise ConfigError(f"data.num_actors={n!r}: must be 0 (collect in the learner) or a positive number of actors")
    lag = datamodule.max_policy_lag
    if not isinstance(lag, int) or lag < 1:
        raise ConfigError(
            f"data.max_policy_lag={lag!r}: must be >= 1 (versions a rollout may lag the learner); for lag 0 collect "
            "in the learner with data.num_actors: 0"
        )
    on_ray = getattr(datamodule, "actor_backend", "processes") == "ray"
    _check_borrowing(datamodule, n, on_ray)
    check_backend(datamodule)
    splits = getattr(datamodule, "actor_env_splits", 1)
    if n == 0 and splits != 1:
        raise ConfigError(
            f"data.actor_env_splits={splits!r} splits the envs of actor processes; set data.num_actors >= 1 or "
            "data.actor_env_splits: 1"
        )
    if n == 0:
        return
    _check_positive("data.actor_max_failures", datamodule.actor_max_failures, "e.g. 3")
    _check_positive("data.actor_heartbeat_s", datamodule.actor_heartbeat_s, "e.g. 60")
    if n > datamodule.num_envs or datamodule.num_envs % n:
        raise ConfigError(
            f"data.num_actors={n} does not split data.num_envs={datamodule.num_envs} evenly (each actor steps "
            f"num_envs / num_actors envs); use a divisor of {datamodule.num_envs} no larger than it"
        )
    _check_env_splits(datamodule)
    refusal = _unsupported(datamodule, module)
    if refusal:
        raise ConfigError(f"data.num_actors={n}: {refusal}; set data.num_actors: 0")
    _check_crosses_processes(datamodule.env, "the env", n, on_ray)
    if datamodule.selfplay is not None:
        _check_crosses_processes(datamodule.selfplay_settings, "the seat map and league settings", n, on_ray)
    _check_crosses_processes(module.policy_factory(), f"{type(module).__name__}'s acting policy", n, on_ray)
    if on_ray:
        check_ray_cluster(datamodule)  # last: it may connect to a cluster to count its CPUs


def _check_borrowing(datamodule: Any, n: int, on_ray: bool) -> None:
    """``borrow_idle_actor_cores`` needs actor processes on the learner's machine."""
    borrow = getattr(datamodule, "borrow_idle_actor_cores", False)
    if not isinstance(borrow, bool):
        raise ConfigError(f"data.borrow_idle_actor_cores={borrow!r}: must be true or false")
    if borrow and n == 0:
        raise ConfigError(
            "data.borrow_idle_actor_cores=true lends the learner the cores of idle actor processes, but "
            "data.num_actors=0 starts none; set data.num_actors >= 1 or data.borrow_idle_actor_cores: false"
        )
    if borrow and on_ray:
        raise ConfigError(
            "data.borrow_idle_actor_cores=true lends the learner the cores of actor processes on its machine; Ray "
            "actors may run elsewhere: set data.actor_backend: processes or data.borrow_idle_actor_cores: false"
        )


def _check_env_splits(datamodule: Any) -> None:
    """``actor_env_splits``: 1, or 2 with an even number of envs per actor and a plain single-seat collector."""
    splits = getattr(datamodule, "actor_env_splits", 1)
    if splits == 1:
        return
    if splits != 2:
        raise ConfigError(f"data.actor_env_splits={splits!r}: must be 1 (off) or 2 (two env groups per actor)")
    per_actor = datamodule.num_envs // datamodule.num_actors
    if per_actor % 2:
        raise ConfigError(
            f"data.actor_env_splits=2 halves each actor's {per_actor} envs (num_envs / num_actors), which is odd; "
            "use an even number of envs per actor or data.actor_env_splits: 1"
        )
    if datamodule.selfplay is not None or getattr(datamodule, "actor_recipe", None) is not None:
        raise ConfigError(
            "data.actor_env_splits=2 steps single-seat envs with a plain collector; self-play and DreamerV3's "
            "sequence collector step all their envs together: set data.actor_env_splits: 1"
        )


def _unsupported(datamodule: Any, module: Any) -> str:
    if not getattr(module, "supports_actor_processes", False):
        # The package's modules that do, read off their classes: every loaded subclass of the class that declares
        # the flag (RLModule), the package's own only (importing any algorithm imports them all).
        mro = type(module).__mro__
        todo = [next((cls for cls in reversed(mro) if "supports_actor_processes" in vars(cls)), type(module))]
        able: set[str] = set()
        while todo:
            cls = todo.pop()
            todo.extend(cls.__subclasses__())
            if getattr(cls, "supports_actor_processes", False) and cls.__module__.startswith("rl_lightning."):
                able.add(cls.__name__)
        who = f" ({', '.join(sorted(able))} do)" if able else ""
        return f"{type(module).__name__} does not collect in actor processes yet{who}"
    if datamodule.compile:
        return "data.compile (the fused rollout step) runs in the learner only"
    return ""


def _check_crosses_processes(value: Any, what: str, n: int, ray: bool = False) -> None:
    """Refuse ``value`` that cannot be copied into a spawned process or a Ray actor (a lambda, an open handle, a live
    engine; Ray's cloudpickle would take a lambda, but a plain pickle is what every backend can rely on)."""
    try:
        ForkingPickler(io.BytesIO()).dump(value)
    except Exception as err:  # noqa: BLE001 - any pickling failure means the same thing to the user
        into = "each Ray actor" if ray else "each actor process"
        raise ConfigError(
            f"data.num_actors={n} copies {what} into {into}, but {type(value).__name__} cannot be "
            f"pickled ({type(err).__name__}: {err}); define it at module level with plain settings, or set "
            "data.num_actors: 0"
        ) from None


def _check_positive(field: str, value: Any, example: str) -> None:
    if not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{field}={value!r}: must be positive, {example}")


def start_pool(datamodule: Any, module: Any, env_seed: int, seed_generation: int) -> Any:
    """Start the datamodule's actors with the module's acting policy; they wait for the first ``publish``.

    Returns an ``ActorPool``, or a ``RayActorPool`` (the same surface) with ``data.actor_backend: ray``."""
    settings = PoolSettings(
        num_actors=datamodule.num_actors,
        num_envs=datamodule.num_envs,
        num_steps=datamodule.num_steps,
        max_policy_lag=datamodule.max_policy_lag,
        max_failures=int(datamodule.actor_max_failures),
        heartbeat_timeout_s=float(datamodule.actor_heartbeat_s),
        env_seed=env_seed,
        check_env=datamodule.check_env,
        check_finite=datamodule.check_finite,
        seed_generation=seed_generation,
        env_splits=getattr(datamodule, "actor_env_splits", 1),
        autocast_dtype=acting_dtype(datamodule, module),
        borrow_idle_cores=bool(getattr(datamodule, "borrow_idle_actor_cores", False)),
    )
    factory: PolicyFactory = module.policy_factory()
    if getattr(datamodule, "actor_backend", "processes") == "ray":
        from rl_lightning.data.actors.ray_pool import RayActorPool  # imports Ray: only with this backend

        recipe = _recipe(datamodule)
        return RayActorPool(settings, datamodule.env, factory, module.state_dict(), recipe, datamodule.ray_address)
    return ActorPool(settings, datamodule.env, factory, module.state_dict(), _recipe(datamodule))


def acting_dtype(datamodule: Any, module: Any) -> torch.dtype | None:
    """The dtype a CPU learner's serial collector acts in: Lightning runs ``training_step`` (where it collects) in
    ``torch.autocast`` under ``trainer.precision: bf16-mixed`` / ``16-mixed``, so the actors act in it too and
    collect what the serial path would. None (float32) otherwise; a GPU learner's actors act in float32 on the CPU."""
    trainer = getattr(datamodule, "trainer", None)
    if trainer is None or module.device.type != "cpu":
        return None
    return _MIXED.get(str(trainer.precision))


def _recipe(datamodule: Any) -> Any:
    """What each actor builds its collector from, read afresh at every (re)start (the league moves on)."""
    own = getattr(datamodule, "actor_recipe", None)  # a datamodule with its own collector (DreamerV3's)
    if own is not None:
        return own
    if datamodule.selfplay is None:
        return SingleAgentRecipe
    seats, league = datamodule.selfplay_settings
    return lambda: SelfPlayRecipe(datamodule.env, seats, league, datamodule.selfplay.state_dict())
