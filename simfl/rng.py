"""One root seed, independent named random streams.

Every random draw in simfl comes from a stream keyed by (purpose, *keys), e.g.
``streams.numpy("selection", round_idx)`` or ``streams.seed("shuffle", round_idx,
client_id)``. Streams are derived with :class:`numpy.random.SeedSequence`, so two
keys never share a stream, and adding a new purpose never changes the draws of
an existing one. Library code never touches a global random state.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


def _purpose_key(purpose: str) -> int:
    # A stable 32-bit key per purpose name (Python's hash() is salted per process).
    return int.from_bytes(hashlib.sha256(purpose.encode()).digest()[:4], "little")


@dataclass(frozen=True)
class Streams:
    """Factory of named random streams derived from one root seed."""

    root_seed: int

    def sequence(self, purpose: str, *keys: int) -> np.random.SeedSequence:
        spawn_key = (_purpose_key(purpose), *(int(k) for k in keys))
        return np.random.SeedSequence(entropy=self.root_seed, spawn_key=spawn_key)

    def numpy(self, purpose: str, *keys: int) -> np.random.Generator:
        """A numpy Generator for ``purpose`` keyed by ``keys`` (round, client, ...)."""
        return np.random.Generator(np.random.PCG64(self.sequence(purpose, *keys)))

    def seed(self, purpose: str, *keys: int) -> int:
        """A 63-bit integer seed (for a ``torch.Generator``) for ``purpose`` and ``keys``."""
        return int(self.sequence(purpose, *keys).generate_state(1, dtype=np.uint64)[0] >> 1)

    def seeds(self, purpose: str, *keys: int, last: np.ndarray) -> np.ndarray:
        """(m,) int64: ``seed(purpose, *keys, k)`` for each k of ``last`` (each < 2^32), bit
        for bit, computed for all of them at once. SeedSequence (O'Neill's seed_seq
        alternative, as numpy implements it in ``numpy/random/bit_generator.pyx``) hashes
        its entropy words into a pool of 4 uint32 in order, the words after the first four
        each mixed into every pool entry with hash constants that depend only on their
        position; so the pool of ``(*keys, k)`` is the pool of ``keys`` with the one word k
        mixed in (:func:`_mix_last`), then its first two state words hashed out
        (:func:`_state64`)."""
        last = np.asarray(last, dtype=np.int64)
        if len(last) and (last.min() < 0 or last.max() >= 2**32):
            raise ValueError("seeds: every key of 'last' must be in [0, 2^32)")
        prefix = self.sequence(purpose, *keys)
        words = max(_num_words(self.root_seed), _POOL) + sum(map(_num_words, prefix.spawn_key))
        calls = _POOL + _POOL * (_POOL - 1) + _POOL * (words - _POOL)  # hashmixes so far
        pool = _mix_last(prefix.pool, last.astype(np.uint32), _INIT_A * pow(_MULT_A, calls, 2**32))
        return (_state64(pool) >> np.uint64(1)).astype(np.int64)

    def keyed(self, purpose: str) -> KeyedStreams:
        """Streams of ``purpose`` keyed by one integer (a device), computed for many keys at
        once (:class:`KeyedStreams`)."""
        return KeyedStreams(int(self.sequence(purpose).generate_state(1, np.uint64)[0]))


# SeedSequence's constants (numpy/random/bit_generator.pyx, after O'Neill's seed_seq)
_POOL, _XSHIFT = 4, np.uint32(16)
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = np.uint32(0xCA01F9DD), np.uint32(0x4973F715)


def _num_words(n: int) -> int:
    """How many uint32 words SeedSequence makes of the integer ``n`` >= 0."""
    return max(1, (int(n).bit_length() + 31) // 32)


def _mix_last(pool: np.ndarray, word: np.ndarray, hash_const: int) -> np.ndarray:
    """(m, 4) uint32: the 4-word ``pool`` with each of the (m,) ``word`` mixed in as
    SeedSequence mixes an entropy word past the first four (``hash_const``: the hash
    constant before that word's first hashmix)."""
    out = np.empty((len(word), _POOL), np.uint32)
    with np.errstate(over="ignore"):
        for dst in range(_POOL):
            value = word ^ np.uint32(hash_const % 2**32)
            hash_const = hash_const * _MULT_A % 2**32
            value *= np.uint32(hash_const)
            value ^= value >> _XSHIFT
            mixed = _MIX_L * np.uint32(pool[dst]) - _MIX_R * value
            out[:, dst] = mixed ^ (mixed >> _XSHIFT)
    return out


def _state64(pool: np.ndarray) -> np.ndarray:
    """(m,) uint64: ``generate_state(1, np.uint64)`` of each (m, 4) uint32 pool."""
    state = np.empty((len(pool), 2), np.uint32)
    hash_const = _INIT_B
    with np.errstate(over="ignore"):
        for i in range(2):
            value = pool[:, i] ^ np.uint32(hash_const)
            hash_const = hash_const * _MULT_B % 2**32
            value *= np.uint32(hash_const)
            state[:, i] = value ^ (value >> _XSHIFT)
    return state.view(np.uint64)[:, 0]  # two uint32 read as one, as numpy's view does


GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment: 2^64 / the golden ratio, odd
MASK = 2**64 - 1
# Stafford's "Mix13" finaliser of SplitMix64: (shift, multiplier) pairs, then a last shift
_MIX = ((np.uint64(30), np.uint64(0xBF58476D1CE4E5B9)), (np.uint64(27),
                                                         np.uint64(0x94D049BB133111EB)))
_LAST = np.uint64(31)
BLOCK = 1 << 15  # words made together: their temporaries stay in a core's cache
_STEPS = np.arange(BLOCK, dtype=np.uint64) * np.uint64(GAMMA)  # p γ, p < BLOCK
_STEPS.flags.writeable = False
# A uniform's 23 bits set in a float32's mantissa (exponent of 1.0): a float in [1, 2)
_ONE_BITS, _MANTISSA = np.uint32(0x3F800000), np.uint32(9)
# Which uint32 of a uint64 (viewed as two) holds its high half
_HIGH = 1 if sys.byteorder == "little" else 0


def mix64(z: np.ndarray, tmp: np.ndarray) -> None:
    """SplitMix64's finaliser, in place over uint64 ``z`` (``tmp``: scratch of its shape)."""
    for shift, multiplier in _MIX:
        np.right_shift(z, shift, out=tmp)
        np.bitwise_xor(z, tmp, out=z)
        np.multiply(z, multiplier, out=z)
    np.right_shift(z, _LAST, out=tmp)
    np.bitwise_xor(z, tmp, out=z)


class KeyedStreams:
    """Counter-based random streams keyed by an integer (a device): word i of key k is
    SplitMix64's output i from a seed of its own (Steele, Lea & Flood, "Fast splittable
    pseudorandom number generators", OOPSLA 2014),

        word(k, i) = mix64(base_k + (i + 1) γ),   base_k = mix64(w + (k + 1) γ),

    γ = 0x9E3779B97F4A7C15, mix64 Stafford's Mix13 finaliser, w a word of the purpose's
    SeedSequence, all modulo 2^64. A word is a pure function of (seed, purpose, k, i),
    made with numpy array arithmetic for any set of keys at once (no generator object per
    key), so a key alone, in a cohort or in a chunk of keys gets the same words, and
    element-wise float32 arithmetic makes the same numbers from them.

    :meth:`normals`: word i gives the standard normals 2i and 2i + 1 by Box-Muller in
    float32, (r cos θ, r sin θ) with r = sqrt(-2 ln u1), θ = 2π u2, u1 = 1 - a 2^-23 from
    the word's high 23 bits a (so u1 in (0, 1] and |z| <= 5.65), u2 = b 2^-23 from the
    high 23 bits b of its low 32. :meth:`uniforms`: a word's high 53 bits / 2^53.
    """

    def __init__(self, word: int) -> None:
        self.word = word % 2**64

    def bases(self, keys: np.ndarray) -> np.ndarray:
        """(m,) uint64 base_k of each key."""
        z = np.asarray(keys, dtype=np.uint64) + np.uint64(1)
        np.multiply(z, np.uint64(GAMMA), out=z)
        np.add(z, np.uint64(self.word), out=z)
        mix64(z, np.empty_like(z))
        return z

    def words(self, keys: np.ndarray, start: int, counts: np.ndarray) -> Iterator[np.ndarray]:
        """Words start .. start + counts[j] - 1 of each key j, concatenated in that order,
        in consecutive blocks of at most :data:`BLOCK` (uint64)."""
        counts = np.asarray(counts, dtype=np.int64)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.uint64)
        # word p of the output, of key j: mix64(c_j + p γ), c_j = base_j + (start + 1) γ - first_j γ
        gamma = np.uint64(GAMMA)
        c = self.bases(keys) + np.uint64((start + 1) * GAMMA & MASK) - first * gamma
        c = np.repeat(c, counts)
        tmp = np.empty(BLOCK, np.uint64)
        for begin in range(0, len(c), BLOCK):
            z = c[begin:begin + BLOCK]
            np.add(z, _STEPS[:len(z)], out=z)
            np.add(z, np.uint64(begin * GAMMA & MASK), out=z)
            mix64(z, tmp[:len(z)])
            yield z

    def uniforms(self, keys: np.ndarray, index: int) -> np.ndarray:
        """(m,) float64 uniform in [0, 1) from word ``index`` of each key."""
        z = np.concatenate(list(self.words(keys, index, np.ones(len(keys), np.int64))))
        return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def normals(self, keys: np.ndarray, start: int, counts: np.ndarray,
                out: np.ndarray) -> None:
        """Standard normals 2 start .. 2 (start + counts[j]) - 1 of each key j into
        ``out`` (float32, 2 sum(counts) values, contiguous), concatenated in that order."""
        pairs = out.reshape(-1, 2)
        if len(pairs) != int(np.sum(counts)):
            raise ValueError(f"{np.sum(counts)} words make {2 * np.sum(counts)} normals, "
                             f"not {out.size}")
        begin = 0
        scratch = np.empty((3, min(BLOCK, len(pairs))), np.float32)
        for z in self.words(keys, start, counts):
            _box_muller(z, pairs[begin:begin + len(z)], scratch[:, :len(z)])
            begin += len(z)


def _box_muller(words: np.ndarray, pairs: np.ndarray, scratch: np.ndarray) -> None:
    """(n,) uint64 words (overwritten) -> (n, 2) float32 standard normals (KeyedStreams'
    docstring); ``scratch``: (3, n) float32."""
    bits = words.view(np.uint32)  # each word's two halves
    np.right_shift(bits, _MANTISSA, out=bits)
    np.bitwise_or(bits, _ONE_BITS, out=bits)  # floats in [1, 2)
    halves = bits.view(np.float32).reshape(-1, 2)
    radius, angle, cosine = scratch
    np.subtract(np.float32(2), halves[:, _HIGH], out=radius)  # u1 in (0, 1]
    np.log(radius, out=radius)
    np.multiply(radius, np.float32(-2), out=radius)
    np.sqrt(radius, out=radius)
    np.subtract(halves[:, 1 - _HIGH], np.float32(1), out=angle)  # u2 in [0, 1)
    np.multiply(angle, np.float32(2 * np.pi), out=angle)
    np.cos(angle, out=cosine)
    np.multiply(cosine, radius, out=pairs[:, 0])
    np.sin(angle, out=angle)
    np.multiply(angle, radius, out=pairs[:, 1])
