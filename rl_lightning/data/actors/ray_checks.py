"""``data.actor_backend: ray``: refuse, in one line before anything trains, what cannot run (a cluster that refuses
the run's token included); open the Ray session; know the learner's own Ray processes, which it cannot outlive.

Ray is imported inside the functions here (it is an optional extra), never when this module is imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_lightning.errors import ConfigError

BACKENDS = ("processes", "ray")
INSTALL = 'pip install -e ".[ray]"'
PROBE_TIMEOUT_S = 3.0
_QUIET = {"log_to_driver": False, "logging_level": "warning"}  # the actors' errors reach the learner as results
#: Ray (2.60) turns token authentication on for every new local instance and says so at each ``ray.init``; the run
#: wants it on (docs/guides/ray.md says why and how to join other nodes), so the notice is dropped.
_TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"
_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
#: What to do when a cluster refuses this process's token (docs/guides/ray.md, "Pointing a run at a cluster").
TOKEN_FIX = (
    "run the learner with RAY_AUTH_MODE=token and the cluster's token (`ray get-auth-token` on the head prints it) "
    "in ~/.ray/auth_token or RAY_AUTH_TOKEN, as on every node"
)


def check_backend(datamodule: Any) -> None:
    """Refuse an unknown ``data.actor_backend``, or a ``data.ray_address`` that nothing would read or cannot name a
    cluster (no Ray needed)."""
    backend = getattr(datamodule, "actor_backend", "processes")  # a datamodule of its own may not have these
    address = getattr(datamodule, "ray_address", None)
    if backend not in BACKENDS:
        raise ConfigError(f"data.actor_backend={backend!r} is invalid: choose one of {list(BACKENDS)}")
    if backend == "ray" and getattr(datamodule, "num_actors", 0) == 0:
        raise ConfigError(
            "data.actor_backend='ray' runs the actors as Ray actors, but data.num_actors=0 starts none (the learner "
            "collects itself); set data.num_actors >= 1, or drop data.actor_backend"
        )
    if backend != "ray" and address is not None:
        raise ConfigError(
            f"data.ray_address={address!r} is read only with data.actor_backend: ray (it is {backend!r}); set "
            "data.actor_backend: ray, or drop data.ray_address"
        )
    _check_address_form(address)


def check_ray_cluster(datamodule: Any) -> None:
    """With ``data.actor_backend: ray``: refuse a missing Ray, an unreachable cluster or one with fewer CPUs than the
    actors of every DDP rank, and a local Ray instance per rank where several ranks share a machine. Connects to a
    given cluster to count its CPUs, then disconnects (the pool reconnects)."""
    address = datamodule.ray_address
    trainer = getattr(datamodule, "trainer", None)
    ranks = int(getattr(datamodule, "world_size", 1))
    ranks_here = int(getattr(trainer, "num_devices", 1)) if trainer is not None else 1
    try:
        import ray
    except ImportError:
        raise ConfigError(f"data.actor_backend=ray needs Ray, which is not installed: {INSTALL}") from None
    if address is None and ranks_here > 1 and not ray.is_initialized():
        raise ConfigError(
            f"data.ray_address=null starts a local Ray instance in each of the {ranks_here} DDP ranks on this "
            "machine, each claiming every core; start one cluster (`ray start --head`, docs/guides/ray.md) and set "
            "data.ray_address to its head (auto on the head's machine) so that the ranks share its CPUs"
        )
    if ray.is_initialized() or address is None:
        cpus = cpus_of_cluster() if ray.is_initialized() else float(local_cpus())
    else:
        connect(address)
        try:
            cpus = cpus_of_cluster()
        finally:
            ray.shutdown()  # a driver's disconnect: the cluster stays up
    refuse_too_many_actors(datamodule.num_actors, cpus, address, ranks if address is not None else 1)


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
    _refuse_a_refused_token(address)
    try:
        init_ray(address=address, **_QUIET)
    except Exception as err:
        if _names_a_token_refusal(err):  # e.g. RAY_AUTH_MODE=token without any token here
            raise ConfigError(_token_refused(address)) from None
        if not isinstance(err, ConnectionError):
            raise
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
    with _without_token_notice():
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


def refuse_too_many_actors(num_actors: int, cpus: float, address: str | None, ranks: int = 1) -> None:
    """One line when ``num_actors`` actors per rank (one CPU each) on ``ranks`` DDP ranks cannot all be placed on
    ``cpus`` CPUs (the ranks share one cluster)."""
    needed = num_actors * ranks
    if needed > cpus:
        where = "the local Ray instance" if address is None else f"the Ray cluster at {address!r}"
        per_rank = f" on each of {ranks} DDP ranks" if ranks > 1 else ""
        most = int(cpus) // ranks
        raise ConfigError(
            f"data.num_actors={num_actors}{per_rank} with data.actor_backend=ray needs {needed} CPUs (one per actor) "
            f"but {where} has {cpus:g}; use at most {most} actors{' per rank' if ranks > 1 else ''}, or add nodes "
            "(`ray start --address ...`)"
        )


@dataclass(frozen=True)
class _Process:
    what: str
    pid: int
    started: str  # /proc/<pid>/stat's start time: a reused pid is another process

    def alive(self) -> bool:
        fields = _stat(self.pid)
        return fields is not None and fields[0] not in ("Z", "X") and fields[19] == self.started


@dataclass(frozen=True)
class LocalRay:
    """The Ray processes on this machine that the learner, a Ray driver, cannot outlive: its node's raylet (which
    holds the object store every rollout and every weights ``ray.put`` goes through) and the cluster's GCS when the
    head is this machine. Ray's core worker ends the driver with exit code 1 and no Python error at its next call
    into a dead one; ``gone`` lets the learner say so first. Found by their command lines in ``/proc`` (Linux);
    elsewhere, or in another pid namespace, nothing is watched."""

    processes: tuple[_Process, ...]

    @classmethod
    def of_this_process(cls) -> LocalRay:
        """The raylet of this driver's node, and the GCS of its session if it runs on this machine (the head)."""
        import ray

        own = ray.get_runtime_context().get_node_id()
        node = next((node for node in ray.nodes() if node["NodeID"] == own), None)
        if node is None:
            return cls(())
        socket_name = node["RayletSocketName"]  # <session dir>/sockets/raylet[.N]
        wanted = {
            ("raylet", "--raylet_socket_name=" + socket_name): "the raylet of the Ray node this learner runs on",
            ("gcs_server", "--session-dir=" + str(Path(socket_name).parent.parent)): "the Ray head's GCS server",
        }
        return cls(tuple(_find_processes(wanted)))

    def gone(self) -> str:
        """What died (``""``: all alive)."""
        return "; ".join(
            f"{process.what} (pid {process.pid}) died" for process in self.processes if not process.alive()
        )


