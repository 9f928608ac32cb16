"""A test-only workload whose requests all begin with one shared prefix (prefix-cache tests).

Minimal on purpose: request ``i`` is ``prefix_tokens`` fixed token ids followed by the request
that the spec's own workload would send. A later issue builds real prefix workloads in the spec.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tokenwatt.client.openai import GenerationRequest
from tokenwatt.load.workload import Workload


class SharedPrefixWorkload(Workload):
    """Every request is the same ``prefix_tokens`` token ids, then the base request's own."""

    prefix_tokens: int = 0

    @classmethod
    def around(cls, base: Workload, *, prefix_tokens: int) -> SharedPrefixWorkload:
        """The base workload with a shared prefix of ``prefix_tokens`` token ids."""
        shared = cls.__new__(cls)
        shared.__dict__.update(base.__dict__)
        shared.prefix_tokens = prefix_tokens
        return shared

    def request(self, index: int, *, stream: int = 0) -> GenerationRequest:
        own = super().request(index, stream=stream)
        assert own.prompt_ids is not None, "completions API only"
        rng = np.random.Generator(np.random.PCG64(self.seed))
        low, high = self._id_low, self._id_high
        prefix = rng.integers(low, high, size=self.prefix_tokens).tolist()
        return dataclasses.replace(
            own,
            prompt_ids=prefix + list(own.prompt_ids),
            input_tokens=self.prefix_tokens + own.input_tokens,
        )
