"""Link sharing by path levels, kept incrementally (simfl.sim.links), against a full
recomputation of every rate (tests/sim/test_links.py's max_min_rates) on random
networks: the rates after every event, and the finish times and the bytes of cancelled
transfers against a fluid model that recomputes everything at every start, end and
cancellation."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import pytest
import simpy

from simfl.population.network import NetworkPaths
from simfl.sim.links import LinkSharing, can_bind
from tests.sim.test_links import make_paths, max_min_rates

SEEDS = range(40)


def random_network(rng: np.random.Generator, num_flows: int
                   ) -> tuple[NetworkPaths, np.ndarray, np.ndarray]:
    """1-4 links and 1-5 paths, each over any subset of the links (none: free), one device
    per transfer; capacities that a few transfers fill. Returns the paths, the (K, S)
    membership of each transfer and the capacities."""
    num_links, num_paths = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    path_links = [tuple(sorted(int(s) for s in rng.choice(
        num_links, size=int(rng.integers(0, num_links + 1)), replace=False)))
        for _ in range(num_paths)]
    capacity = rng.uniform(2.0, 15.0, num_links)
    caps = rng.lognormal(1.0, 0.8, num_flows)
    region = rng.integers(0, num_paths, num_flows)
    member = np.zeros((num_flows, num_links), dtype=bool)
    for k, r in enumerate(region):
        member[k, list(path_links[r])] = True
    paths = make_paths(list(caps), list(region), list(capacity), path_links)
    return paths, member, capacity


def fluid(caps: np.ndarray, member: np.ndarray, capacity: np.ndarray, starts: np.ndarray,
          sizes: np.ndarray, cancels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Brute force: every rate recomputed over all transfers and links at every start,
    end and cancellation. Returns finish times (NaN: cancelled first) and the bytes that
    had arrived at a cancellation (NaN: finished first)."""
    k = len(caps)
    remaining, ended = sizes.astype(float).copy(), np.zeros(k, dtype=bool)
    finish, arrived = np.full(k, np.nan), np.full(k, np.nan)
    t = 0.0
    while not ended.all():
        active = (starts <= t + 1e-12) & ~ended
        rates = np.zeros(k)
        if active.any():
            rates[active] = max_min_rates(caps[active], member[active], capacity)
        with np.errstate(divide="ignore"):
            t_done = np.where(active, t + remaining / np.where(active, rates, 1.0), np.inf)
        later = ~ended & (starts > t + 1e-12)
        cut_later = ~ended & (cancels > t + 1e-12)
        t_step = min(starts[later].min(initial=np.inf), cancels[cut_later].min(initial=np.inf),
                     t_done.min(initial=np.inf))
        remaining -= rates * (t_step - t)
        t = t_step
        done = active & (t_done <= t + 1e-9)
        finish[done], remaining[done] = t, 0.0
        ended |= done
        cut = ~ended & (cancels <= t + 1e-12)
        arrived[cut] = sizes[cut] - remaining[cut]
        ended |= cut
    return finish, arrived


