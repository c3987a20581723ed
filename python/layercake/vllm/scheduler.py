"""The scheduler side of the connector: which request transfers what, and
when. It holds no sockets: it parses each request's kv_transfer_params once
(protocol.parse), tells the worker side what to do through LayercakeMeta,
and learns from LayercakeWorkerMeta and vLLM's finished sets.

A request whose kv_transfer_params are refused (protocol.BadRequest, a
duplicate room, any unexpected error while handling it) is failed alone:
the scheduler reports it as an asynchronous load, the worker reports that
load failed, and vLLM finishes the request with an error
(kv_load_failure_policy "fail", vLLM's default; "recompute" runs it with no
transfer). The engine keeps serving."""
from vllm.v1.request import RequestStatus

from . import protocol
from .metadata import LayercakeMeta, LayercakeWorkerMeta
from .stats import Counters, LayercakeStats, ratelog


class _Req:
    __slots__ = ("t", "request")

    def __init__(self, t, request):
        self.t, self.request = t, request


class SchedulerSide:

    def __init__(self, cfg, producer, tp_size, block_size, per_layer, engine_id, groups):
        self.cfg, self.producer = cfg, producer
        self.groups = groups  # groups.Groups: vLLM's KV cache groups, one page list
        self.tp_size, self.block_size, self.per_layer = tp_size, block_size, per_layer
        self.engine_id = engine_id
        own = cfg.bootstrap
        self.policy = (protocol.AddressPolicy(cfg.allowed_bootstrap)
                       if cfg.allowed_bootstrap is not None
                       else protocol.AddressPolicy.default(own))
        self.bootstrap_addr = None  # P: learnt from the worker (same process or config)
        self.counters = Counters()
        self.kvstats = LayercakeStats()
        self.kv_cache_manager = None
        self._reqs = {}          # req_id -> _Req
        self._rooms = {}         # room -> req_id, live rooms of this engine
        self._rejected = {}      # req_id -> reason, until vLLM finishes the request
        self._new_rooms = {}     # P: rooms to open in the worker
        self._ready = {}         # P: req_id -> True bootstrapped / False failed
        self._boot_count = {}    # P: req_id -> TP ranks bootstrapped so far
        self._pending_recv = {}  # D: req_id -> receive args for the next metadata
        self._aborts = {}        # req_id -> True: cancel, report when final; False: drop
        self._rejects = {}       # req_id -> reason, for the next metadata
        self._sent_chunk = set()  # P: req_ids whose last chunk went out
        self._sent_blocks = {}   # P: req_id -> blocks sent in earlier chunks
        self._sending = set()    # P: finished, blocks held until the worker reports
        self._delayed_new = set()  # P: put in _sending since the last metadata
        self._await_first = {}   # D: req_id -> room, KV granted, first forward not yet run

    # ---- the edge ----

    def reject(self, rid, reason, kind):
        """Fail request rid alone with `reason` (logged at a rate limit and
        counted by kind)."""
        self.counters.add("requests_refused")
        self.counters.add("requests_refused_" + kind)
        self.kvstats.count("refused_" + kind)
        ratelog.warning("refused-" + kind, "layercake: request %s refused: %s", rid, reason)
        self._forget(rid)
        self._rejected[rid] = reason

    def on_new_request(self, request):
        rid = request.request_id
        try:
            t = protocol.parse(protocol.raw_params(request), self.producer, self.policy,
                               self.cfg.require_pairing, self.cfg.bootstrap)
        except protocol.BadRequest as e:
            return self.reject(rid, str(e), e.kind)
        if t is None:
            return
        if rid in self._reqs:
            return self.reject(rid, "request id already has a transfer", "duplicate")
        if t.room in self._rooms:
            # Refused without disturbing the request that holds the room.
            return self.reject(rid, f"room {t.room} is already live on this engine", "duplicate")
        self._reqs[rid] = _Req(t, request)
        self._rooms[t.room] = rid
        self.counters.add("requests_accepted")
        if self.producer:
            self._new_rooms[rid] = (t.room, t.pair)

    def _forget(self, rid):
        ent = self._reqs.pop(rid, None)
        if ent is not None and self._rooms.get(ent.t.room) == rid:
            del self._rooms[ent.t.room]
        for d in (self._new_rooms, self._ready, self._boot_count, self._pending_recv,
                  self._await_first, self._sent_blocks):
            d.pop(rid, None)
        return ent

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        rid = request.request_id
        if rid in self._rejected:
            # Reported as an asynchronous load that the worker then fails.
            n = len(request.prompt_token_ids or ()) - num_computed_tokens
            return (n, True) if n > 0 else (0, False)
        if rid not in self._reqs:
            return 0, False
        if self.producer:
            # P never waits for D: the prefill runs now; the engine holds the
            # chunks of a room D has not reached yet and sends them when it does.
            return 0, False
        n = len(request.prompt_token_ids or ()) - num_computed_tokens
        if self.per_layer:
            # Synchronous load: vLLM schedules the request in this step and
            # computes the last prompt token itself (it samples from it), so
            # the connector provides all but that one.
            n -= 1
            return (n, False) if n > 0 else (0, False)
        return (n, True) if n > 0 else (0, False)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        rid = request.request_id
        if rid in self._rejected:
            if num_external_tokens > 0:
                self._rejects[rid] = self._rejected[rid]
            return
        ent = self._reqs.get(rid)
        if self.producer or ent is None or num_external_tokens <= 0:
            return
        prompt = len(request.prompt_token_ids or ())
        # D's own tokens, block aligned (per_layer: vLLM computes the last one)
        prefix = prompt - num_external_tokens - (1 if self.per_layer else 0)
        ids = blocks.get_block_ids()
        first, last = prefix // self.block_size, -(-prompt // self.block_size)
        t = ent.t
        index, pages = self.groups.pages(ids, first, last, prompt)
        if not self.groups.plain and prefix % self.block_size == 0:
            # D's prefix in the engine's terms: the list's pages before D's
            # first (groups.py); a prefix that is not whole blocks stays as
            # it is, for Receiver.send to refuse.
            prefix = index * self.block_size
        self._pending_recv[rid] = (t.bootstrap, t.room, t.pair, pages, prefix,
                                   self.per_layer)
        self._await_first[rid] = t.room

    def build_connector_meta(self, scheduler_output):
        m = LayercakeMeta(open_rooms=self._new_rooms, receives=self._pending_recv,
                          aborts=self._aborts, rejects=self._rejects)
        self._new_rooms, self._pending_recv, self._aborts, self._rejects = {}, {}, {}, {}
        m.delayed, self._delayed_new = self._delayed_new, set()
        m.scheduled = scheduler_output.total_num_scheduled_tokens
        for rid in list(self._await_first):
            if rid in scheduler_output.num_scheduled_tokens:
                m.first_compute[rid] = self._await_first.pop(rid)
        if self.producer:
            for rid, n in scheduler_output.num_scheduled_tokens.items():
                ent = self._reqs.get(rid)
                if ent is None or rid in self._sent_chunk or self._ready.get(rid) is False:
                    continue  # a room that failed before D came: nothing to send
                c = self._chunk_of(rid, ent, n)
                if c is not None:
                    m.chunks[rid] = c
        return m

    def _chunk_of(self, rid, ent, n):
        """(room, block ids, list index of the first, is_last) of the
        blocks this step completes, so that each prefill chunk's KV leaves
        layer by layer in the step that computes it. A block the chunk only
        starts goes with the next chunk: each block is sent once, whole,
        every KV cache group's (groups.py)."""
        req = ent.request
        prompt = req.num_prompt_tokens
        end = req.num_computed_tokens + n
        last = end >= prompt
        upto = -(-prompt // self.block_size) if last else end // self.block_size
        sent = self._sent_blocks.get(rid, 0)
        if upto <= sent and not last:
            return None
        ids = self.kv_cache_manager.get_block_ids(rid)
        self._sent_blocks[rid] = upto
        if last:
            self._sent_chunk.add(rid)
            self._sent_blocks.pop(rid, None)
        index, pages = self.groups.pages(ids, sent, upto, prompt)
        return ent.t.room, pages, index, last

    def update_connector_output(self, connector_output):
        wm = connector_output.kv_connector_worker_meta
        if isinstance(wm, LayercakeWorkerMeta):
            if wm.bootstrap_addr:
                self.bootstrap_addr = wm.bootstrap_addr
            for rid, n in wm.bootstrapped.items():
                if rid not in self._reqs or self._ready.get(rid) is not None:
                    continue
                if n < 0:
                    self._ready[rid] = False
                    continue
                got = self._boot_count.get(rid, 0) + n
                self._boot_count[rid] = got
                if got >= self.tp_size:  # every P rank's room: send
                    self._ready[rid] = True
                    self._boot_count.pop(rid, None)
        done = set(connector_output.finished_sending or ())
        if done:
            self._sending -= done
            for room in [r for r, rid in self._rooms.items() if rid in done]:
                del self._rooms[room]

    def has_pending_push_work(self):
        return self.producer and bool(self._sending)

    def request_finished(self, request, block_ids=None):
        """vLLM's request_finished and, with its hybrid KV cache manager,
        request_finished_all_groups (block_ids one list per group): the
        blocks are the scheduler's own record either way."""
        rid = request.request_id
        if self._rejected.pop(rid, None) is not None:
            self._rejects.pop(rid, None)
            return False, None
        if rid not in self._reqs:
            return False, None
        was_new = rid in self._new_rooms
        started = rid in self._sent_blocks  # some chunks out, not the last
        ent = self._forget(rid)
        aborted = request.status == RequestStatus.FINISHED_ABORTED
        if self.producer:
            if was_new:
                # The worker has not opened the room yet: it opens and drops it
                # in the same step, so that a D already waiting hears now.
                self._new_rooms[rid] = (ent.t.room, ent.t.pair)
                self._aborts[rid] = False
                return False, None
            if rid in self._sent_chunk or started:
                # Free only once D has every byte, or the room ended otherwise.
                self._sent_chunk.discard(rid)
                self._sending.add(rid)
                self._delayed_new.add(rid)
                # The room stays live (a second request for it is refused)
                # until its blocks come back.
                self._rooms[ent.t.room] = rid
                if aborted:
                    self._aborts[rid] = True
                return True, self._reply(ent)
            self._aborts[rid] = False  # held, never sent: cancel the room, nothing to wait for
            return False, None
        # D: the worker ignores a room it has already finished; one still
        # waiting is cancelled and reported (vLLM delays the free until then).
        self._aborts[rid] = True
        return False, None

    def _reply(self, ent):
        if self.bootstrap_addr is None:
            return None
        return ent.t.reply(self.bootstrap_addr, self.engine_id)
