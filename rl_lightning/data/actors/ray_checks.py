"""``data.actor_backend: ray``: refuse, in one line before anything trains, what cannot run; open the Ray session.

Ray is imported inside the functions here (it is an optional extra), never when this module is imported.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from typing import Any

from rl_lightning.errors import ConfigError

BACKENDS = ("processes", "ray")
INSTALL = 'pip install -e ".[ray]"'
PROBE_TIMEOUT_S = 3.0
_QUIET = {"log_to_driver": False, "logging_level": "warning"}  # the actors' errors reach the learner as results


def check_backend(datamodule: Any) -> None:
    """Refuse an unknown ``data.actor_backend``, or a ``data.ray_address`` that nothing would read or cannot name a
    cluster (no Ray needed)."""
    backend = getattr(datamodule, "actor_backend", "processes")  # a datamodule of its own may not have these
    address = getattr(datamodule, "ray_address", None)
    if backend not in BACKENDS:
        raise ConfigError(f"data.actor_backend={backend!r} is invalid: choose one of {list(BACKENDS)}")
    if backend != "ray" and address is not None:
        raise ConfigError(
            f"data.ray_address={address!r} is read only with data.actor_backend: ray (it is {backend!r}); set "
            "data.actor_backend: ray, or drop data.ray_address"
        )
    _check_address_form(address)


def check_ray_cluster(datamodule: Any) -> None:
    """With ``data.actor_backend: ray``: refuse a missing Ray, an unreachable cluster or one with fewer CPUs than
    actors. Connects to a given cluster to count its CPUs, then disconnects (the pool reconnects)."""
    address = datamodule.ray_address
    try:
        import ray
    except ImportError:
        raise ConfigError(f"data.actor_backend=ray needs Ray, which is not installed: {INSTALL}") from None
    if ray.is_initialized() or address is None:
        cpus = cpus_of_cluster() if ray.is_initialized() else float(local_cpus())
    else:
        connect(address)
        try:
            cpus = cpus_of_cluster()
        finally:
            ray.shutdown()  # a driver's disconnect: the cluster stays up
    refuse_too_many_actors(datamodule.num_actors, cpus, address)


def connect(address: str | None) -> bool:
    """Start a local Ray instance (``address`` ``None``) or connect to a cluster, unless this process already has a
    Ray session; returns whether it opened one (then its owner shuts it down)."""
    import ray

    if ray.is_initialized():
        return False
    if address is None:  # "local": a fresh instance even when RAY_ADDRESS names a cluster
        init_ray(address="local", num_cpus=local_cpus(), include_dashboard=False, **_QUIET)
        return True
    _check_address_form(address)
    _probe(address)
    try:
        init_ray(address=address, **_QUIET)
    except ConnectionError as err:
        raise ConfigError(
            f"data.ray_address={address!r}: no Ray cluster found ({str(err).splitlines()[0]}); start one with "
            "`ray start --head`, or set data.ray_address: null for a local Ray instance"
        ) from None
    return True


def init_ray(**kwargs: Any) -> None:
    """``ray.init``, keeping what it would change in the learner's process: its SIGTERM/SIGINT handlers (Ray's core
    worker installs a crash handler for SIGTERM, which prints a stack and kills the learner before ``FaultCheckpoint``
    could save the last update) and ``PYTHONBREAKPOINT`` (Ray points the driver's ``breakpoint()`` at its own hook)."""
    import ray

    main = threading.current_thread() is threading.main_thread()
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)} if main else {}
    breakpoint_hook = os.environ.get("PYTHONBREAKPOINT")
    ray.init(**kwargs)
    for signum, handler in kept.items():
        if handler is not None:
            signal.signal(signum, handler)
    if breakpoint_hook is None:
        os.environ.pop("PYTHONBREAKPOINT", None)
    else:
        os.environ["PYTHONBREAKPOINT"] = breakpoint_hook


def local_cpus() -> int:
    """The CPUs a local Ray instance gets: the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpus_of_cluster() -> float:
    """CPUs of the Ray cluster this process is connected to, over its live nodes."""
    import ray

    return float(ray.cluster_resources().get("CPU", 0.0))


def refuse_too_many_actors(num_actors: int, cpus: float, address: str | None) -> None:
    """One line when ``num_actors`` actors (one CPU each) cannot all be placed on ``cpus`` CPUs."""
    if num_actors > cpus:
        where = "the local Ray instance" if address is None else f"the Ray cluster at {address!r}"
        raise ConfigError(
            f"data.num_actors={num_actors} with data.actor_backend=ray needs {num_actors} CPUs (one per actor) but "
            f"{where} has {cpus:g}; use at most {int(cpus)} actors, or add nodes (`ray start --address ...`)"
        )


def _check_address_form(address: Any) -> None:
    if address is None or address == "auto":
        return
    host, _, port = str(address).rpartition(":")
    if not isinstance(address, str) or not host or not port.isdigit() or "://" in address:
        raise ConfigError(
            f"data.ray_address={address!r} is invalid: null (start a local Ray instance), 'auto' (the cluster "
            "`ray start` started on this machine) or 'host:port' of a cluster's head"
        )


def _probe(address: str) -> None:
    """Refuse at once a ``host:port`` where nothing listens (Ray itself retries for minutes)."""
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as err:
        raise ConfigError(
            f"data.ray_address={address!r}: nothing answers there ({err.strerror or err}); start the cluster's head "
            f"with `ray start --head --port {port}`, or set data.ray_address: null for a local Ray instance"
        ) from None