def run_engine(paths: NetworkPaths, starts: np.ndarray, sizes: np.ndarray,
               cancels: np.ndarray, check_rates: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Uploads of device k from starts[k], cancelled at cancels[k] unless arrived; with
    ``check_rates`` (the (K, S) membership), every rate is compared with a full
    recomputation after every SimPy event."""
    env = simpy.Environment()
    net = LinkSharing(env, paths)
    k = len(starts)
    finish, arrived = np.full(k, np.nan), np.full(k, np.nan)
    events: dict[int, simpy.Event] = {}

    def job(i: int) -> Generator[simpy.Event, float, None]:
        yield env.timeout(starts[i])
        events[i] = net.transfer(i, sizes[i], "up")
        finish[i] = yield events[i]

    def canceller(i: int) -> Generator[simpy.Event, None, None]:
        yield env.timeout(cancels[i])
        if not events[i].triggered:
            arrived[i] = net.cancel(events[i])

    for i in range(k):
        env.process(job(i))
        if np.isfinite(cancels[i]):
            env.process(canceller(i))
    while env.peek() < np.inf:
        env.step()
        if check_rates is not None:
            assert_rates_max_min_fair(net, paths, check_rates)
    assert net.num_active == 0
    return finish, arrived


def assert_rates_max_min_fair(net: LinkSharing, paths: NetworkPaths, member: np.ndarray
                              ) -> None:
    """The running transfers' rates (min(cap, level) by path) equal the full
    recomputation of the same transfers' max-min fair rates."""
    running = [f for path in net._path for f in path.flows]
    if not running:
        return
    rows = np.array([int(np.flatnonzero(paths.access_bytes_per_s["up"] == f.cap)[0])
                     for f in running])
    got = np.array([f.path.level if f.grouped else f.cap for f in running])
    want = max_min_rates(paths.access_bytes_per_s["up"][rows], member[rows],
                         paths.link_capacity_bytes_per_s)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def random_jobs(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Starts (some at once), sizes, and a cancellation for a fifth of the transfers."""
    starts = np.round(rng.uniform(0.0, 20.0, k), 1)
    sizes = rng.uniform(1.0, 60.0, k)
    cancels = np.where(rng.random(k) < 0.2, starts + rng.uniform(0.0, 10.0, k), np.inf)
    return starts, sizes, cancels


@pytest.mark.parametrize("seed", SEEDS)
def test_finish_times_and_cancelled_bytes_match_full_recomputation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    paths, member, capacity = random_network(rng, 40)
    starts, sizes, cancels = random_jobs(rng, 40)
    got_finish, got_arrived = run_engine(paths, starts, sizes, cancels)
    want_finish, want_arrived = fluid(paths.access_bytes_per_s["up"], member, capacity,
                                      starts, sizes, cancels)
    np.testing.assert_allclose(got_finish, want_finish, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_arrived, want_arrived, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_rates_after_every_event_match_full_recomputation(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    paths, member, _ = random_network(rng, 30)
    starts, sizes, cancels = random_jobs(rng, 30)
    run_engine(paths, starts, sizes, cancels, check_rates=member)


def test_congestion_is_exercised() -> None:
    """The random networks above do share: in most of them some transfer runs below its
    cap (else the comparisons would only test free transfers)."""
    shared = 0
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        paths, member, capacity = random_network(rng, 40)
        caps = paths.access_bytes_per_s["up"]
        shared += bool((max_min_rates(caps, member, capacity) < caps * (1 - 1e-9)).any())
    assert shared >= len(SEEDS) // 2


def test_can_bind_by_hand() -> None:
    # Link 0 (the server's, 10 B/s) carries regions 0-2, each also behind a link of its
    # own: 10 B/s (as wide: it fills no sooner), 5 (thinner: it can bind), 20 (wider).
    assert can_bind([10.0, 10.0, 5.0, 20.0], [(1, 0), (2, 0), (3, 0)]) == [
        True, False, True, False]
    # The same paths and capacity: one of the two is kept, the one of lower index.
    assert can_bind([4.0, 4.0], [(0, 1), (1, 0)]) == [True, False]
    # A wider link that carries more paths than a thinner one is not dominated by it.
    assert can_bind([4.0, 9.0], [(0, 1), (1,)]) == [True, True]
    # A thin link that carries both paths leaves out the wider link of each.
    assert can_bind([1.0, 9.0, 9.0], [(0, 1), (0, 2)]) == [True, False, False]


def test_left_out_links_would_have_been_over_subscribed() -> None:
    """The random networks above leave out links that their transfers over-subscribe
    (so the comparisons with the full recomputation, which keeps every link, test
    leaving them out), and every path keeps a link it crosses that can bind."""
    exercised = 0
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        paths, member, capacity = random_network(rng, 40)
        crossing = [paths.region_links[d][r] for r in range(len(paths.region_links["up"]))
                    for d in ("down", "up")]
        binds = can_bind(list(capacity), crossing)
        assert all(any(binds[link] for link in links) for links in crossing if links)
        demand = member.T @ paths.access_bytes_per_s["up"]
        exercised += bool(any(not b and d > c for b, d, c in zip(binds, demand, capacity,
                                                                 strict=True)))
    assert exercised >= len(SEEDS) // 2  # 25 of the 40


def test_a_start_leaves_other_components_alone() -> None:
    # Regions 0 and 1 each behind a thin link of their own (the server link is wide):
    # two components. A start in region 1 refills region 1 only: region 0's transfers
    # keep their heap entries (versions) and their path's clock.
    paths = make_paths([10.0, 10.0, 10.0, 10.0, 10.0], [0, 0, 1, 1, 1], [5.0, 5.0, 1e6],
                       [(0, 2), (1, 2)])
    env = simpy.Environment()
    net = LinkSharing(env, paths)
    for device in (0, 1, 2, 3):
        net.transfer(device, 100.0, "up")
    region0 = net._path[1]  # path index 2 * region + 1: region 0, up
    before = ([f.version for f in region0.flows], region0.clock, region0.clock_s)
    env.run(until=1.0)
    net.transfer(4, 100.0, "up")
    assert ([f.version for f in region0.flows], region0.clock, region0.clock_s) == before
    assert region0.level == pytest.approx(2.5) and net._path[3].level == pytest.approx(5 / 3)


def test_transfers_on_free_paths_run_at_their_caps_exactly() -> None:
    # No link over-subscribed: each transfer ends at its start + bytes / cap, to the bit
    # of the SimPy clock's sum (latency 0, one timer each).
    caps = [3.0, 7.0, 11.0]
    paths = make_paths(caps, [0, 0, 1], [1e9, 1e9], [(0,), (1,)])
    env = simpy.Environment()
    net = LinkSharing(env, paths)
    done = [net.transfer(d, 10.0, "up") for d in range(3)]
    env.run()
    assert [e.value for e in done] == [10.0 / c for c in caps]


def test_a_path_emptied_under_sharing_starts_afresh() -> None:
    # Devices 0 (region 0) and 1, 2 (region 1) share link 0 (10 B/s), each at 10/3 B/s:
    # device 0's 5 B end at t = 1.5, leaving its path empty while link 0 stays
    # over-subscribed (1 and 2 at 5 B/s, their caps 8: they end at 1.5 + 25 / 5 = 6.5).
    # Then device 3 (region 0) is alone: it runs at its cap, 16 B in 2 s, not at the
    # level its path had before it emptied.
    paths = make_paths([8.0, 8.0, 8.0, 8.0], [0, 1, 1, 0], [10.0], [(0,), (0,)])
    env = simpy.Environment()
    net = LinkSharing(env, paths)
    first = [net.transfer(d, size, "up") for d, size in ((0, 5.0), (1, 30.0), (2, 30.0))]
    env.run()
    later = net.transfer(3, 16.0, "up")
    t0 = env.now
    env.run()
    assert [e.value for e in first] == pytest.approx([1.5, 6.5, 6.5])
    assert t0 == pytest.approx(6.5) and later.value == pytest.approx(8.5)