def _find_processes(wanted: dict[tuple[str, str], str]) -> list[_Process]:
    """The processes of each ``(program, argument)`` of ``wanted``: the program's file name and that exact argument."""
    found = []
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for (program, argument), what in wanted.items():
            fields = _stat(int(entry.name))
            if Path(argv[0].decode(errors="replace")).name == program and argument.encode() in argv and fields:
                found.append(_Process(what, int(entry.name), fields[19]))
    return found


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat``'s fields after the command name (state first), or ``None`` when there is no such pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


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


def _refuse_a_refused_token(address: str) -> None:
    """Refuse at once a ``host:port`` whose cluster refuses this process's token (Ray's own ``ray.init`` retries for
    20 s, printing a warning a second, then says only that no cluster was found). A cluster that answers anything
    else, or not within ``PROBE_TIMEOUT_S``, is left to ``ray.init``."""
    if address == "auto":
        return
    from ray._private.authentication.authentication_token_setup import ensure_token_if_auth_enabled
    from ray._raylet import GcsClient  # the client ray.init itself opens first; it fails at once on a bad token
    from ray.exceptions import AuthenticationError

    try:
        ensure_token_if_auth_enabled(None, create_token_if_missing=False)  # as ray.init does (the client aborts)
    except AuthenticationError:
        raise ConfigError(
            f"data.ray_address={address!r}: RAY_AUTH_MODE=token, but this machine has no Ray token; put the "
            "cluster's token (`ray get-auth-token` on the head prints it) in ~/.ray/auth_token or RAY_AUTH_TOKEN"
        ) from None

    outcome: list[BaseException] = []

    def probe() -> None:
        try:
            GcsClient(address=address)
        except Exception as err:  # noqa: BLE001 - only a token refusal is acted on
            outcome.append(err)

    with _stderr_silenced():  # the client's C++ log line for the refusal
        thread = threading.Thread(target=probe, name="ray-token-probe", daemon=True)  # blocks ~40 s on a non-GCS
        thread.start()
        thread.join(PROBE_TIMEOUT_S)
    if outcome and _names_a_token_refusal(outcome[0]):
        raise ConfigError(_token_refused(address))


def _names_a_token_refusal(err: BaseException) -> bool:
    """Whether ``err`` or an error behind it is a cluster refusing this process's authentication token."""
    seen: BaseException | None = err
    while seen is not None:
        if "InvalidAuthToken" in str(seen) or type(seen).__name__ == "AuthenticationError":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _token_refused(address: str) -> str:
    mode = os.environ.get("RAY_AUTH_MODE")
    what = (
        "refused the token this run sent"
        if mode == "token"
        else f"this run sent none (RAY_AUTH_MODE is {mode or 'unset'})"
    )
    return (
        f"data.ray_address={address!r}: the Ray cluster there refused this run: it has token authentication on "
        f"(Ray's default) and {what}; {TOKEN_FIX}"
    )


class _DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _TOKEN_NOTICE not in record.getMessage()


@contextlib.contextmanager
def _without_token_notice() -> Iterator[None]:
    """Drop Ray's notice that token authentication is on (printed at every ``ray.init`` of a new local instance)."""
    logger, notice = logging.getLogger(_TOKEN_LOGGER), _DropTokenNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 pointed at /dev/null (Ray's C++ clients log there, below Python)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
