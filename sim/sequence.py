"""A request's state inside a :class:`~sim.engine.ServerEngine`."""

from __future__ import annotations

from headroom.sim.request import SimRequest


class SeqState:
    """A request inside the engine: its progress through prefill and decode (mutable, engine-private).

    While decoding, progress is kept lazily: ``kv`` and ``generated`` are as of joining the decoders
    (``kv_join``, ``gen_join`` at decode step ``g_join``); the engine derives the current values from its
    decode-step counter.
    """

    __slots__ = ("request", "uid", "target", "kv", "blocks", "held", "hashing", "generated", "decoding",
                 "g_join", "kv_join", "gen_join", "epoch", "submitted_s", "first_token_s", "cached_tokens",
                 "preemptions", "queried", "times")

    def __init__(self, request: SimRequest, uid: int, now: float):
        self.request = request
        self.uid = uid
        self.target = request.prompt_tokens  # tokens to prefill (prompt, plus generated ones after preemption)
        self.kv = 0
        self.blocks = 0
        self.held: list[int] = []  # hashes of the leading prompt blocks this sequence references
        self.hashing = True
        self.generated = 0
        self.decoding = False
        self.g_join = self.kv_join = self.gen_join = 0
        self.epoch = 0
        self.submitted_s = now
        self.first_token_s: float | None = None
        self.cached_tokens = 0
        self.preemptions = 0
        self.queried = False
        self.times: list[float] = []  # every token's time, when the engine records them

    def clone(self) -> SeqState:
        twin = object.__new__(SeqState)
        for name in SeqState.__slots__:
            setattr(twin, name, getattr(self, name))
        twin.held = list(self.held)
        twin.times = list(self.times)
        return twin
