"""The configured estimators of a run: one drives the filter, the others shadow it.

Shadow estimators see exactly the cohort losses the driving one sees, every
round, so their biases are compared on identical draws (docs/design.md §7); only
the driving estimator's protocol is charged on the wire.

On bias rounds the bias η̂ − Q_pop of each estimator is decomposed by cause,

    bias = (E_all − Q_pop) + (E_online − E_all) + (η̂ − E_online),
           sampling         availability          selection

E_all the estimator's expected η̂ on a uniformly random cohort of the same size
from *all* training devices (the cohort's size and the quantile's
discreteness), E_online the same from all the devices online when the round
opened (who is available at that hour, and what the run did to those devices
earlier in their sessions: they were sampled, and some trained on, in the rounds
before; bench/recency.py separates the two, docs/bias.md), and η̂ the estimate on
the cohort the round actually drew. In a synchronous round that cohort is every
selected device whose loss report arrived before the deadline:
⌈clients_per_round × (1 + over_selection)⌉ devices drawn among the online ones not
busy with an earlier task, less those that went offline, failed or missed the
deadline before reporting (simfl.sim.server._loss_reports). Over-selection's
first-to-finish cut comes after the threshold and only decides which kept
devices' updates are aggregated (_FirstArrivals), so it is not in the selection
term. That term is one drawn cohort against the Monte-Carlo mean over random
cohorts of the online devices, plus the busy devices (the E_online draws include
them) and the reports lost before the threshold; in async mode the cohort is the
buffered arrivals, so which tasks arrived and their staleness enter too. The
expectations are Monte-Carlo means over ``decomposition_draws`` cohorts, on the
population's losses under the same model, from the estimator's state at this
round (the panel holds it, and an estimator returns its next state instead of
keeping it, so the draws never advance it: StatefulEstimator). The three terms add
up to the bias by construction; their sizes say which cause dominates. For
``tracking``, which returns the η it carries whatever the cohort, E_all = E_online
= η̂: its whole bias is the sampling term.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from simfl.errors import InputError
from simfl.plugins import ESTIMATORS, broke, build
from simfl.quantile.estimators import (
    IPW,
    CheckIns,
    Cohort,
    CohortExact,
    Estimate,
    Estimator,
    HistoryStratified,
    OnlineRates,
    PopulationQuantile,
    PostStratified,
    SecureBisection,
    SecureMM,
    State,
    StatefulEstimator,
    Tracking,
)
from simfl.quantile.kernels import weighted_quantile
from simfl.quantile.secagg import LOSS_REPORT, Exchange
from simfl.quantile.woodruff import woodruff_interval
from simfl.rng import Streams
from simfl.scenario import EstimatorConfig

# The estimators that read the check-ins of earlier UTC days (EstimatorContext.checkins_days)
DAYS_READERS = frozenset({"ipw_days", "poststrat_history", "rake", "ipw_shrunk",
                          "poststrat_shrunk"})


@dataclass(frozen=True)
class EstimatorContext:
    """What an estimator's factory gets (simfl.plugins.ESTIMATORS): the [estimator]
    section, the run's check-in record of every training device's online hours, the
    stratum (region) of each device and, for ``always`` / ``diurnal`` / ``habits``
    availability, the model's true online rates."""

    cfg: EstimatorConfig
    num_devices: int
    checkins: CheckIns
    checkins_days: CheckIns | None  # earlier UTC days only (for DAYS_READERS)
    strata: np.ndarray  # (N,) int64
    known_rates: OnlineRates | None


def cohort_exact(ctx: EstimatorContext) -> Estimator:
    return CohortExact()


def population_quantile(ctx: EstimatorContext) -> Estimator:
    return PopulationQuantile()


def secure_mm(ctx: EstimatorContext) -> Estimator:
    mm = ctx.cfg.secure_mm
    return SecureMM(mm.iterations, mm.tol, noise_std=ctx.cfg.noise_std)


def secure_bisection(ctx: EstimatorContext) -> Estimator:
    bis = ctx.cfg.secure_bisection
    return SecureBisection(bis.low, bis.high, bis.tol, noise_std=ctx.cfg.noise_std)


def tracking(ctx: EstimatorContext) -> StatefulEstimator:
    return Tracking(ctx.cfg.tracking.initial, ctx.cfg.tracking.step,
                    noise_std=ctx.cfg.noise_std)


