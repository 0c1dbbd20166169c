#!/usr/bin/env python3
"""Independent implementation of the permutation documented in spmd/data.h
(splitmix64 -> xoshiro256** -> Lemire bounded draws -> Fisher-Yates) and of
torch's DistributedSampler index arithmetic.  Prints the vectors that
tests/unit/test_data_sampler.c checks, so the documentation, this script and
the C code must agree.  Run: python3 tests/data/sampler_reference.py"""

M = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M


class Xoshiro:
    def __init__(self, seed):
        st = seed & M
        self.s = []
        for _ in range(4):
            st, v = splitmix64(st)
            self.s.append(v)

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, bound):
        m = self.next() * bound
        low = m & M
        if low < bound:
            threshold = ((1 << 64) - bound) % bound
            while low < threshold:
                m = self.next() * bound
                low = m & M
        return m >> 64


def permutation(n, seed):
    perm = list(range(n))
    r = Xoshiro(seed)
    for i in range(n - 1, 0, -1):
        j = r.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def distributed_indices(n, w, rank, shuffle, seed, epoch, drop_last):
    """torch/utils/data/distributed.py, with our permutation for randperm."""
    import math
    if drop_last and n % w != 0:
        num_samples = math.ceil((n - w) / w)
    else:
        num_samples = math.ceil(n / w)
    total = num_samples * w
    indices = permutation(n, seed + epoch) if shuffle else list(range(n))
    if not drop_last:
        pad = total - len(indices)
        if pad <= len(indices):
            indices += indices[:pad]
        else:
            indices += (indices * math.ceil(pad / len(indices)))[:pad]
    else:
        indices = indices[:total]
    return indices[rank:total:w]


if __name__ == "__main__":
    print("permutation(10, 42) =", permutation(10, 42))
    print("permutation(16, 0) =", permutation(16, 0))
    print("first xoshiro output for seed 0 =", hex(Xoshiro(0).next()))
    for rank in range(3):
        print(f"sampler(n=10, w=3, rank={rank}, shuffle, seed=7, epoch=2) =",
              distributed_indices(10, 3, rank, True, 7, 2, False))
    for rank in range(4):
        print(f"sampler(n=10, w=4, rank={rank}, shuffle, seed=7, epoch=2, drop_last) =",
              distributed_indices(10, 4, rank, True, 7, 2, True))
