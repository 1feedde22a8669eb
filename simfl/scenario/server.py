"""``[server]``: the sync or async server, and which of its keys each mode reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from simfl import plugins
from simfl.errors import InputError
from simfl.scenario.fields import NON_NEGATIVE, POSITIVE, opt

if TYPE_CHECKING:
    from simfl.scenario import Scenario

MAX_OVER_SELECTION = 1000


@dataclass(frozen=True)
class ServerConfig:
    num_rounds: int = opt(100, POSITIVE)
    clients_per_round: int = opt(10, POSITIVE)
    # Select clients_per_round * (1 + over_selection) devices; the round closes once
    # 1 / (1 + over_selection) of the devices that train have uploaded (Bonawitz et al. 2019).
    over_selection: float = opt(0.0, (lambda v: 0 <= v <= MAX_OVER_SELECTION,
                                     f"must be in [0, {MAX_OVER_SELECTION}]"))
    min_online: int = opt(1, POSITIVE)  # wait until at least this many devices are online
    # Kept so that older scenarios and manifests load; it changes nothing: a server waiting
    # for devices wakes the instant enough are online (simfl.sim.tasks.wait_for_devices).
    wait_poll_s: float = opt(60.0, POSITIVE)
    # Fail the run (RunStalled) after waiting this long for enough idle online devices.
    max_wait_s: float = opt(86400.0, POSITIVE)
    deadline_s: float = opt(0.0, NON_NEGATIVE)  # round deadline from its start (0 = none)
    round_interval_s: float = opt(0.0, NON_NEGATIVE)  # rounds start at most this often
    # "async": buffered asynchronous aggregation (FedBuff, Nguyen et al., AISTATS 2022;
    # docs/async.md). num_rounds then counts server updates; the keys below are async-only.
    mode: Literal["sync", "async"] = "sync"
    concurrency: int = opt(0, NON_NEGATIVE)  # devices kept training (0 = clients_per_round)
    buffer_size: int = opt(0, NON_NEGATIVE)  # arrivals per server update (0 = clients_per_round)
    # Weight s(tau) of an update tau versions stale: 1; (1 + tau)^-a; hinge: 1 if tau <= b,
    # else 1 / (a (tau - b) + 1) (FedAsync, Xie et al. 2019).
    staleness: Literal["constant", "polynomial", "hinge"] = "constant"
    staleness_a: float = opt(0.5, NON_NEGATIVE)
    staleness_b: float = opt(4.0, NON_NEGATIVE)
    max_staleness: int = opt(-1, (lambda v: v >= -1, "must be >= -1"))  # drop beyond (-1 = none)
    server_lr: float = opt(1.0, POSITIVE)  # w <- w + server_lr * (weighted mean of the buffer)



SYNC_ONLY = ("over_selection", "deadline_s", "round_interval_s", "min_online")
ASYNC_ONLY = ("concurrency", "buffer_size", "staleness", "staleness_a", "staleness_b",
              "max_staleness", "server_lr")
def unused_server_keys(scenario: Scenario) -> tuple[str, ...]:
    """The other server mode's keys set away from their defaults: a sync scenario
    switched to async (``--set server.mode=async``) keeps its deadline, pacing and
    over-selection, which the async server does not read (and the reverse). They are
    not errors, so that ``server.mode`` alone switches a scenario; a run says, in one
    note, which it does not use."""
    server, default = scenario.server, ServerConfig()
    other = ASYNC_ONLY if server.mode == "sync" else SYNC_ONLY
    return tuple(f"server.{key}" for key in other
                 if getattr(server, key) != getattr(default, key))


def unscaled_rule_note(scenario: Scenario) -> str | None:
    """In async mode, a note for a rule that does not declare it applies the buffer's
    staleness scales (``applies_scales``, simfl.plugins): its combine may weigh a stale
    update as a fresh one. None otherwise."""
    if scenario.server.mode != "async":
        return None
    rule = plugins.AGGREGATORS.lookup(scenario.aggregator.name, "aggregator.name")
    if rule.applies_scales:
        return None
    return (f"note: aggregator {rule.name!r} does not declare applies_scales: unless its "
            "combine applies RoundInputs.scales, async mode weighs a stale update as a "
            "fresh one (server.staleness has no effect)")


def check_server(scenario: Scenario, source: str) -> None:
    """What async mode supports (the other mode's keys: :func:`unused_server_keys`)."""
    server, default = scenario.server, ServerConfig()
    mode = server.mode
    if mode == "sync":
        return
    if server.staleness == "constant" and server.staleness_a != default.staleness_a:
        raise InputError(f"{source}: 'server.staleness_a' has no meaning with "
                         f"'server.staleness' = 'constant'")
    if server.staleness != "hinge" and server.staleness_b != default.staleness_b:
        raise InputError(f"{source}: 'server.staleness_b' has no meaning with "
                         f"'server.staleness' = {server.staleness!r} (hinge only)")
    rule = plugins.AGGREGATORS.lookup(scenario.aggregator.name, "aggregator.name", source)
    if rule.async_refused:
        raise InputError(f"{source}: 'aggregator.name' = {rule.name!r} does not work with "
                         f"'server.mode' = 'async': {rule.async_refused}")
    if scenario.aggregator.participation != "none":
        raise InputError(f"{source}: 'aggregator.participation' = "
                         f"{scenario.aggregator.participation!r} does not work with "
                         f"'server.mode' = 'async': {plugins.PARTICIPATION_ASYNC_REFUSED}")
    driver = plugins.ESTIMATORS.lookup(scenario.estimator.name, "estimator.name", source)
    if plugins.filters_by_threshold(scenario.aggregator.name, source) and driver.async_refused:
        able = [p.name for p in plugins.ESTIMATORS.builtins() if not p.async_refused]
        raise InputError(f"{source}: 'estimator.name' = {driver.name!r} "
                         f"{driver.async_refused}; with 'server.mode' = 'async' use one of "
                         f"{able} (others may shadow)")