def ipw(ctx: EstimatorContext) -> Estimator:
    return IPW(ctx.checkins)


def ipw_days(ctx: EstimatorContext) -> Estimator:
    return IPW(_days(ctx.checkins_days), name="ipw_days")


def poststrat(ctx: EstimatorContext) -> Estimator:
    return PostStratified(ctx.strata)


def poststrat_history(ctx: EstimatorContext) -> Estimator:
    return HistoryStratified(ctx.strata, _days(ctx.checkins_days), ctx.cfg.poststrat_history.bins)


def ipw_known(ctx: EstimatorContext) -> Estimator:
    return IPW(_known(ctx.known_rates), name="ipw_known")


def _days(checkins: CheckIns | None) -> CheckIns:
    if checkins is None:  # the panel makes the record whenever it is configured
        raise ValueError("estimator 'ipw_days' or 'poststrat_history' without its check-in "
                         "record")
    return checkins


def _known(rates: OnlineRates | None) -> OnlineRates:
    if rates is None:  # scenario loading rejects ipw_known where no rates are known
        raise InputError("estimator 'ipw_known' needs the availability model's online rates "
                         "(population.availability.mode 'always' or 'diurnal')")
    return rates


def make_estimator(name: str, ctx: EstimatorContext, key: str = "estimator.name"
               ) -> Estimator | StatefulEstimator:
    """The estimator ``name`` (simfl.plugins.ESTIMATORS) for the run ``ctx`` describes;
    InputError naming ``key`` for a plug-in whose estimator has no ``name`` (a string) or
    ``estimate``, whose ``losses_in_clear`` is no bool, or that keeps its state itself
    (``load_state_dict``) instead of returning it."""
    plugin = ESTIMATORS.lookup(name, key)
    made = build(plugin, key, ctx.cfg, ctx)
    who = f"'{key}' = {name!r} ({plugin.path})"
    if not all(hasattr(made, a) for a in ("name", "losses_in_clear", "estimate")):
        raise InputError(f"{who} returned a {type(made).__name__}, which lacks name, "
                         f"losses_in_clear or estimate (simfl.quantile.estimators.Estimator)")
    if not isinstance(made.name, str) or not isinstance(made.losses_in_clear, bool | np.bool_):
        raise InputError(f"{who} returned an estimator whose name is {made.name!r} and "
                         f"losses_in_clear {made.losses_in_clear!r}: a string and a bool "
                         f"(simfl.quantile.estimators.Estimator)")
    if hasattr(made, "load_state_dict") and not isinstance(made, StatefulEstimator):
        raise InputError(f"{who} keeps its state itself (load_state_dict); an estimator "
                         f"returns it instead: init() and estimate(cohort, level, rng, state) "
                         f"(simfl.quantile.estimators.StatefulEstimator)")
    estimator: Estimator | StatefulEstimator = made
    return estimator


def _reads_population(estimator: object) -> bool:
    return bool(getattr(estimator, "reads_population", False))


def _run(estimator: Estimator | StatefulEstimator, cohort: Cohort, level: float,
         rng: np.random.Generator, states: dict[str, State], who: str = "") -> Estimate:
    """``estimator``'s η̂ on ``cohort``; a stateful one's from its state in ``states``.
    ``who`` names a plug-in estimator (its key, name and path): what it returns is
    checked against the contract (:func:`check_estimate`)."""
    if isinstance(estimator, StatefulEstimator):
        made = estimator.estimate(cohort, level, rng, states[estimator.name])
    else:
        made = estimator.estimate(cohort, level, rng)
    if who:
        check_estimate(made, who, len(cohort.losses))
    return made


