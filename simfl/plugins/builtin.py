"""simfl's own names: one registry per plug-in point, its first rows written out with the
import paths of their factories and hooks (so that loading a scenario imports no torch),
the scenario keys that name each point's plug-in, and the decorators that add rows.
A new built-in name is one ``_own(...)`` row of its point's list here."""

from __future__ import annotations

import dataclasses

from simfl.plugins.registry import Plugin, Registry


def _own(name: str, path: str, keys: tuple[str, ...] = (), async_refused: str = "",
         reads: tuple[str, ...] = (), **hooks: str) -> Plugin:
    return Plugin(name, path, keys, (), reads, async_refused, builtin=True,
                  hooks=tuple(hooks.items()))


_ONE_MODEL = "needs every loss report at one model w_t, and a buffer's updates start " \
             "from different versions"
# aggregator.participation (fedavg, deltafl: simfl.aggregate.participation), a key of
# two rules rather than a rule: why async mode refuses it (scenario.server.check_server)
PARTICIPATION_ASYNC_REFUSED = (
    "FedAU's participation intervals are counted in rounds and MIFA steps once a round "
    "from every device's latest update; a FedBuff server update is no round, and its "
    "buffer's updates start from different model versions")
_PARTICIPATION = ("participation", "fedau_cutoff")
# Every rule combines an async buffer through its own combine with staleness-scaled
# weights (simfl.aggregate.base: applies_scales), except those with a reason here.
AGGREGATORS = Registry("aggregators", [
    dataclasses.replace(rule, applies_scales=not rule.async_refused) for rule in (
    _own("fedavg", "simfl.aggregate.fedavg:fedavg", _PARTICIPATION),
    _own("fedprox", "simfl.aggregate.fedprox:fedprox", ("mu",)),
    dataclasses.replace(_own("deltafl", "simfl.aggregate.deltafl:deltafl",
                             ("theta", *_PARTICIPATION)), filters_by_threshold=True),
    _own("fedavg_sub", "simfl.aggregate.fedavg_sub:fedavg_sub", ("theta",),
         "its smaller cohort is a sync round's; async mode sets how many devices train "
         "with server.concurrency"),
    _own("qffl", "simfl.aggregate.qffl:qffl", ("q",),
         "its step L = 1/lr weighs updates trained with one round's lr from one model"),
    _own("term", "simfl.aggregate.term:term", ("tilt",)),
    _own("afl", "simfl.aggregate.afl:afl", ("lambda_step",), f"its λ step {_ONE_MODEL}"),
    _own("drfa", "simfl.aggregate.drfa:drfa", ("lambda_step",),
         "its λ step probes losses on the chord of one round's step from one model"),
)])
# Each model's training FLOPs per sample, counted by hand for the papers' shapes:
# simfl.population.compute (cnn fits any shape: counted from its forward pass).
_FLOPS = "simfl.population.compute"
MODELS = Registry("models", [
    # model.init = "zeros" (the authors' start from W = 0) is the linear model's alone
    _own("linear", "simfl.train.models:LinearSoftmax", ("bias",), reads=("init",),
         train_flops=f"{_FLOPS}:linear_train_flops"),
    _own("convnet", "simfl.train.models:ConvNet", train_flops=f"{_FLOPS}:convnet_train_flops"),
    _own("cnn", "simfl.train.models:SmallCNN"),  # any C×H×W (not the papers')
    _own("gru", "simfl.train.models:CharGRU", ("hidden",),  # Shakespeare's characters
         train_flops=f"{_FLOPS}:gru_train_flops"),
])
# Each data set's hooks (HOOKS) live beside its loader; npz_folder's sizes and shapes are
# known only once it is loaded. femnist and leaf read FEMNIST's pixel scaling, femnist
# the .npz's copies (data.sources).
DATASETS = Registry("datasets", [
    _own("synthetic", "simfl.data.synthetic:load_synthetic", reads=("synthetic",),
         input_shape="simfl.data.synthetic:input_shape",
         memory_terms="simfl.data.synthetic:memory_terms", sizes="simfl.data.synthetic:sizes"),
    _own("femnist", "simfl.data.femnist:load_femnist", reads=("sources", "pixel_scaling"),
         input_shape="simfl.data.femnist:input_shape",
         memory_terms="simfl.data.femnist:memory_terms",
         count_train="simfl.data.femnist:count_train_clients"),
    _own("leaf", "simfl.data.leaf:load_leaf", reads=("pixel_scaling",),
         input_shape="simfl.data.leaf:input_shape", memory_terms="simfl.data.leaf:memory_terms"),
    _own("shakespeare", "simfl.data.shakespeare:load_shakespeare",
         input_shape="simfl.data.shakespeare:input_shape",
         memory_terms="simfl.data.shakespeare:memory_terms"),
    _own("npz_folder", "simfl.data.own:load_npz_folder"),  # one <client>.npz each
])
# The threshold of an async buffer comes from its loss reports, sent in the clear with
# the updates: the devices of a buffer are gone by then, so no multi-round protocol runs.
_PROTOCOL = "needs the devices online during its protocol"
# the keys of the check-in record, read by every estimator that reads the record
_CHECKINS = ("checkin_share", "checkin_memory_days")
# ipw_known is an oracle for the study (the availability model's true online rates: it
# needs a mode with a rates hook);
# ipw_days is ipw with the online rates from the check-ins of earlier UTC days only;
# poststrat_history post-stratifies on region x the earlier days' check-in rate. Keys:
# the estimator sub-tables (and noise_std) each reads.
ESTIMATORS = Registry("estimators", [
    _own("cohort_exact", "simfl.quantile.panel:cohort_exact"),
    _own("secure_mm", "simfl.quantile.panel:secure_mm", (), _PROTOCOL,
         ("secure_mm", "noise_std")),
    _own("secure_bisection", "simfl.quantile.panel:secure_bisection", (), _PROTOCOL,
         ("secure_bisection", "noise_std")),
    _own("tracking", "simfl.quantile.panel:tracking", (), _PROTOCOL, ("tracking", "noise_std")),
    _own("ipw", "simfl.quantile.panel:ipw", reads=("ipw", *_CHECKINS)),
    _own("ipw_days", "simfl.quantile.panel:ipw_days", reads=("ipw", *_CHECKINS)),
    _own("poststrat", "simfl.quantile.panel:poststrat"),
    _own("poststrat_history", "simfl.quantile.panel:poststrat_history",
         reads=("poststrat_history", *_CHECKINS)),
    dataclasses.replace(_own("ipw_known", "simfl.quantile.panel:ipw_known", (), _PROTOCOL),
                        needs_rates=True),
    # the population quantile itself, every device evaluated each round (an oracle driver)
    _own("population_quantile", "simfl.quantile.panel:population_quantile", (),
         "evaluates every training device at one model w_t each round"),
    # another estimator's η̂ moved by a known dose (a dose-response, not a server's); its
    # base hook names the estimator it wraps (estimator.shifted.base)
    _own("shifted", "simfl.quantile.dose:shifted", reads=("shifted",),
         base="simfl.quantile.dose:base"),
    # survey sampling (simfl/quantile/survey.py): raking to region and check-in margins,
    # IPW and post-strata on empirical-Bayes online rates
    _own("rake", "simfl.quantile.survey:rake", reads=("rake", *_CHECKINS)),
    _own("ipw_shrunk", "simfl.quantile.survey:ipw_shrunk", reads=("ipw_shrunk", *_CHECKINS)),
    _own("poststrat_shrunk", "simfl.quantile.survey:poststrat_shrunk",
         reads=("poststrat_shrunk", *_CHECKINS)),
    # Chambers-Dunstan: the cohort and every device's last loss report (max_age rounds)
    _own("model_assisted", "simfl.quantile.assisted:model_assisted", reads=("model_assisted",)),
])
# Each mode's factory and hooks: simfl.population.modes (habits: diurnal, each device with
# its own propensity, phase and session length). The keys each reads beyond mode.
_MODES = "simfl.population.modes"
_DIURNAL = ("online_prob_by_hour", "session_mean_s", "horizon_s")
AVAILABILITY = Registry("availability", [
    _own("always", f"{_MODES}:always", rates=f"{_MODES}:always_rates",
         profile=f"{_MODES}:always_profile", intervals=f"{_MODES}:always_interval_count"),
    _own("diurnal", f"{_MODES}:diurnal", reads=_DIURNAL, rates=f"{_MODES}:profile_rates",
         profile=f"{_MODES}:diurnal_profile", intervals=f"{_MODES}:diurnal_interval_count"),
    _own("habits", f"{_MODES}:habits", reads=("habits", *_DIURNAL),
         populate=f"{_MODES}:populate_habits", habits=f"{_MODES}:device_habits",
         rates=f"{_MODES}:profile_rates", intervals=f"{_MODES}:habits_interval_count"),
    _own("trace", f"{_MODES}:trace", reads=("trace_path", "trace_mapping",
                                            "trace_covariate_correlation"),
         populate=f"{_MODES}:populate_trace", rates=f"{_MODES}:trace_rates",
         intervals=f"{_MODES}:trace_interval_count",
         check_devices="simfl.population.trace_map:check_trace_devices"),
])
REGISTRIES = {r.point: r for r in (AGGREGATORS, MODELS, DATASETS, ESTIMATORS, AVAILABILITY)}
# The scenario key that names each point's plug-in (estimators: also estimator.shadow).
KEYS = {"data.dataset": DATASETS, "model.name": MODELS, "aggregator.name": AGGREGATORS,
        "estimator.name": ESTIMATORS, "estimator.shadow": ESTIMATORS,
        "population.availability.mode": AVAILABILITY}

register_aggregator = AGGREGATORS.register
register_model = MODELS.register
register_dataset = DATASETS.register
register_estimator = ESTIMATORS.register
register_availability = AVAILABILITY.register


def registered_filters_by_threshold(rule: str) -> bool:
    """:func:`filters_by_threshold` for a name registered in this process, False for any
    other: for readers of a run (plots, study tables), which import nothing it names."""
    known = AGGREGATORS.table.get(rule)
    return known is not None and known.filters_by_threshold


def filters_by_threshold(rule: str, source: str = "<scenario>") -> bool:
    """Whether the aggregation rule named ``rule`` trains the reporters at or above the
    estimator panel's threshold (Δ-FL's filter; :class:`Plugin`): what makes a run build
    the panel, write bias.parquet and count the panel's memory."""
    return AGGREGATORS.lookup(rule, "aggregator.name", source).filters_by_threshold
