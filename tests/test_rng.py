"""Keyed counter-based streams (rng.KeyedStreams) against a scalar reference: SplitMix64
in Python integers, Box-Muller in float64 from the same bits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simfl.rng import GAMMA, KeyedStreams, Streams

MASK = 2**64 - 1


def mix64(z: int) -> int:
    """SplitMix64's finaliser (Stafford's Mix13), one Python integer."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def word(seed_word: int, key: int, i: int) -> int:
    base = mix64((seed_word + (key + 1) * GAMMA) & MASK)
    return mix64((base + (i + 1) * GAMMA) & MASK)


def normal_pair(w: int) -> tuple[float, float]:
    u1 = 1 - (w >> 41) * 2.0**-23  # the high 23 bits
    u2 = ((w & 0xFFFFFFFF) >> 9) * 2.0**-23  # the high 23 bits of the low 32
    r = math.sqrt(-2 * math.log(u1))
    return r * math.cos(2 * math.pi * u2), r * math.sin(2 * math.pi * u2)


def test_the_words_are_splitmix64_from_each_key_s_base() -> None:
    streams = KeyedStreams(0x1234_5678_9ABC_DEF0)
    keys, counts = np.array([5, 0, 2**40, 5]), np.array([3, 1, 2, 0])
    got = np.concatenate(list(streams.words(keys, 7, counts)))
    want = [word(streams.word, int(k), 7 + i) for k, n in zip(keys, counts, strict=True)
            for i in range(n)]
    assert got.dtype == np.uint64 and got.tolist() == want
    # SplitMix64 seeded with 0 (Vigna's splitmix64.c): its first output
    assert mix64(GAMMA) == 0xE220A8397B1DCDAF


def test_normals_are_box_muller_of_the_words_in_float32() -> None:
    streams = Streams(3).keyed("test")
    keys, counts = np.array([9, 1]), np.array([500, 3])
    out = np.empty(2 * counts.sum(), np.float32)
    streams.normals(keys, 2, counts, out)
    words = [word(streams.word, int(k), 2 + i) for k, n in zip(keys, counts, strict=True)
            for i in range(n)]
    want = np.array([z for w in words for z in normal_pair(w)])
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-5)
    uniforms = streams.uniforms(keys, 4)
    assert uniforms.tolist() == [(word(streams.word, int(k), 4) >> 11) * 2.0**-53 for k in keys]


def test_a_key_s_normals_are_the_same_alone_or_among_others_and_normal() -> None:
    streams = Streams(0).keyed("test")
    keys = np.arange(300)
    counts = np.random.default_rng(0).integers(0, 200, len(keys))
    together = np.empty(2 * counts.sum(), np.float32)
    streams.normals(keys, 5, counts, together)
    bounds = np.concatenate([[0], 2 * np.cumsum(counts)])
    for j in (0, 17, 299):
        alone = np.empty(2 * counts[j], np.float32)
        streams.normals(keys[j:j + 1], 5, counts[j:j + 1], alone)
        assert (alone == together[bounds[j]:bounds[j + 1]]).all()
    # the same draws further on in the key's stream: words 5.. are words 0.. shifted
    longer = np.empty(2 * (counts[17] + 5), np.float32)
    streams.normals(keys[17:18], 0, counts[17:18] + 5, longer)
    assert (longer[10:] == together[bounds[17]:bounds[18]]).all()
    # moments of N(0, 1) (about 4 standard errors over ~60,000 draws), the 5.65 bound
    assert abs(together.mean()) < 0.02 and abs(together.std() - 1) < 0.015
    assert abs(np.mean(together.astype(np.float64) ** 4) - 3) < 0.1
    assert np.abs(together).max() <= 5.66


def test_seeds_for_many_keys_equal_seed_key_by_key() -> None:
    """Streams.seeds (SeedSequence's last-word mixing in numpy) against Streams.seed, which
    builds one numpy SeedSequence per key: root seeds of one to four uint32 words, spawn
    prefixes of none to two keys (one of two words), last keys at both ends of [0, 2^32)."""
    rng = np.random.default_rng(1)
    for root in (0, 7, 2**32 - 1, 2**32, 2**64 + 3, 2**100 + 7):
        streams = Streams(root)
        for keys in ((), (5,), (2**32 + 1,), (3, 4)):
            last = rng.integers(0, 2**32, 40)
            last[:3] = (0, 1, 2**32 - 1)
            expected = [streams.seed("shuffle", *keys, int(k)) for k in last]
            assert streams.seeds("shuffle", *keys, last=last).tolist() == expected


def test_seeds_refuse_a_last_key_of_more_than_one_word() -> None:
    with pytest.raises(ValueError, match="2\\^32"):
        Streams(0).seeds("shuffle", 1, last=np.array([2**32]))