def check_estimate(made: object, who: str, size: int | None = None) -> None:
    """PluginBroke naming ``who`` unless ``made`` is an Estimate whose threshold is a
    real number (NaN and ±inf included: the run's health counts those), its exchanges a
    tuple of Exchange, its secure sums a count and its weights None or ``size`` finite
    non-negative numbers of positive sum: where the panel first receives a plug-in's
    output, not where the server compares losses with it."""
    contract = ("estimate(cohort, level, rng) returns a simfl.quantile.estimators.Estimate: "
                "threshold a number, exchanges a tuple of simfl.quantile.secagg.Exchange, "
                "secure_sums an int >= 0, weights None or one finite weight >= 0 per loss "
                "seen")
    if not isinstance(made, Estimate):
        raise broke(who, f"its estimate returned {_shown(made)}", contract)
    if not isinstance(made.threshold, numbers.Real) or isinstance(made.threshold, bool):
        raise broke(who, f"its estimate returned the threshold {_shown(made.threshold)}",
                    contract)
    if not (isinstance(made.exchanges, tuple)
            and all(isinstance(x, Exchange) for x in made.exchanges)):
        raise broke(who, f"its estimate returned the exchanges {_shown(made.exchanges)}",
                    contract)
    if (not isinstance(made.secure_sums, numbers.Integral) or isinstance(made.secure_sums, bool)
            or made.secure_sums < 0):
        raise broke(who, f"its estimate returned secure_sums {_shown(made.secure_sums)}",
                    contract)
    if made.weights is not None and not _weights_fit(made.weights, size):
        raise broke(who, f"its estimate returned the weights {_shown(made.weights)}", contract)


def _weights_fit(weights: object, size: int | None) -> bool:
    """Whether ``weights`` are ``size`` (any number if None) finite numbers >= 0 with a
    positive sum: a weighted CDF's (simfl.quantile.woodruff)."""
    w = np.asarray(weights)
    return (w.ndim == 1 and (size is None or len(w) == size) and w.dtype.kind in "iuf"
            and bool(np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0))


def _shown(value: object) -> str:
    """A value as a message shows it: its repr, cut short, and its type."""
    text = repr(value)
    return f"{text[:60] + '...' if len(text) > 60 else text} (a {type(value).__name__})"


@dataclass
class Presence:
    """Who the server has seen online: each training device's check-ins per UTC hour
    over the rounds before this one, the same over earlier UTC days only (the
    estimators of :data:`DAYS_READERS`; None when none is configured), and the devices
    online when the last round opened (the decomposition's E_online draws from them:
    who was online, whether or not the server saw the check-in)."""

    checkins: CheckIns
    checkins_days: CheckIns | None
    online: np.ndarray
    streams: Streams  # draws whose check-ins the server sees (estimator.checkin_share < 1)

    @classmethod
    def start(cls, num_devices: int, cfg: EstimatorConfig, days: bool,
              streams: Streams) -> Presence:
        """Nothing seen yet: every device counted online when the first round opens. The
        records' Beta prior is ``cfg.ipw.prior``, their share of check-ins seen and their
        memory ``cfg.checkin_share`` and ``cfg.checkin_memory_days``."""
        def record(earlier_days: bool) -> CheckIns:
            return CheckIns(num_devices, cfg.ipw.prior, earlier_days, cfg.checkin_share,
                            cfg.checkin_memory_days)
        return cls(record(False), record(True) if days else None, np.arange(num_devices),
                   streams)

    def observe(self, t_s: float, online_idx: np.ndarray) -> None:
        """A round opens at ``t_s`` with these devices online; the records count the
        check-ins the server sees (:meth:`seen`)."""
        self.online = np.asarray(online_idx, dtype=np.int64)
        seen = self.seen(t_s)
        self.checkins.observe(t_s, seen)
        if self.checkins_days is not None:
            self.checkins_days.observe(t_s, seen)

    def seen(self, t_s: float) -> np.ndarray:
        """The online devices whose check-in the server sees as a round opens at ``t_s``:
        all of them, or with ``checkin_share`` s < 1 each with probability s,
        independently (a random subset, as pace steering's reconnection windows would
        give), from the stream ``checkins`` keyed by the bits of ``t_s``: a resumed run
        draws the same subsets with no counter to checkpoint."""
        share = self.checkins.share
        if share == 1.0:
            return self.online
        rng = self.streams.numpy("checkins", int(np.float64(t_s).view(np.uint64)))
        return self.online[rng.random(self.online.size) < share]

    def state_dict(self) -> dict[str, Any]:
        return {"checkins": self.checkins.state_dict(),
                "checkins_days": (None if self.checkins_days is None
                                  else self.checkins_days.state_dict()),
                "online": self.online}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``, in place: the estimators keep their check-in records."""
        self.checkins.load_state_dict(state["checkins"])
        if self.checkins_days is not None:
            self.checkins_days.load_state_dict(state["checkins_days"])
        self.online = state["online"]


class EstimatorPanel:
    """Runs every configured estimator on each cohort; holds their state over rounds."""

    def __init__(self, cfg: EstimatorConfig, theta: float, num_devices: int,
                 streams: Streams, strata: np.ndarray | None = None,
                 known_rates: OnlineRates | None = None) -> None:
        """``strata``: (N,) the stratum (region) of every training device, for
        ``poststrat`` (default: one stratum, the cohort quantile); ``known_rates``: the
        availability model's true online probabilities, for the oracle ``ipw_known``."""
        self.theta, self.level, self.streams = theta, 1.0 - theta, streams
        names = dict.fromkeys((cfg.name, *cfg.shadow))  # the driver first, no repeats
        days = bool(DAYS_READERS & set(names))
        self.presence = Presence.start(num_devices, cfg, days, streams)
        if strata is None:
            strata = np.zeros(num_devices, dtype=np.int64)
        ctx = EstimatorContext(cfg, num_devices, self.presence.checkins,
                               self.presence.checkins_days, np.asarray(strata, dtype=np.int64),
                               known_rates)
        keys = {name: "estimator.name" if name == cfg.name else
                f"estimator.shadow[{cfg.shadow.index(name)}]" for name in names}
        self.estimators = [make_estimator(name, ctx, keys[name]) for name in names]
        made_names = [e.name for e in self.estimators]
        if len(set(made_names)) < len(made_names):
            raise InputError(f"the estimators of 'estimator.name' and 'estimator.shadow' "
                             f"{list(names)} name themselves {made_names}: each needs its "
                             f"own name (their rows in bias.parquet go by it)")
        # the plug-ins among them, by the name they give themselves: their key, name and path
        self.who = {e.name: f"'{keys[name]}' = {name!r} "
                            f"({ESTIMATORS.lookup(name, keys[name]).path})"
                    for name, e in zip(names, self.estimators, strict=True)
                    if not ESTIMATORS.lookup(name, keys[name]).builtin}
        self.draws = cfg.decomposition_draws if cfg.bias_every else 0
        self.wants_checkins = (self.draws > 0 or days
                               or any(isinstance(e, IPW | HistoryStratified)
                                      for e in self.estimators)
                               or not all(ESTIMATORS.lookup(n, "estimator.name").builtin
                                          for n in names))  # a plug-in may read them
        # the stateful estimators' state for the next round, and for the round in progress
        self.states: dict[str, State] = {e.name: e.init() for e in self.estimators
                                         if isinstance(e, StatefulEstimator)}
        self.before = self.states

    def state_dict(self) -> dict[str, Any]:
        """What rounds change, as plain data, for checkpoints: the check-in records, the
        devices online when the last round opened, and the state of every stateful
        estimator (as ``tracking``'s: a StatefulEstimator's, plain data)."""
        return {**self.presence.state_dict(), "estimators": dict(self.states)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``, in place: the estimators keep their check-in records."""
        self.presence.load_state_dict(state)
        self.states = {name: state["estimators"][name] for name in self.states}

    @property
    def driver(self) -> Estimator | StatefulEstimator:
        return self.estimators[0]

    @property
    def reads_population(self) -> bool:
        """Whether an estimator (the oracle ``population_quantile``) needs every training
        device's loss each round."""
        return any(_reads_population(e) for e in self.estimators)

    def estimate(self, cohort: Cohort, round_idx: int,
                 population: Cohort | None = None) -> dict[str, Estimate]:
        """Every estimator's η̂ on this cohort (on ``population``, every training device,
        for those that read it), the driving one first; the stateful ones' state moves
        on to the next round (``before`` keeps this round's)."""
        self.before = self.states

        def seen(e: Estimator | StatefulEstimator) -> Cohort:
            if not _reads_population(e):
                return cohort
            if population is None:
                raise ValueError(f"estimator {e.name!r} needs the population's losses")
            return population

        estimates = {e.name: _run(e, seen(e), self.level, self.streams.numpy(
            f"quantile_noise/{e.name}", round_idx), self.before, self.who.get(e.name, ""))
            for e in self.estimators}
        self.states = {name: estimates[name].state for name in self.states}
        return estimates

    def messages(self, name: str, estimate: Estimate) -> tuple[Exchange, ...]:
        """What estimator ``name`` has each device of the cohort send and receive: its loss
        report when it reads losses in the clear, then its protocol's exchanges."""
        clear = next(e for e in self.estimators if e.name == name).losses_in_clear
        return ((LOSS_REPORT,) if clear else ()) + estimate.exchanges

    def shadow_messages(self, estimates: dict[str, Estimate]
                        ) -> tuple[tuple[str, tuple[Exchange, ...]], ...]:
        """Per shadowing estimator, the messages of :meth:`messages` beyond what the round
        sends for its driver (a loss report in the clear is sent once for all who read
        it): what running its protocol too would put on the wire."""
        sent = set(self.messages(self.driver.name, estimates[self.driver.name]))
        extra = ((e.name, tuple(x for x in self.messages(e.name, estimates[e.name])
                                if not (x == LOSS_REPORT and x in sent)))
                 for e in self.estimators[1:])
        return tuple((name, msgs) for name, msgs in extra if msgs)

    def observe_online(self, t_s: float, online_idx: np.ndarray) -> None:
        if self.wants_checkins:
            self.presence.observe(t_s, online_idx)

    def bias_columns(self, round_idx: int, cohort: Cohort, estimates: dict[str, Estimate],
                     population: tuple[np.ndarray, np.ndarray] | None
                     ) -> dict[str, object]:
        """``bias.parquet`` columns for one round, one row per estimator. ``population``
        = (F_k(w_t), α_k) over every training device on bias rounds, else None. Every
        round, each estimate's 95 % Woodruff interval from its weights over the cohort's
        losses (NaN where it has none); the oracle ``population_quantile``'s, which
        evaluated every device, is [η̂, η̂]: a census has no sampling error."""
        names = list(estimates)
        eta = np.array([estimates[n].threshold for n in names])
        ci = np.array([self._interval(n, estimates[n], cohort.losses)
                       for n in names]).reshape(len(names), 2)
        oracle = conformity = e_all = e_online = np.full(len(names), np.nan)
        if population is not None:
            losses, weights = population
            oracle = np.full(len(names), weighted_quantile(losses, weights, self.level))
            # (E,) α-weight of the population at or above each estimate
            conformity = (losses[None, :] >= eta[:, None]) @ weights / weights.sum()
            if self.draws:
                e_all, e_online = self._expected(round_idx, cohort, losses, weights)
        protocol_bytes = [sum(x.up_bytes + x.down_bytes for x in self.messages(n, estimates[n]))
                          for n in names]
        return dict(round=round_idx, t_s=cohort.t_s, estimator=names,
                    driver=np.arange(len(names)) == 0, theta=self.theta, estimate=eta,
                    cohort_size=len(cohort.losses),
                    secure_sums=np.array([estimates[n].secure_sums for n in names]),
                    protocol_bytes=np.array(protocol_bytes, dtype=np.int64),
                    oracle_quantile=oracle, bias=eta - oracle, realized_conformity=conformity,
                    sampling_bias=e_all - oracle, availability_bias=e_online - e_all,
                    selection_bias=eta - e_online,
                    mc_draws=self.draws if population is not None else 0,
                    ci_low=ci[:, 0], ci_high=ci[:, 1])

    def _interval(self, name: str, estimate: Estimate, losses: np.ndarray
                  ) -> tuple[float, float]:
        """The 95 % Woodruff interval of estimator ``name``'s η̂ over the cohort's losses;
        (η̂, η̂) for one that read every device's loss, NaN for one without weights."""
        if any(_reads_population(e) for e in self.estimators if e.name == name):
            return estimate.threshold, estimate.threshold
        if estimate.weights is None:
            return math.nan, math.nan
        return woodruff_interval(losses, estimate.weights, self.level)

    def _expected(self, round_idx: int, cohort: Cohort, losses: np.ndarray,
                  weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(E,) each estimator's mean η̂ over random cohorts of the cohort's size from all
        training devices, and from the devices online when the round opened."""
        size, alpha = len(cohort.losses), weights / weights.mean()
        means = []
        pools = (("all", np.arange(len(losses))), ("online", self.presence.online))
        for pool_name, pool in pools:
            k = min(size, len(pool))
            rng = self.streams.numpy(f"bias_mc/{pool_name}", round_idx)
            draws = [np.sort(rng.choice(pool, size=k, replace=False)) for _ in range(self.draws)]
            oracle = weighted_quantile(losses, weights, self.level)
            means.append(np.array([oracle if _reads_population(e) else np.mean([
                _run(e, Cohort(losses[idx], alpha[idx], idx, cohort.t_s), self.level, rng,
                     self.before, self.who.get(e.name, "")).threshold
                for idx in draws]) for e in self.estimators]))
        return means[0], means[1]
